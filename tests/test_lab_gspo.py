"""GSPO identities (Eq. 7, 13-14) and the Sec. 5.2 run summaries, on hand-made numbers."""
import dataclasses
import math

import pytest
import torch

from gpolib import LossConfig, presets
from gpolib.objectives import Clip
from gpolib.lab import gspo as gc

GSPO = presets.get("gspo").loss
WIDE = LossConfig(ratio_level="sequence", surrogate=Clip(eps_low=0.2, eps_high=0.28), aggregation="seq_mean_token_mean")


def test_sequence_ratio_direct_hand_numbers():
    # token ratios 2 and 0.5: product 1 -> s = 1; only the first token -> s = 2; ratios 4, 1 -> s = 2
    logps = torch.log(torch.tensor([[0.5, 0.2], [0.5, 0.2], [0.8, 0.3]], dtype=torch.float64))
    old = torch.log(torch.tensor([[0.25, 0.4], [0.25, 0.4], [0.2, 0.3]], dtype=torch.float64))
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    s = gc.sequence_ratio_direct(logps, old, mask)
    assert s.tolist() == pytest.approx([1.0, 2.0, 2.0], abs=1e-12)
    assert gc.seq_ratio_err(logps, old, mask) < 1e-12


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_seq_ratio_matches_geometric_mean(seed):
    b = gc.random_batch(seed=seed)
    assert gc.seq_ratio_err(b["logps"], b["old_logps"], b["mask"]) < 1e-12


@pytest.mark.parametrize("cfg,scale", [(GSPO, 1e-3), (WIDE, 0.3)])
def test_gspo_token_equals_gspo(cfg, scale):
    b = gc.random_batch(scale=scale, seed=3)
    value_err, grad_err = gc.token_equivalence(b, cfg)
    assert value_err < 1e-12 and grad_err < 1e-12
    _, grad = gc.loss_and_grad(b, dataclasses.replace(cfg, ratio_level="sequence_token"))
    assert float(grad.abs().max()) > 1e-3  # the identity is not 0 = 0


def test_one_token_gspo_equals_grpo_but_not_for_longer_responses():
    b = gc.random_batch(scale=0.3, seed=4)
    assert max(gc.one_token_err(b, WIDE)) < 1e-12
    tok = LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=0.28), aggregation="seq_mean_token_mean")
    assert gc.loss_diff(b, WIDE, tok)[1] > 1e-4


def test_clipped_rows_counts_sequences_outside_the_range():
    b = gc.random_batch(scale=0.3, seed=0)
    assert gc.clipped_rows(b, GSPO) == 6  # eps 3e-4: every sequence ratio is outside
    tiny = {**b, "logps": b["old_logps"].clone()}  # ratio exactly 1
    assert gc.clipped_rows(tiny, GSPO) == 0


def test_random_batch_shapes_and_lengths():
    b = gc.random_batch(B=4, T=5, seed=1)
    assert b["logps"].shape == (4, 5) and b["advantages"].shape == (4,)
    assert b["logps"].dtype == torch.float64
    assert float(b["mask"][0].sum()) == 5.0 and float(b["mask"].sum(dim=1).min()) >= 1


def test_clip_share_and_final_mean():
    m = [{"clip/frac": v, "reward/mean": r} for v, r in
         zip((0.1, 0.2, None, 0.3, 0.4, 0.5, 0.0, 0.1, 0.2, 0.3), (0, 0, 0, 0, 0, 0, 0, 0, 0.5, 1.0))]
    assert gc.clip_share(m) == pytest.approx(2.1 / 9)  # None skipped
    assert gc.final_mean(m) == pytest.approx(0.75)  # last 2 of 10 steps
    assert gc.final_mean(m[:3], frac=0.2) == pytest.approx(0.0)  # at least one step
    assert math.isnan(gc.clip_share([{"clip/frac": None}]))


def test_run_table_columns():
    runs = {"gspo/seed0": [{"clip/frac": 0.2, "clip/low": 0.15, "clip/high": 0.05, "reward/mean": 0.4,
                            "acc/mean": 0.5}],
            "grpo/seed0": [{"clip/frac": 0.002, "clip/low": 0.001, "clip/high": 0.001, "reward/mean": 0.3,
                            "acc/mean": 0.25}]}
    t = gc.run_table(runs)
    assert t.loc["gspo/seed0", "clip/frac"] == pytest.approx(0.2)
    assert t.loc["grpo/seed0", "acc (last 20%)"] == pytest.approx(0.25)
    assert t.loc["gspo/seed0", "reward (last 20%)"] == pytest.approx(0.4)


# ---------------------------------------------------------------- Sec. 5.4: engine vs trainer mismatch

def test_mismatch_hand_numbers():
    # trainer - engine: row 0 alternates +-0.1 (token-level 0.1, sequence-level 0), row 1 is +0.2 on 2 tokens
    engine = torch.full((2, 4), -1.0, dtype=torch.float64)
    trainer = engine + torch.tensor([[0.1, -0.1, 0.1, -0.1], [0.2, 0.2, 5.0, 5.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.float64)
    assert gc.token_mismatch(engine, trainer, mask).tolist() == pytest.approx([0.1] * 4 + [0.2] * 2, abs=1e-12)
    assert gc.sequence_mismatch(engine, trainer, mask).tolist() == pytest.approx([0.0, 0.2], abs=1e-12)
    s = gc.mismatch_stats(engine, trainer, mask)
    assert s["token_mismatch"] == pytest.approx(0.8 / 6, abs=1e-12)
    assert s["seq_mismatch"] == pytest.approx(0.1, abs=1e-12)
    assert s["token_mismatch_p99"] == pytest.approx(0.2, abs=1e-12)
    assert s["seq_mismatch_p99"] == pytest.approx(0.99 * 0.2, abs=1e-12)  # linear interpolation between 0 and 0.2


# ---------------------------------------------------------------- Sec. 5.3: routing volatility (P3)

def test_expert_set_change_hand_numbers():
    before = torch.tensor([[[[0, 1], [2, 3], [4, 5]]], [[[0, 1], [2, 3], [4, 5]]]])  # (L=2, B=1, T=3, k=2)
    after = torch.tensor([[[[1, 0], [2, 4], [4, 5]]], [[[0, 1], [2, 3], [4, 5]]]])  # layer 0: order swap, one change
    assert gc.expert_set_change(before, after, torch.ones(1, 3)).tolist() == pytest.approx([1 / 3, 0.0])
    assert gc.expert_set_change(before, after, torch.tensor([[1, 0, 1]])).tolist() == [0.0, 0.0]
    assert gc.expert_set_change(before, before.flip(-1), torch.ones(1, 3)).tolist() == [0.0, 0.0]


@pytest.fixture(scope="module")
def tiny_models():
    from test_moe import build
    return build


def _ids(B=4, T=12, seed=5):
    ids = torch.randint(2, 64, (B, T), generator=torch.Generator().manual_seed(seed))
    return ids, torch.ones(B, T, dtype=torch.long)


@pytest.mark.parametrize("train_router", [False, True])
def test_routing_change_after_one_step(tiny_models, train_router):
    from test_moe import lm_step
    model = tiny_models("qwen3_moe", train_router=train_router)
    ids, attn = _ids()
    nothing = gc.routing_change_after_step(model, ids, attn, attn, lambda: None)
    assert nothing.tolist() == [0.0] * 4
    share = gc.routing_change_after_step(model, ids, attn, attn, lambda: lm_step(model, lr=1e-2))
    assert share.shape == (4,) and bool(((share >= 0) & (share <= 1)).all())
    if train_router:
        assert float(share.max()) > 0


def test_update_at_matched_kl_moe_and_dense(tiny_models):
    from test_moe import lm_step
    ids, attn = _ids()
    mask = attn[:, 1:].double()
    out = {}
    for arch in ("qwen3_moe", "dense"):
        model = tiny_models(arch, train_router=arch != "dense")
        old = gc.next_token_logprobs(model, ids, attn)
        assert gc.old_new_kl(old, old, mask) == 0.0 and gc.log_ratio_std(old, old, ids, mask) == 0.0
        out[arch] = gc.update_at_kl(model, ids, attn, mask, lambda: lm_step(model, lr=1e-2), target_kl=1e-3)
    for arch, r in out.items():
        assert r["kl"] == pytest.approx(1e-3, rel=1e-3) and r["alpha"] > 0 and r["log_ratio_std"] > 0
    assert "route_change" not in out["dense"] and len(out["qwen3_moe"]["route_change"]) == 4
    assert all(0 <= x <= 1 for x in out["qwen3_moe"]["route_change"])


def test_rollout_sequences_align_with_the_trainer_forward(tiny_models):
    from types import SimpleNamespace
    from gpolib.logprobs import completion_logps
    from gpolib.moe import record_routing
    from test_moe import batch
    model = tiny_models("qwen3_moe", train_router=True)
    p_ids, p_mask, c_ids, c_mask = batch()  # left-padded prompts, one short completion
    ids, attn, comp, pred = gc.rollout_sequences(SimpleNamespace(prompt_ids=p_ids, prompt_mask=p_mask,
                                                                 completion_ids=c_ids, completion_mask=c_mask))
    assert ids.shape == attn.shape == comp.shape == (3, 12) and pred.shape == (3, 11)
    assert int(comp.sum()) == int(pred.sum()) == int(c_mask.sum())
    recorded = []
    with torch.no_grad(), record_routing(model, recorded):
        lp = completion_logps(model, p_ids, p_mask, c_ids, c_mask, bucket=False)  # (B, T) as the trainer
    full = gc.next_token_logprobs(model, ids, attn).gather(-1, ids[:, 1:, None]).squeeze(-1)  # (B, P+T-1)
    assert float((full[pred > 0] - lp[c_mask > 0].double()).abs().max()) < 1e-5
    routes = gc.expert_ids(model, ids, attn)  # (L, B, P+T, k)
    assert all(torch.equal(routes[layer].reshape(-1, 2), r) for layer, r in enumerate(recorded))
