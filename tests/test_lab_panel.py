"""gpolib.lab.panel: D2's fixed panel, by hand and on a tiny run."""
import json

import numpy as np
import pandas as pd
import pytest
import torch

from gpolib import presets
from gpolib.lab import panel
from gpolib.train import Trainer, train


def test_shares_by_hand():
    got = panel.shares(np.array([8, 8, 0, 4]), samples=8)
    assert got == {"all_correct": 0.5, "all_wrong": 0.25, "acc": 0.625, "predicted": (1 + 1 + 0 + 0.5 ** 8) / 4}


def test_rise_per_seed_last_minus_first_step():
    t = pd.DataFrame({"seed": [0, 0, 0, 1, 1, 1], "step": [0, 50, 100] * 2,
                      "all_correct": [0.10, 0.2, 0.25, 0.10, 0.05, 0.04]})
    assert np.allclose(panel.rise(t), [0.15, -0.06])


def test_the_panel_is_fixed_and_refuses_too_many_prompts():
    tasks = [{"prompt": str(i), "answer": i} for i in range(1000)]
    a, b = panel.panel_tasks(tasks, 256), panel.panel_tasks(list(tasks), 256)
    assert a == b and len({t["answer"] for t in a}) == 256
    with pytest.raises(ValueError, match="prompts=1001 is invalid"):
        panel.panel_tasks(tasks, 1001)


def test_table_round_trip_and_absence(tmp_path):
    assert panel.read_table(tmp_path) is None
    t = pd.DataFrame({"run": ["grpo/seed0"], "seed": [0], "step": [0], "all_correct": [0.125]})
    panel.write_table(t, tmp_path)
    assert panel.read_table(tmp_path).to_dict("records") == t.to_dict("records")


def test_counts_of_a_run_kept_shared_and_recomputed_when_the_run_changes(tmp_path, monkeypatch):
    """Two seeds of a 3-step run keeping step 1: counts at steps 0, 1, 3 on a 3-prompt panel, the base's counts
    computed once and shared, read back without a Trainer on the second call, computed again after the final
    adapter changes."""
    cfgs = {f"grpo/seed{s}": presets.get("grpo", steps=3, prompts_per_step=2, group_size=2, eval_prompts=2,
                                         eval_samples=1, max_new_tokens=24, warmup_steps=0, seed=s,
                                         adapter_steps=(1,), lr=0.05) for s in (0, 1)}
    dirs = {n: tmp_path / n.replace("/", "-") for n in cfgs}
    for n, cfg in cfgs.items():
        train(cfg, dirs[n], progress=False)
    made, rollouts = [], []
    real_init, real_counts = Trainer.__init__, panel.correct_counts
    monkeypatch.setattr(Trainer, "__init__", lambda self, cfg: (made.append(cfg.seed), real_init(self, cfg))[1])
    monkeypatch.setattr(panel, "correct_counts", lambda *a, **k: (rollouts.append(1), real_counts(*a, **k))[1])
    table = panel.evaluate(cfgs, dirs, prompts=3)
    assert table["step"].tolist() == [0, 1, 3, 0, 1, 3] and made == [0, 1] and len(rollouts) == 5  # base once
    assert (table[table.step == 0].all_correct.nunique(), table.all_correct.between(0, 1).all()) == (1, True)
    kept = json.loads((dirs["grpo/seed0"] / panel.FILE).read_text())
    assert kept["prompts"] == 3 and sorted(kept["counts"]) == ["0", "1", "3"] and len(kept["counts"]["3"]) == 3
    again = panel.evaluate(cfgs, dirs, prompts=3)
    assert made == [0, 1] and again.equals(table)  # read back: no Trainer, no rollout
    f = dirs["grpo/seed1"] / "adapter" / "adapter_model.safetensors"
    from safetensors.torch import load_file, save_file
    w = load_file(f)
    save_file({k: v + 1 if "lora_B" in k else v for k, v in w.items()}, f)
    panel.evaluate(cfgs, dirs, prompts=3)
    assert made == [0, 1, 1] and len(rollouts) == 5 + 3  # seed 1 again, its base included (a new call)
    with pytest.raises(FileNotFoundError, match="adapter_steps covering step 2"):
        panel.load_policy(Trainer(cfgs["grpo/seed0"]), dirs["grpo/seed0"], 2)


def test_evidence_and_the_d2_verdict_from_a_panel_table():
    from gpolib.lab import dapo

    t = pd.DataFrame({"run": ["grpo/seed0"] * 3 + ["grpo/seed1"] * 3 + ["grpo/seed2"] * 3, "seed": [0] * 3 + [1] * 3 + [2] * 3,
                      "step": [0, 50, 100] * 3, "all_correct": [0.1, 0.15, 0.2, 0.1, 0.12, 0.16, 0.1, 0.2, 0.22],
                      "all_wrong": [0.3] * 9, "acc": [0.5, 0.55, 0.6] * 3, "predicted": [0.08, 0.1, 0.12] * 3})
    e = panel.evidence(t)
    assert np.allclose(e["panel_rise"], [0.1, 0.06, 0.12]) and np.allclose(e["panel_acc_rise"], [0.1] * 3)
    assert e["panel_first"] == [0.1] * 3 and e["panel_steps"] == [0, 50, 100] and panel.evidence(None) == {}
    v = dapo.verdict_d2({**e, "ds_clean_steps": [1.0] * 3, "gen_batches_per_step": [1.5] * 3,
                         "all_correct_first": [0.1] * 3, "all_correct_last": [0.2] * 3})
    assert v.word == dapo.stats.REPRODUCED  # rises 0.10, 0.06, 0.12: the interval is above 0; no dirty step
    assert "panel at steps [0, 50, 100]: all-correct share 0.100 -> 0.193" in v.text
    assert "predicted from per-prompt accuracy (mean p^8) 0.040" in v.text


def test_batch_evidence_reads_the_panel_runs(tmp_path):
    """D2's training-batch share comes from the runs of the panel table (notebook 01's), first and last 20% of steps:
    10 steps -> steps 0-1 and 8-9."""
    assert panel.batch_evidence(tmp_path) == {}  # no panel table: D2 is not yet run
    panel.write_table(pd.DataFrame({"run": ["grpo/seed0", "grpo/seed1"], "seed": [0, 1], "step": [0, 0],
                                    "all_correct": [0.1, 0.1], "all_wrong": [0.1, 0.1], "acc": [0.5, 0.5],
                                    "predicted": [0.1, 0.1]}), tmp_path)
    for s in (0, 1):
        run = tmp_path / f"grpo-seed{s}-abc"
        run.mkdir()
        rows = [{"step": t, "groups/all_correct": 0.1 * s + 0.01 * t} for t in range(10)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = panel.batch_evidence(tmp_path)
    assert got["all_correct_first"] == pytest.approx([0.005, 0.105])  # mean of t = 0, 1
    assert got["all_correct_last"] == pytest.approx([0.085, 0.185])  # mean of t = 8, 9
    assert [p.rsplit("/", 1)[-1] for p in got["batch_runs"]] == ["grpo-seed0-abc", "grpo-seed1-abc"]
    (tmp_path / "grpo-seed1-def").mkdir()
    (tmp_path / "grpo-seed1-def" / "metrics.jsonl").write_text("")
    with pytest.raises(FileNotFoundError, match="expected one grpo-seed1-"):
        panel.batch_evidence(tmp_path)
    table = panel.read_table(tmp_path).assign(folder=["grpo-seed0-abc", "grpo-seed1-abc"])
    panel.write_table(table, tmp_path)  # a table naming its runs' folders reads those, whatever else is there
    assert panel.batch_evidence(tmp_path)["all_correct_last"] == pytest.approx([0.085, 0.185])
