"""Notebook 08 (GSPO on the MoE, P3-P5): the routing and mismatch measures on hand-made numbers and tiny models,
the arms, the per-seed evidence and the verdicts."""
from types import SimpleNamespace

import pytest
import torch

from gpolib import moe, presets, router_stats
from gpolib.lab import gspo_moe as gm
from gpolib.lab import report, runs
from gpolib.lab.report import NOT, NOT_RUN, NOT_TESTED, PARTLY, REPRODUCED

BALANCED = {"uniform_share": 0.0156, "expert_share_min": [0.010, 0.012]}  # x 64 experts: 0.64, 0.77 of uniform


# ---------------------------------------------------------------- P3: the paper's measure, from the runs' logs

def _logged(per_step_layers):
    """One run's metrics: a step record per entry, each with `moe/expert_change/l{i}` per layer."""
    return [{"step": t, **{f"moe/expert_change/l{i}": x for i, x in enumerate(layers)}}
            for t, layers in enumerate(per_step_layers)]


def test_p3_evidence_from_the_runs_logs():
    # GRPO seed 0: layers (0.02, 0.04) then (0.04, 0.06) -> run means (0.03, 0.05), 4%; seed 1: (0.01, 0.03), 2%
    metrics = {"grpo/seed0": _logged([[0.02, 0.04], [0.04, 0.06]]), "grpo/seed1": _logged([[0.01, 0.03]]),
               "grpo_frozen/seed0": _logged([[0.0, 0.01]]), "grpo_frozen/seed1": _logged([[0.0, 0.03]]),
               "grpo_coarse/seed0": _logged([[0.002, 0.004, 0.006, 0.008]]),
               "grpo_coarse/seed1": _logged([[0.004, 0.004, 0.004, 0.004]])}
    e = gm.p3_evidence(metrics, range(2), moe_experts=64, routing=BALANCED)
    assert e["expert_change_runs"] == pytest.approx([0.04, 0.02])
    assert e["expert_change_per_layer"] == pytest.approx([0.02, 0.04])
    assert e["expert_change_frozen"] == pytest.approx([0.0, 0.02])
    assert e["expert_change_coarse"] == pytest.approx([0.003, 0.004, 0.005, 0.006])
    v = report.judge("P3", e)  # the premise holds, the grid is not run: the default cell reported
    assert v.word == NOT_RUN and "3.00% (run mean over 2 layers, seeds 4.00%, 2.00%" in v.text
    assert "router frozen 0.00%, 2.00%" in v.text and "8-expert MoE 0.30%, 0.40%, 0.50%, 0.60%" in v.text
    assert v.text.startswith("premise held: lowest expert's share")
    assert report.judge("P3", {**e, "moe_experts": 8}).word == NOT_TESTED
    more = {**metrics, "gspo/seed0": _logged([[0.0, 0.0]]), "gspo/seed1": _logged([[0.0, 0.02]])}
    assert gm.no_replay_change(more, range(2)) == pytest.approx((0.04 + 0.02 + 0.0 + 0.01) / 4)


def test_verdict_p3_on_the_grid():
    e = {"expert_change_runs": [0.05], "expert_change_per_layer": [0.01, 0.02], "expert_change_frozen": [],
         "expert_change_coarse": [], "moe_experts": 64, "routing": BALANCED}
    cell = lambda mean, deep, collapsed=False: {"cell": "c", "run_mean": mean, "deepest": deep, "collapsed": collapsed}
    assert report.judge("P3", {**e, "grid": [cell(0.01, 0.02), cell(0.05, 0.06)]}).word == REPRODUCED  # (i) 5%
    assert report.judge("P3", {**e, "grid": [cell(0.02, 0.05)]}).word == PARTLY  # only (ii): the deepest layer
    assert report.judge("P3", {**e, "grid": [cell(0.02, 0.049)]}).word == NOT
    assert report.judge("P3", {**e, "grid": [cell(0.2, 0.3, True), cell(0.01, 0.02)]}).word == NOT  # collapsed cell


def _router_probs(choices: list, n_experts: int) -> torch.Tensor:
    """A hand-made router: token i puts almost all its probability on the experts `choices[i]` (its top-k)."""
    p = torch.full((len(choices), n_experts), 1e-3)
    for i, chosen in enumerate(choices):
        p[i, chosen] = 1.0
    return p / p.sum(-1, keepdim=True)


def test_load_balance_premise_on_a_hand_made_router():
    """P3/P4's premise (every expert's share >= 0.25 x 1/E in every layer) from `router_stats.routing_stats` of a router whose
    choices are known: 4 experts, top-2, 4 tokens. Balanced: each expert chosen twice of 8 slots (share 0.25 = uniform).
    Starved: expert 3 chosen once of 8 (0.125 = 0.5 x uniform, holds); dead: expert 3 never chosen (fails)."""
    mask = torch.ones(4)
    balanced = _router_probs([[0, 1], [2, 3], [0, 2], [1, 3]], 4)
    starved = _router_probs([[0, 1], [2, 0], [0, 2], [1, 3]], 4)
    dead = _router_probs([[0, 1], [2, 0], [0, 2], [1, 2]], 4)
    ok = gm.load_balance(router_stats.routing_stats([balanced, starved], mask, k=2))
    assert ok.word == REPRODUCED and "1.00, 0.50" in ok.text  # lowest share / uniform per layer
    fails = gm.load_balance(router_stats.routing_stats([balanced, dead], mask, k=2))
    assert fails.word == NOT and "0.00 < 0.25" in fails.text
    assert gm.load_balance(None).word != REPRODUCED  # no record: the premise is not met
    e = {"expert_change_runs": [0.05], "expert_change_per_layer": [0.05, 0.06], "expert_change_frozen": [],
         "expert_change_coarse": [], "moe_experts": 64, "routing": router_stats.routing_stats([balanced, dead], mask, k=2)}
    v = report.judge("P3", {**e, "grid": [{"cell": "c", "run_mean": 0.2, "deepest": 0.3, "collapsed": False}]})
    assert v.word == NOT_TESTED and "not tested: premise not met: lowest expert's share" in v.text


def test_shipped_fine_moe_fails_the_premise():
    """The committed fine MoE's card: minimum expert share 0.0 in all 8 layers (the review's finding)."""
    routing = gm.card_routing("data/models/tiny-qwen3-moe-fine")
    assert routing is not None and len(routing["expert_share_min"]) == 8
    assert gm.load_balance(routing).word == NOT


def test_balanced_fine_moe_cards():
    """The committed load-balanced fine MoEs' cards (issue 52): 64 experts, top-8, 8 layers, no dead expert in any
    layer (the fine MoE: 2-11 per layer). The first round's model (`moe-balanced`) reads 0.23 x uniform in layer 2 on
    its card: the premise (>= 0.25) is not met; the grid's model (`moe-floor`, the hinge besides) reads 0.29 there
    and meets it, with held-out accuracy not below the fine MoE's by more than 0.05; the verdict follows the card."""
    from gpolib.lab.base_models import card
    from gpolib.lab.moe_grid import BALANCED
    from gpolib.models import EMBEDDED

    for path in (BALANCED, EMBEDDED["moe-balanced"]):
        routing = gm.card_routing(path)
        assert routing is not None and len(routing["expert_share_min"]) == 8 and routing["uniform_share"] == 0.0156
        assert routing["dead_experts"] == [0] * 8 and min(routing["expert_share_min"]) > 0
    assert BALANCED == EMBEDDED["moe-floor"]
    assert card(BALANCED)["accuracy"] > card("data/models/tiny-qwen3-moe-fine")["accuracy"] - 0.05
    first = gm.load_balance(gm.card_routing(EMBEDDED["moe-balanced"]))
    assert first.word == NOT and "0.23 < 0.25" in first.text
    grid = gm.load_balance(gm.card_routing(BALANCED))
    assert grid.word == REPRODUCED and "0.29 >= 0.25" in grid.text


# ---------------------------------------------------------------- P5: engine vs trainer

def test_clipped_by_mismatch_uses_the_nearer_bound():
    seq = torch.tensor([0.0, 2e-4, 3.5e-4, 1e-3], dtype=torch.float64)  # |log s_i|
    assert gm.clipped_by_mismatch(seq, 3e-4, 4e-4) == 0.5  # beyond log(1 + 3e-4) = 2.9996e-4
    assert gm.clipped_by_mismatch(seq, 0.2, 0.28) == 0.0


def test_engine_mismatch_on_a_scripted_trainer():
    # trainer - engine: row 0 alternates +-0.1 (token 0.1, sequence 0), row 1 is +0.2 on its 2 tokens
    engine = torch.full((2, 4), -1.0, dtype=torch.float64)
    trainer = engine + torch.tensor([[0.1, -0.1, 0.1, -0.1], [0.2, 0.2, 5.0, 5.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    ro = SimpleNamespace(sample_logps=engine * mask, completion_mask=mask)
    fake = SimpleNamespace(collect=lambda step: SimpleNamespace(rollout=ro), model=torch.nn.Linear(1, 1),
                           logps=lambda r: trainer.float(), cfg=presets.get("gspo"))
    out = gm.engine_mismatch(fake)
    assert out["token_mismatch"] == pytest.approx(0.8 / 6, abs=1e-6) and out["seq_mismatch"] == pytest.approx(0.1, abs=1e-6)
    assert out["token"].shape == (6,) and out["sequence"].tolist() == pytest.approx([0.0, 0.2], abs=1e-6)
    assert out["seq_clipped"] == 0.5  # row 1: |log s| = 0.2 > 3e-4


# ---------------------------------------------------------------- P4, P5: the arms and the runs

def test_arms_differ_only_in_the_fields_they_test():
    cfgs = runs.configs(gm.ARMS, runs.budget(steps=30, prompts_per_step=16, group_size=8, eval_prompts=512,
                                             eval_samples=4, model="data/models/tiny-qwen3-moe", device="cpu",
                                             dtype="float32"), seeds=[0])
    for name, cfg in cfgs.items():  # every arm: an MoE, mu 4, the bf16 engine, router trained but in grpo_frozen
        assert (cfg.mu, cfg.rollout_autocast, cfg.lr) == (4, "bfloat16", 3e-4)
        assert cfg.train_router == (name != "grpo_frozen/seed0")
    diff = lambda a, b: set(runs.config_diff(cfgs[f"{a}/seed0"], cfgs[f"{b}/seed0"]))
    assert diff("grpo", "grpo_replay") == {"routing_replay"}
    assert diff("grpo", "grpo_frozen") == {"train_router"}
    assert diff("grpo", "grpo_coarse") == set() and cfgs["grpo_coarse/seed0"].model == gm.COARSE  # the budget's model
    fine = runs.configs(gm.ARMS, runs.budget(steps=30, prompts_per_step=16, group_size=8, eval_prompts=512,
                                             eval_samples=4, model="data/models/tiny-qwen3-moe-fine", device="cpu",
                                             dtype="float32"), seeds=[0])
    assert runs.config_diff(fine["grpo/seed0"], fine["grpo_coarse/seed0"]) == {
        "model": ("data/models/tiny-qwen3-moe-fine", "data/models/tiny-qwen3-moe")}
    assert diff("gspo", "gspo_engine") == {"old_logps"}
    assert cfgs["grpo/seed0"].loss.surrogate.eps_high == 0.28 and cfgs["gspo/seed0"].loss.surrogate.eps_high == 4e-4
    t = runs.arm_table(fine).T  # rows arms
    assert t.loc["gspo_engine", "old_logps"] == "engine" and t.loc["grpo", "loss.ratio_level"] == "token"
    assert t.loc["grpo_frozen", "train_router"] == "False" and t.loc["grpo_coarse", "model"] == gm.COARSE


def _summary(start, end, greedy=0.5):
    return {"eval_start": {"acc/sample": start, "acc/greedy": greedy}, "eval_end": {"acc/sample": end, "acc/greedy": greedy}}


def _runs(acc_end: dict, seeds=(0, 1, 2)):
    """Runs of every arm with 5 steps: reward 0.1 * (step + 1) + offset, clip 0.01, log-ratio std 0.02 / 0.04."""
    metrics, summaries = {}, {}
    for i, arm in enumerate(gm.ARMS):
        for s in seeds:
            metrics[f"{arm}/seed{s}"] = [{"step": t, "reward/mean": 0.1 * (t + 1) + 0.01 * i, "clip/frac": 0.01,
                                          "ratio/log_std": 0.02 if t < 4 else 0.04} for t in range(5)]
            summaries[f"{arm}/seed{s}"] = _summary(0.5, acc_end.get(arm, [0.5] * len(seeds))[s])
    return metrics, summaries


def _falling(base=0.5, later=0.3, steps=6):
    """A run whose training reward stays below its step-0 reward from step 1 on (DESIGN's collapse at 6 steps)."""
    return [{"step": t, "reward/mean": base if t == 0 else later, "clip/frac": 0.01, "ratio/log_std": 0.02}
            for t in range(steps)]


def test_collapsed_and_run_table():
    """DESIGN's collapse: training reward below the run's step-0 reward for >= 5 consecutive steps; a held-out drop
    alone is not a collapse."""
    assert gm.collapsed(_falling()) and not gm.collapsed(_falling(steps=5))
    assert not gm.collapsed([{"reward/mean": r} for r in (0.5, 0.4, 0.4, 0.6, 0.4, 0.4, 0.4)])  # broken at step 3
    acc = {"grpo": [0.40, 0.50, 0.50], "grpo_replay": [0.5] * 3, "gspo": [0.5] * 3, "gspo_engine": [0.5] * 3}
    metrics, summaries = _runs(acc)
    metrics["grpo/seed1"] = _falling()
    t = gm.run_table(metrics, summaries)
    row = t.loc["grpo/seed0"]
    assert row["acc end"] == 0.40 and not bool(row["collapsed"]) and row["reward (last 20%)"] == pytest.approx(0.5)
    assert bool(t.loc["grpo/seed1", "collapsed"])
    assert row["log-ratio std"] == pytest.approx(0.024) and row["log-ratio std max"] == pytest.approx(0.04)
    means = gm.arm_means(t)
    assert list(means.index) == list(gm.ARMS) and means.loc["grpo", "collapsed runs"] == 1
    assert means.loc["grpo", "acc end"] == pytest.approx(0.4667, abs=1e-4)


def test_p4_p5_evidence_and_verdicts_from_runs():
    acc = {"grpo": [0.40, 0.42, 0.41], "grpo_replay": [0.50, 0.51, 0.52], "gspo": [0.51, 0.50, 0.52],
           "gspo_engine": [0.50, 0.51, 0.52]}
    metrics, summaries = _runs(acc)
    metrics["grpo/seed2"] = _falling()
    e4 = gm.p4_evidence(metrics, summaries, range(3), expert_change=0.05, routing=BALANCED)
    assert e4["acc_grpo"] == [0.40, 0.42, 0.41] and e4["collapsed_grpo"] == [False, False, True]
    assert e4["reward_gspo"] == pytest.approx([0.52] * 3) and e4["clip_grpo"] == pytest.approx([0.01] * 3)
    assert e4["spread_max_gspo"] == pytest.approx([0.04] * 3)
    v4 = report.judge("P4", e4)
    assert v4.word == REPRODUCED and "collapsed runs" in v4.text and "GRPO 1, GRPO + replay 0, GSPO 0" in v4.text
    mismatch = {"token_mismatch": 0.05, "seq_mismatch": 0.01, "seq_clipped": 0.9}
    e5 = gm.p5_evidence(metrics, summaries, range(3), mismatch)
    assert e5["acc_engine"] == [0.50, 0.51, 0.52] and e5["acc_recompute"] == [0.51, 0.50, 0.52]
    v5 = report.judge("P5", e5)
    assert v5.word == REPRODUCED and "mean token-level / mean sequence-level" in v5.text and "5.00 >= 1.00" in v5.text
    assert report.judge("P5", {**e5, "seq_mismatch": 0.0}).word == NOT  # no sequence mismatch: the check has no value
    replay_behind = {**acc, "grpo_replay": [0.39, 0.41, 0.40]}
    behind = gm.p4_evidence(*_runs(replay_behind), range(3), expert_change=0.05, routing=BALANCED)
    assert report.judge("P4", behind).word == PARTLY  # replay behind, GSPO ahead
    assert report.judge("P4", {**behind, "routing": None}).word == NOT_TESTED  # the premise unmeasured
    assert report.judge("P4", {**e4, "expert_change": 0.0064}).word == report.NOT_TESTED
