"""The loop: per-preset smoke runs, dynamic-sampling bound, GFPO k of G, determinism, resume, faults."""
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from gpolib import presets
from gpolib.metrics import METRICS
from gpolib.objectives import SURROGATES
from gpolib.train import Trainer, train

DESIGN_METRICS = ["step", "reward/mean", "reward/std", "acc/mean", "len/mean", "len/correct", "len/incorrect",
                  "trunc/frac", "entropy/mean", "clip/low", "clip/high", "clip/frac", "ratio/log_std",
                  "groups/all_correct", "groups/all_wrong", "groups/zero_var", "gen/batches", "gen/samples",
                  "loss/policy", "kl/mean", "grad/norm", "time/rollout_s", "time/train_s", "tokens_per_s"]
VOLATILE = ("time/", "tokens_per_s")


def _stable(rows):
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


def _lora_weights(tr):
    return {n: p.detach().clone() for n, p in tr.model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("name", presets.PRESETS)
def test_smoke_run_per_preset(name, tiny_cfg, tmp_path):
    cfg = tiny_cfg(name)
    metrics = train(cfg, tmp_path / name, progress=False)
    assert len(metrics) == 2
    own = set(cfg.loss.surrogate.metrics)  # a surrogate reports its own diagnostics only: clip/* for a clip
    others = {k for s in SURROGATES.values() for k in s.metrics} - own
    expected = [k for k in DESIGN_METRICS if k not in others] + sorted(own)
    for row in metrics:
        assert set(expected) <= set(row), set(expected) - set(row)
        assert not others & set(row), others & set(row)
        assert set(row) <= set(METRICS), set(row) - set(METRICS)  # every name in the one list
        for k in expected:
            v = row[k]
            assert v is None or math.isfinite(v), (k, v)
    summary = json.loads((tmp_path / name / "summary.json").read_text())
    assert summary["finished"] and 0 <= summary["eval_end"]["acc/sample"] <= 1
    assert set(summary["eval_end"]) <= set(METRICS)
    assert (tmp_path / name / "adapter").exists()


def test_lora_weights_change_base_frozen(tiny_cfg):
    tr = Trainer(tiny_cfg("dapo", steps=1))
    before = _lora_weights(tr)
    frozen = {n: p.detach().clone() for n, p in tr.model.named_parameters() if not p.requires_grad}
    batch = tr.collect(0)
    batch.advantages = torch.linspace(-1, 1, len(batch.correct))  # every row informative: the update runs
    assert tr.update(batch, 0).get("update/skipped", 0) == 0
    after = _lora_weights(tr)
    assert any(not torch.equal(before[n], after[n]) for n in before)
    assert all(torch.equal(p, dict(tr.model.named_parameters())[n]) for n, p in frozen.items())


def test_dynamic_sampling_stops_at_bound_on_unsolvable_data(tiny_cfg, tmp_path):
    from gpolib.tasks import load_tasks
    rows = load_tasks("data/tasks/train.jsonl")[:50]
    bad = tmp_path / "unsolvable.jsonl"
    bad.write_text("".join(json.dumps({**r, "answer": 987654321}) + "\n" for r in rows))
    cfg = tiny_cfg("dapo", task_train=str(bad), max_gen_batches=3, steps=1, overlong="none")
    tr = Trainer(cfg)
    from gpolib.train import train_step
    row = train_step(tr, 0)
    assert row["gen/batches"] == 3 and row["gen/samples"] == 3 * 16
    assert row["groups/all_wrong"] == 1.0 and row["update/skipped"] == 1


def test_gfpo_trains_on_k_of_g(tiny_cfg):
    tr = Trainer(tiny_cfg("gfpo", steps=1))
    batch = tr.collect(0)
    assert len(batch.correct) == 4 * 4  # 4 prompts x k = 4 of G = 8
    assert batch.loss_mask.shape[0] == 16


def test_determinism_same_seed_same_metrics(tiny_cfg, tmp_path):
    cfg = tiny_cfg("grpo", steps=2)
    a = train(cfg, tmp_path / "a", progress=False)
    b = train(cfg, tmp_path / "b", progress=False)
    assert _stable(a) == _stable(b)


def test_cache_reuse_and_config_mismatch(tiny_cfg, tmp_path):
    cfg = tiny_cfg("grpo", steps=1)
    first = train(cfg, tmp_path / "r", progress=False)
    t0 = time.perf_counter()
    again = train(cfg, tmp_path / "r", progress=False)
    assert again == first and time.perf_counter() - t0 < 1.0
    with pytest.raises(ValueError, match="different config.*seed"):
        train(cfg.replace(seed=5), tmp_path / "r", progress=False)


def test_non_finite_loss_names_step_and_keeps_checkpoint(tiny_cfg, tmp_path, monkeypatch):
    import gpolib.update as U
    cfg = tiny_cfg("grpo", steps=6, checkpoint_every=1)
    real = U.policy_loss

    def poisoned(*a, **k):
        loss, info = real(*a, **k)
        after_a_checkpoint = any((tmp_path / "nan").glob("ckpt-*.pt"))
        return (loss * float("nan") if after_a_checkpoint else loss), info
    monkeypatch.setattr(U, "policy_loss", poisoned)
    # the first update after a checkpoint exists is poisoned
    with pytest.raises(FloatingPointError, match=r"at step \d"):
        train(cfg, tmp_path / "nan", progress=False)
    ckpts = sorted((tmp_path / "nan").glob("ckpt-*.pt"))
    assert ckpts, "the last good checkpoint must remain"
    assert not (tmp_path / "nan" / ".lock").exists()


def test_resume_after_sigkill_matches_uninterrupted(tmp_path, clean_resume_run):
    from conftest import RESUME_SCRIPT, read_metrics, stable
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-c", RESUME_SCRIPT, str(killed)], env=env)
    deadline = time.time() + 120
    while time.time() < deadline and not list(killed.glob("ckpt-000002.sha256")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "summary.json").exists(), "the run finished before it could be killed"
    subprocess.run([sys.executable, "-c", RESUME_SCRIPT, str(killed)], env=env, check=True)
    assert len(read_metrics(killed)) == 4
    assert stable(read_metrics(killed)) == stable(read_metrics(clean_resume_run))
    sk = json.loads((killed / "summary.json").read_text())
    sc = json.loads((clean_resume_run / "summary.json").read_text())
    assert sk["eval_end"] == sc["eval_end"]


def test_partial_old_logps_equal_a_full_recompute(tiny_cfg, monkeypatch):
    """pi_old recomputed only for later minibatches' active rows gives the same update as recomputing all."""
    import gpolib.update as U
    from gpolib.logprobs import completion_logps
    results = []
    for full in (False, True):
        tr = Trainer(tiny_cfg("gspo", mu=2, steps=1))
        batch = tr.collect(0)
        batch.advantages = torch.linspace(-1, 1, len(batch.correct))  # every row informative
        if full:
            def everything(policy, cfg, b, minibatches, active, meter=None):
                with torch.inference_mode():
                    ro = b.rollout
                    lp = completion_logps(policy.model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids,
                                          ro.completion_mask)
                return [lp.clone()] * len(minibatches), None
            monkeypatch.setattr(U, "pi_old", everything)
        results.append(tr.update(batch, 0))
    assert not any(r.get("update/skipped") for r in results)
    for key in ("loss/policy", "clip/frac", "ratio/log_std", "grad/norm"):
        assert results[0][key] == pytest.approx(results[1][key], rel=1e-4, abs=1e-7), key


def test_minibatch_without_active_rows_is_a_zero_gradient_step(tiny_cfg):
    """mu = 4 on 16 rows where one minibatch holds only zero-advantage rows must not crash."""
    tr = Trainer(tiny_cfg("grpo", mu=4, steps=1))
    batch = tr.collect(0)
    batch.advantages = torch.zeros_like(batch.advantages)
    batch.advantages[0] = 1.0  # a single active row: three of four minibatches are empty of it
    out = tr.update(batch, 0)
    assert out["grad/norm"] is not None and math.isfinite(out["grad/norm"])
    assert tr.sched.last_epoch == 4  # four optimiser steps, one per minibatch


def test_the_mismatch_correction_reaches_the_update(tiny_cfg):
    """The engine's log-probs weight the loss: a cap below every weight masks every token (no gradient, no move);
    a bf16 rollout engine gives a positive k3 mismatch that the update logs."""
    small = dict(steps=1, prompts_per_step=2, max_new_tokens=48)
    tr = Trainer(tiny_cfg("grpo", **small, loss_mismatch_correction="token_mask", loss_mismatch_cap=1e-6))
    batch = tr.collect(0)
    batch.advantages = torch.linspace(-1, 1, len(batch.correct))  # every row informative: the update runs
    before = _lora_weights(tr)
    out = tr.update(batch, 0)
    assert out["mismatch/clipped_share"] == 1.0 and out["grad/norm"] == 0.0 and out["loss/policy"] == 0.0
    assert all(torch.equal(before[n], p) for n, p in _lora_weights(tr).items())
    tr = Trainer(tiny_cfg("grpo", **small, rollout_autocast="bfloat16", loss_mismatch_correction="token_truncate"))
    batch = tr.collect(0)
    batch.advantages = torch.linspace(-1, 1, len(batch.correct))
    out = tr.update(batch, 0)
    assert out["mismatch/kl"] > 0 and 0 < out["mismatch/max_log_ratio"] < math.inf
    assert 0 <= out["mismatch/clipped_share"] < 1 and out["grad/norm"] > 0
