"""Notebook 08's P3 grid (gpolib.lab.moe_grid): the cells, DESIGN's collapse, the per-cell measures on hand-made logs,
the likelihood movement of an update (`moe.update_ratios`) on hand-made log-probs, and the prefetch wiring."""
import math

import pytest
import torch

from gpolib import moe
from gpolib.lab import moe_grid as mg
from gpolib.lab import report
from gpolib.lab.report import NOT, PARTLY, REPRODUCED

FULL = dict(lr_mults=[1, 2, 3, 5, 10], mus=[1, 4, 8], modes=["lora", "full"], full_lr_scale=0.1, steps=6,
            eval_prompts=64)


def test_the_grid_has_designs_thirty_cells_with_scaled_lrs():
    arms = mg.grid_arms(**FULL)
    assert len(arms) == 30
    lora, full = arms["grid-lora-lr5x-mu4"], arms["grid-full-lr5x-mu4"]
    assert lora["lr"] == pytest.approx(1.5e-3) and full["lr"] == pytest.approx(1.5e-4)  # 5 x 3e-4, x 0.1
    assert lora["train_router"] is True and "lora_r" not in lora and full["lora_r"] == 0
    assert {a["warmup_steps"] for a in arms.values()} == {0} and {a["steps"] for a in arms.values()} == {6}
    assert {a["task_train"] for a in arms.values()} == {"data/tasks/val.jsonl"}
    assert {a["model"] for a in arms.values()} == {"data/models/tiny-qwen3-moe-floor"}
    assert sorted({a["mu"] for a in arms.values()}) == [1, 4, 8]
    assert mg.parse_cell("grid-full-lr10x-mu8") == {"mode": "full", "lr_mult": 10.0, "mu": 8}
    params = {"GRID_STEPS": 6, "GRID_LR_MULTS": [1, 2, 3, 5, 10], "GRID_MUS": [1, 4, 8], "GRID_MODES": ["lora", "full"],
              "GRID_FULL_LR_SCALE": 0.1, "GRID_EVAL_PROMPTS": 64}
    assert mg.grid_from_params(params) == arms
    assert mg.grid_from_params({**params, "GRID_STEPS": 0}) == {}


def test_collapse_is_five_consecutive_steps_below_the_base():
    assert mg.collapsed([0.4, 0.3, 0.3, 0.3, 0.3, 0.3], base=0.35)  # steps 1-5 below
    assert not mg.collapsed([0.3, 0.3, 0.3, 0.3, 0.4, 0.3], base=0.35)  # broken at step 4
    assert not mg.collapsed([0.3, 0.3, 0.3, 0.3], base=0.35)  # only 4 steps
    assert not mg.collapsed([0.35] * 6, base=0.35)  # equal is not below


def test_update_ratios_on_hand_made_logprobs():
    """Two responses, 2 and 1 completion tokens (third position padding). Token ratios 2, 1/2 | 1: log rho =
    (ln 2, -ln 2, 0): std (population) ln 2 * sqrt(2/3), max ratio 2, k3 mean ((2-1-ln2) + (0.5-1+ln2) + 0)/3;
    sequence log ratios (0, 0): spread 0 — GSPO's mean cancels what the tokens show."""
    old = torch.log(torch.tensor([[0.2, 0.4, 0.9], [0.5, 0.1, 0.1]]))
    new = torch.log(torch.tensor([[0.4, 0.2, 0.1], [0.5, 0.7, 0.3]]))
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    got = moe.update_ratios(old, new, mask)
    ln2 = math.log(2)
    assert got["moe/update_log_ratio_std"] == pytest.approx(ln2 * math.sqrt(2 / 3), rel=1e-6)
    assert got["moe/update_max_ratio"] == pytest.approx(2.0, rel=1e-6)
    assert got["moe/update_kl"] == pytest.approx(((1 - ln2) + (-0.5 + ln2)) / 3, rel=1e-5)
    assert got["moe/update_seq_log_ratio_std"] == pytest.approx(0.0, abs=1e-7)
    shifted = moe.update_ratios(old, old + torch.tensor([[0.3, 0.3, 9.0], [-0.1, 9.0, 9.0]]), mask)
    assert shifted["moe/update_seq_log_ratio_std"] == pytest.approx(0.2, rel=1e-5)  # (0.3, -0.1): std 0.2


def _step(t, reward, layers, **kw):
    return {"step": t, "reward/mean": reward, "moe/expert_change": sum(layers) / len(layers),
            **{f"moe/expert_change/l{i}": x for i, x in enumerate(layers)}, **kw}


def test_cell_measures_and_the_verdict_from_hand_made_cells():
    m = [_step(0, 0.4, [0.02, 0.06], **{"moe/update_kl": 0.01, "moe/update_log_ratio_std": 0.2,
                                        "moe/update_seq_log_ratio_std": 0.05, "moe/update_max_ratio": 3.0,
                                        "clip/frac": 0.1, "ratio/log_std": 0.1}),
         _step(1, 0.5, [0.04, 0.08], **{"moe/update_kl": 0.02, "moe/update_log_ratio_std": 0.4,
                                        "moe/update_seq_log_ratio_std": 0.07, "moe/update_max_ratio": 5.0,
                                        "clip/frac": 0.3, "ratio/log_std": 0.3})]
    c = mg.cell_measures(m, base_reward=0.42)
    assert c["per_layer"] == pytest.approx([0.03, 0.07]) and c["run_mean"] == pytest.approx(0.05)
    assert c["deepest"] == pytest.approx(0.07) and c["first_update"] == pytest.approx(0.04)
    assert c["token_log_ratio_std"] == pytest.approx(0.3) and c["seq_log_ratio_std"] == pytest.approx(0.06)
    assert c["max_token_ratio"] == 5.0 and c["first_kl"] == 0.01 and c["clip_frac"] == pytest.approx(0.2)
    assert c["rewards"] == [0.4, 0.5] and not c["collapsed"]
    arms = mg.grid_arms(**{**FULL, "lr_mults": [1, 10], "mus": [4], "modes": ["lora"]})
    low = [_step(t, 0.4, [0.01, 0.02]) for t in range(6)]
    dead = [_step(t, 0.4 if t == 0 else 0.0, [0.3, 0.4]) for t in range(6)]  # collapses after one update
    table = mg.grid_table({"grid-lora-lr1x-mu4/seed0": low, "grid-lora-lr10x-mu4/seed0": dead}, arms, 0.35)
    assert list(table.index) == ["grid-lora-lr1x-mu4", "grid-lora-lr10x-mu4"]
    assert table.loc["grid-lora-lr10x-mu4", "collapsed"] and not table.loc["grid-lora-lr1x-mu4", "collapsed"]
    cells = mg.grid_evidence(table)
    assert cells[0]["cell"] == "LoRA + router, lr 0.0003 (1x), mu 4" and cells[0]["run_mean"] == pytest.approx(0.015)
    e = {"expert_change_runs": [0.01], "expert_change_per_layer": [0.01, 0.02], "moe_experts": 64,
         "expert_change_frozen": [], "expert_change_coarse": [],
         "routing": {"uniform_share": 0.0156, "expert_share_min": [0.01, 0.01]}, "grid": cells}
    assert report.judge("P3", e).word == NOT  # the 35% cell collapsed: only the 1.5% cell is judged
    assert mg.layer_table(table).loc["grid-lora-lr10x-mu4", "layer 1"] == pytest.approx(40.0)
    assert report.judge("P3", {**e, "grid": [{**cells[0], "deepest": 0.05}]}).word == PARTLY
    assert report.judge("P3", {**e, "grid": [{**cells[0], "run_mean": 0.05}]}).word == REPRODUCED


def test_collapse_reads_the_cells_own_step0_reward_by_default():
    """The base's training reward is the run's step-0 reward (the base policy's rollout) unless one is given."""
    falls = [_step(0, 0.40, [0.1]), *[_step(t, 0.38, [0.1]) for t in range(1, 6)]]  # 5 steps below 0.40
    c = mg.cell_measures(falls)
    assert c["base_reward"] == 0.40 and c["collapsed"]
    assert not mg.cell_measures(falls, base_reward=0.35)["collapsed"]
    assert not mg.cell_measures(falls[:5])["collapsed"]  # 4 steps below: not yet


def _table(rows):
    import pandas as pd

    return pd.DataFrame.from_dict({mg.cell_name(m, x, mu): {"mode": m, "lr_mult": x, "mu": mu, "run_mean": r,
                                                            "collapsed": c} for m, x, mu, r, c in rows}, orient="index")


def test_operating_point_is_the_smallest_update_at_the_highest_level_reached():
    """Cells (mode, lr x, mu, run-mean, collapsed). >= 10% is reached by lr 3x mu 8 (LoRA), lr 3x mu 4 (all params)
    and lr 5x mu 1: the smallest update is lr 3x, then mu 4 before mu 8 -> the all-parameter lr 3x mu 4 cell; a
    collapsed lr 2x cell at 20% is passed over. Without any >= 10% cell the rule falls back to 5%; with none, None."""
    rows = [("lora", 1, 4, 0.03, False), ("lora", 2, 4, 0.20, True), ("lora", 3, 8, 0.11, False),
            ("full", 3, 4, 0.12, False), ("lora", 5, 1, 0.15, False), ("lora", 2, 8, 0.07, False)]
    arm, why = mg.operating_point(_table(rows))
    assert arm == "grid-full-lr3x-mu4" and ">= 10%" in why and "5 of 6" in why
    tie = rows + [("lora", 3, 4, 0.10, False)]  # same lr and mu: LoRA + router before all parameters
    assert mg.operating_point(_table(tie))[0] == "grid-lora-lr3x-mu4"
    low = [r[:3] + (min(r[3], 0.08),) + r[4:] for r in rows]
    arm, why = mg.operating_point(_table(low))
    assert arm == "grid-lora-lr2x-mu8" and ">= 5%" in why
    arm, why = mg.operating_point(_table([("lora", 1, 4, 0.03, False), ("lora", 10, 4, 0.3, True)]))
    assert arm is None and "no operating point" in why
    t = _table(rows).assign(deepest=lambda d: d.run_mean + 0.01)
    assert mg.grid_summary(t) == ("1 of 6 cells collapse; the 5 that do not (grid-lora-lr1x-mu4, grid-lora-lr3x-mu8, "
                                  "grid-full-lr3x-mu4, grid-lora-lr5x-mu1, grid-lora-lr2x-mu8) move 3.0-15.0% of "
                                  "activated experts per update (deepest layer up to 16.0%); of the 5 cells at >= 5% "
                                  "(up to 20.0%), 1 collapse.")


def test_prefetch_trains_the_grid_with_one_seed(monkeypatch):
    """`prefetch.notebook_runs` adds the lab module's `one_seed_arms(params)` with seed 0 only."""
    from gpolib.lab import gspo_moe
    from gpolib.workbook import prefetch

    assert gspo_moe.one_seed_arms({"GRID_STEPS": 0}) == {}
    cells = gspo_moe.one_seed_arms({"GRID_STEPS": 1, "GRID_LR_MULTS": [2], "GRID_MUS": [2], "GRID_MODES": ["full"],
                                    "GRID_FULL_LR_SCALE": 0.5, "GRID_EVAL_PROMPTS": 2})
    assert list(cells) == ["grid-full-lr2x-mu2"] and cells["grid-full-lr2x-mu2"]["lr"] == pytest.approx(3e-4)
    params = {"PROFILE": "smoke", "MODEL": "data/models/tiny-qwen3-moe-fine", "DEVICE": "cpu", "DTYPE": "float32",
              "STEPS": 1, "SEEDS": 3, "PROMPTS_PER_STEP": 2, "GROUP": 4, "EVAL_PROMPTS": 2, "EVAL_SAMPLES": 1,
              "GRID_STEPS": 1, "GRID_LR_MULTS": [1], "GRID_MUS": [2], "GRID_MODES": ["lora", "full"],
              "GRID_FULL_LR_SCALE": 0.5, "GRID_EVAL_PROMPTS": 2}
    monkeypatch.setattr(prefetch, "notebook_params", lambda job: params)
    job = type("Job", (), {"name": "08_gspo_moe"})()
    got = prefetch.notebook_runs(job)
    grid = {k: v for k, v in got.items() if k.startswith("grid-")}
    assert sorted(grid) == ["grid-full-lr1x-mu2/seed0", "grid-lora-lr1x-mu2/seed0"]
    cfg = grid["grid-full-lr1x-mu2/seed0"][0]
    assert cfg.lora_r == 0 and cfg.seed == 0 and cfg.steps == 1 and cfg.warmup_steps == 0 and cfg.mu == 2
    assert len([k for k in got if k.startswith("grpo/")]) == 3  # the other arms keep their seeds
    assert not [k for k in got if k.startswith("p4_")]  # no operating point yet: no P4 runs
    monkeypatch.setattr(prefetch, "notebook_params", lambda job: {**params, "P4_CELL": "grid-full-lr1x-mu2",
                                                                  "P4_STEPS": 3})
    p4 = {k: v for k, v in prefetch.notebook_runs(job).items() if k.startswith("p4_")}
    assert len(p4) == 4 * 3 and p4["p4_gspo/seed2"][0].seed == 2  # four arms, every seed


def test_p4_arms_take_the_cells_update_and_their_own_objective():
    """P4's arms at a cell: its model, mode, lr, mu, engine and no warm-up; their objective, the RL split, the
    notebook's evaluation, P4_STEPS steps. A name outside the grid is refused; "" gives none."""
    from gpolib.lab import gspo_moe

    params = {"GRID_STEPS": 6, "GRID_LR_MULTS": [1, 3], "GRID_MUS": [1, 8], "GRID_MODES": ["lora", "full"],
              "GRID_FULL_LR_SCALE": 0.47, "GRID_EVAL_PROMPTS": 64, "P4_CELL": "grid-full-lr3x-mu8", "P4_STEPS": 30}
    arms = gspo_moe.p4_arms(params)
    assert sorted(arms) == ["p4_grpo", "p4_grpo_replay", "p4_gspo", "p4_sapo"]
    g, r, s = arms["p4_grpo"], arms["p4_grpo_replay"], arms["p4_gspo"]
    assert g["lr"] == pytest.approx(3e-4 * 3 * 0.47) and g["mu"] == 8 and g["lora_r"] == 0 and g["steps"] == 30
    assert g["warmup_steps"] == 0 and g["rollout_autocast"] == "bfloat16" and g["model"] == mg.BALANCED
    assert not {"task_train", "eval_prompts", "eval_samples", "expert_change"} & set(g)
    assert g["preset"] == "grpo" and g["loss_eps_high"] == 0.28 and r["routing_replay"] is True
    assert s["preset"] == "gspo" and "loss_eps_high" not in s and arms["p4_sapo"]["preset"] == "sapo"
    assert gspo_moe.p4_arms({**params, "P4_CELL": ""}) == {}
    with pytest.raises(ValueError, match="not a cell of the grid"):
        gspo_moe.p4_arms({**params, "P4_CELL": "grid-lora-lr2x-mu4"})


def test_routing_paragraph_from_hand_made_records():
    """README's routing block: the premise's text, the grid's range over cells that did not collapse (the largest
    cell per layer), the default cell's layers, P4's seed means and collapse counts."""
    p3 = {"verdict": "reproduced", "judgement": {"parts": [{"text": "premise 0.40 >= 0.25"}]},
          "evidence": {"grid": [{"cell": "a", "run_mean": 0.02, "collapsed": False, "per_layer": [0.01, 0.03]},
                                {"cell": "b", "run_mean": 0.12, "collapsed": False, "per_layer": [0.1, 0.14]},
                                {"cell": "c", "run_mean": 0.5, "collapsed": True, "per_layer": [0.4, 0.6]}],
                       "expert_change_per_layer": [0.006, 0.010]}}
    p4 = {"verdict": "partly", "evidence": {"where": "the operating point b", "acc_grpo": [0.3, 0.4],
                                            "acc_grpo_replay": [0.5, 0.5], "collapsed_grpo": [True, False],
                                            "collapsed_grpo_replay": [False, False]}}
    text = mg.routing_paragraph(p3, p4)
    assert "**P3 (reproduced).** Premise: premise 0.40 >= 0.25." in text
    assert "(3 cells, 1 collapsed)" in text and "from 2.0% (a) to 12.0% (b; per layer 10.0%, 14.0%)" in text
    assert "are 0.8% (mean over layers), from 0.6% in layer 0 to 1.0% in layer 1" in text
    assert "**P4 (partly)** at the operating point b" in text and "GRPO 0.350, GRPO + replay 0.500" in text
    assert "collapsed GRPO 1, GRPO + replay 0." in text


def test_probe_arms_add_replay_and_gspo_at_named_cells():
    """GRID_PROBE's cells get GRPO + replay (the cell's fields, replay on) and GSPO (its preset's clip); the probe
    table reads the cell's own GRPO run beside them; a name outside the grid is refused."""
    params = {"GRID_STEPS": 6, "GRID_LR_MULTS": [1, 2], "GRID_MUS": [8], "GRID_MODES": ["lora"],
              "GRID_FULL_LR_SCALE": 0.47, "GRID_EVAL_PROMPTS": 64, "GRID_PROBE": ["grid-lora-lr1x-mu8"]}
    arms = mg.probe_arms(params)
    cell = mg.grid_from_params(params)["grid-lora-lr1x-mu8"]
    assert sorted(arms) == ["probe_gspo-lora-lr1x-mu8", "probe_replay-lora-lr1x-mu8"]
    assert arms["probe_replay-lora-lr1x-mu8"] == {**cell, "routing_replay": True}
    gspo = arms["probe_gspo-lora-lr1x-mu8"]
    assert gspo["preset"] == "gspo" and "loss_eps_high" not in gspo and gspo["lr"] == cell["lr"] and gspo["mu"] == 8
    assert mg.probe_arms({**params, "GRID_PROBE": []}) == {}
    with pytest.raises(ValueError, match="not cells of the grid"):
        mg.probe_arms({**params, "GRID_PROBE": ["grid-lora-lr3x-mu8"]})
    falls = [_step(0, 0.4, [0.04]), *[_step(t, 0.1, [0.04]) for t in range(1, 6)]]
    holds = [_step(t, 0.4 + 0.01 * t, [0.02]) for t in range(6)]
    table = mg.probe_table({"grid-lora-lr1x-mu8/seed0": falls, "probe_replay-lora-lr1x-mu8/seed0": holds},
                           ["grid-lora-lr1x-mu8"])
    assert list(table.index) == [("grid-lora-lr1x-mu8", "GRPO"), ("grid-lora-lr1x-mu8", "GRPO + replay")]
    assert table.loc[("grid-lora-lr1x-mu8", "GRPO"), "collapsed"]
    assert not table.loc[("grid-lora-lr1x-mu8", "GRPO + replay"), "collapsed"]
    assert table.loc[("grid-lora-lr1x-mu8", "GRPO + replay"), "reward 5"] == pytest.approx(0.45)
    assert mg.probe_summary(table) == "GRPO collapsed in 1 of 1 cells; GRPO + replay collapsed in 0 of 1 cells."
