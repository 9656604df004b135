"""Notebook 08 (GSPO on the MoE, P3-P5): the routing and mismatch measures on hand-made numbers and tiny models,
the arms, the per-seed evidence and the verdicts."""
import math
from types import SimpleNamespace

import pytest
import torch

from gpolib import presets
from gpolib.lab import gspo_moe as gm
from gpolib.lab import report, runs
from gpolib.lab.report import NOT, PARTLY, REPRODUCED


# ---------------------------------------------------------------- P3: routing measures by hand

def test_activated_expert_change_hand_numbers():
    # layer 0: token 0 same set in another order, token 1 one of two experts replaced, token 2 both replaced
    before = torch.tensor([[[[0, 1], [2, 3], [4, 5]]], [[[0, 1], [2, 3], [4, 5]]]])  # (L=2, B=1, T=3, k=2)
    after = torch.tensor([[[[1, 0], [2, 7], [6, 7]]], [[[0, 1], [2, 3], [4, 5]]]])
    ones = torch.ones(1, 3)
    assert gm.activated_expert_change(before, after, ones).tolist() == pytest.approx([3 / 6, 0.0])
    assert gm.expert_set_change(before, after, ones).tolist() == pytest.approx([2 / 3, 0.0])  # sets, for contrast
    assert gm.activated_expert_change(before, after, torch.tensor([[1, 1, 0]])).tolist() == pytest.approx([1 / 4, 0.0])


def test_any_layer_change_hand_numbers():
    assert gm.any_layer_change([0.1, 0.2]) == pytest.approx(1 - 0.9 * 0.8)  # 0.28
    assert gm.any_layer_change([0.1, 0.2], n_layers=3) == pytest.approx(1 - 0.85 ** 3)  # mean 0.15, three layers
    assert gm.any_layer_change([0.01] * 48) == pytest.approx(0.3827, abs=1e-4)
    assert gm.any_layer_change([0.0, 0.0]) == 0.0


@pytest.fixture(scope="module")
def build():
    from test_moe import build
    return build


def _rollout(B=3, P=4, T=6, seed=2):
    g = torch.Generator().manual_seed(seed)
    p_ids, c_ids = torch.randint(2, 64, (B, P), generator=g), torch.randint(2, 64, (B, T), generator=g)
    p_mask, c_mask = torch.ones(B, P, dtype=torch.long), torch.ones(B, T, dtype=torch.long)
    p_mask[0, :1] = 0  # left padding
    c_mask[2, 3:] = 0  # a shorter completion
    return SimpleNamespace(prompt_ids=p_ids * p_mask, prompt_mask=p_mask, completion_ids=c_ids * c_mask,
                           completion_mask=c_mask)


def test_step_probe_is_zero_without_a_step_and_measures_a_real_one(build):
    from test_moe import lm_step
    model, ro = build("qwen3_moe", train_router=True), _rollout()
    still = gm.step_probe(model, ro, lambda: None)
    assert still["kl"] == 0.0 and still["log_ratio_std"] == 0.0
    assert still["route_change"] == [0.0] * 4 and still["expert_change"] == [0.0] * 4
    moved = gm.step_probe(model, ro, lambda: lm_step(model, lr=5e-2))
    assert moved["kl"] > 0 and moved["log_ratio_std"] > 0 and len(moved["route_change"]) == 4
    for sets, experts in zip(moved["route_change"], moved["expert_change"]):
        assert 0 <= sets <= 1 and sets / 2 - 1e-12 <= experts <= sets + 1e-12  # k = 2: half or all of a changed set
    assert max(moved["route_change"]) > 0  # a large step on a trained router moves some token
    dense = gm.step_probe(build("dense"), ro, lambda: None)
    assert "route_change" not in dense and dense["kl"] == 0.0


def test_matched_spread_reaches_the_target_kl(build):
    from test_moe import lm_step
    model = build("dense")
    out = gm.matched_spread(model, _rollout(), lambda: lm_step(model, lr=1e-2), target_kl=1e-4)
    assert out["kl"] == pytest.approx(1e-4, rel=1e-3) and out["alpha"] > 0 and out["log_ratio_std"] > 0


def test_probe_config_is_one_full_size_step_of_grpo():
    cfg = gm.probe_config("data/models/tiny-qwen3-moe", True, 2, prompts_per_step=4)
    assert (cfg.mu, cfg.warmup_steps, cfg.seed, cfg.train_router, cfg.prompts_per_step) == (1, 0, 2, True, 4)
    assert cfg.loss == presets.get("grpo").loss and cfg.lr == presets.get("grpo").lr


def _probe(trainable, frozen, expert, spread_moe, spread_dense, kl):
    return {"trainable": {"route_change": trainable, "expert_change": expert, "kl": kl, "log_ratio_std": spread_moe},
            "frozen": {"route_change": frozen, "expert_change": [0.0] * len(frozen), "kl": kl, "log_ratio_std": 0.0},
            "dense": {"alpha": 2.0, "kl": kl, "log_ratio_std": spread_dense}}


def test_p3_evidence_averages_batches_per_layer():
    probes = [_probe([0.02, 0.04], [0.0, 0.01], [0.01, 0.03], 0.10, 0.08, 1e-3),
              _probe([0.04, 0.00], [0.02, 0.01], [0.03, 0.00], 0.20, 0.12, 3e-3)]
    e = gm.p3_evidence(probes)
    assert e["route_change_per_layer"] == pytest.approx([0.03, 0.02])
    assert e["route_change_frozen"] == pytest.approx([0.01, 0.01])
    assert e["expert_change_per_layer"] == pytest.approx([0.02, 0.015])
    assert (e["ratio_spread_moe"], e["ratio_spread_dense"], e["kl"]) == pytest.approx((0.15, 0.10, 2e-3))
    v = report.judge("P3", e)  # the probes' model is not the fine-grained MoE: not yet run, the measure printed
    assert v.word == report.NOT_RUN and "router frozen 1.00%, 1.00%" in v.text and "1.75% (mean over layers" in v.text
    assert report.judge("P3", {**e, "moe_experts": 64}).word == NOT  # 1.75% < 2% on a fine-grained MoE

    t = gm.layer_table({"a": probes[0]["trainable"]})
    assert list(t.columns[:2]) == ["layer 0", "layer 1"] and t.loc["a", "layer 1"] == pytest.approx(4.0)
    assert t.loc["a", "any layer"] == pytest.approx(100 * (1 - 0.98 * 0.96))
    assert t.loc["a", "experts changed"] == pytest.approx(2.0)


def test_verdict_p3_thresholds():
    e = {"route_change_per_layer": [0.02, 0.008], "ratio_spread_moe": 0.2, "ratio_spread_dense": 0.1,
         "moe_experts": 64, "route_change_frozen": None}
    assert report.judge("P3", {**e, "expert_change_per_layer": [0.05, 0.06]}).word == REPRODUCED  # 5.5% >= 5%
    assert report.judge("P3", {**e, "expert_change_per_layer": [0.02, 0.03]}).word == PARTLY  # 2.5%
    assert report.judge("P3", {**e, "expert_change_per_layer": [0.01, 0.02]}).word == NOT  # 1.5% < 2%


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
    for cfg in cfgs.values():  # every arm: the MoE, router trained, mu 4, the bf16 engine
        assert (cfg.mu, cfg.train_router, cfg.rollout_autocast, cfg.lr) == (4, True, "bfloat16", 3e-4)
    diff = lambda a, b: set(runs.config_diff(cfgs[f"{a}/seed0"], cfgs[f"{b}/seed0"]))
    assert diff("grpo", "grpo_replay") == {"routing_replay"}
    assert diff("gspo", "gspo_engine") == {"old_logps"}
    assert cfgs["grpo/seed0"].loss.eps_high == 0.28 and cfgs["gspo/seed0"].loss.eps_high == 4e-4
    t = gm.arm_table(cfgs)
    assert t.loc["gspo_engine/seed0", "old_logps"] == "engine" and t.loc["grpo/seed0", "loss.ratio_level"] == "token"


def _summary(start, end, greedy=0.5):
    return {"eval_start": {"acc/sample": start, "acc/greedy": greedy}, "eval_end": {"acc/sample": end, "acc/greedy": greedy}}


def _runs(acc_end: dict, seeds=(0, 1, 2)):
    """Runs of every arm with 5 steps: reward 0.1 * (step + 1) + offset, clip 0.01, log-ratio std 0.02 / 0.04."""
    metrics, summaries = {}, {}
    for i, arm in enumerate(gm.ARMS):
        for s in seeds:
            metrics[f"{arm}/seed{s}"] = [{"step": t, "reward/mean": 0.1 * (t + 1) + 0.01 * i, "clip/frac": 0.01,
                                          "ratio/log_std": 0.02 if t < 4 else 0.04} for t in range(5)]
            summaries[f"{arm}/seed{s}"] = _summary(0.5, acc_end[arm][s])
    return metrics, summaries


def test_collapsed_and_run_table():
    assert gm.collapsed(_summary(0.5, 0.44)) and not gm.collapsed(_summary(0.5, 0.46))
    acc = {"grpo": [0.40, 0.50, 0.50], "grpo_replay": [0.5] * 3, "gspo": [0.5] * 3, "gspo_engine": [0.5] * 3}
    metrics, summaries = _runs(acc)
    t = gm.run_table(metrics, summaries)
    row = t.loc["grpo/seed0"]
    assert row["acc end"] == 0.40 and bool(row["collapsed"]) and row["reward (last 20%)"] == pytest.approx(0.5)
    assert row["log-ratio std"] == pytest.approx(0.024) and row["log-ratio std max"] == pytest.approx(0.04)
    means = gm.arm_means(t)
    assert list(means.index) == list(gm.ARMS) and means.loc["grpo", "collapsed runs"] == 1
    assert means.loc["grpo", "acc end"] == pytest.approx(0.4667, abs=1e-4)


def test_p4_p5_evidence_and_verdicts_from_runs():
    acc = {"grpo": [0.40, 0.42, 0.41], "grpo_replay": [0.50, 0.51, 0.52], "gspo": [0.51, 0.50, 0.52],
           "gspo_engine": [0.50, 0.51, 0.52]}
    metrics, summaries = _runs(acc)
    e4 = gm.p4_evidence(metrics, summaries, range(3))
    assert e4["acc_grpo"] == [0.40, 0.42, 0.41] and e4["collapsed_grpo"] == [True] * 3  # 0.5 -> < 0.45
    assert e4["reward_gspo"] == pytest.approx([0.52] * 3) and e4["clip_grpo"] == pytest.approx([0.01] * 3)
    v4 = report.judge("P4", e4)
    assert v4.word == REPRODUCED and "collapsed runs grpo 3, grpo_replay 0, gspo 0" in v4.text
    mismatch = {"token_mismatch": 0.05, "seq_mismatch": 0.01, "seq_clipped": 0.9}
    e5 = gm.p5_evidence(metrics, summaries, range(3), mismatch)
    assert e5["acc_engine"] == [0.50, 0.51, 0.52] and e5["acc_recompute"] == [0.51, 0.50, 0.52]
    v5 = report.judge("P5", e5)
    assert v5.word == REPRODUCED and "mean token-level / mean sequence-level" in v5.text and "5.00 >= 1.00" in v5.text
    assert report.judge("P5", {**e5, "seq_mismatch": 0.0}).word == PARTLY  # no sequence mismatch: that part cannot hold
    replay_behind = {**acc, "grpo_replay": [0.39, 0.41, 0.40]}
    assert report.judge("P4", gm.p4_evidence(*_runs(replay_behind), range(3))).word == PARTLY  # replay behind, GSPO ahead
    assert report.judge("P4", {**e4, "expert_change": 0.0064}).word == report.NOT_TESTED


def test_matched_spread_of_a_zero_target_takes_no_step():
    called = []
    out = gm.matched_spread(None, None, lambda: called.append(1), target_kl=0.0)
    assert out == {"alpha": 0.0, "kl": 0.0, "log_ratio_std": 0.0} and called == []
