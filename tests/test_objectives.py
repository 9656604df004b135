"""Exact numbers and identities for every objective (DeepSeekMath, DAPO, GSPO, Dr. GRPO)."""
import math

import pytest
import torch

from gpolib import LossConfig
from gpolib.metrics import Share
from gpolib.objectives import (Cispo, Clip, aggregate, clip_masks, clipped_surrogate, group_advantages,
                               importance_ratio, k1_kl, k3_kl, policy_loss, sequence_log_ratio)

torch.manual_seed(0)
GRPO = LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=0.2), aggregation="seq_mean_token_mean")
DAPO = LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=0.28), aggregation="token_mean")
DR = LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=0.2), aggregation="seq_mean_token_sum_norm",
                max_len=100)
ALL = [GRPO, DAPO, DR,
       LossConfig(ratio_level="sequence", surrogate=Clip(eps_low=3e-4, eps_high=4e-4),
                  aggregation="seq_mean_token_mean"),
       LossConfig(ratio_level="sequence_token", surrogate=Clip(eps_low=3e-4, eps_high=4e-4),
                  aggregation="seq_mean_token_mean")]


def _mask(lengths, T):
    return (torch.arange(T).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).float()  # (B, T)


# --- R1: advantages of a group of 8 ------------------------------------------
@pytest.mark.parametrize("n_correct,a_correct,a_wrong", [
    (1, 0.875 / (math.sqrt(0.125) + 1e-4), -0.125 / (math.sqrt(0.125) + 1e-4)),   # 2.4742, -0.3535
    (7, 0.125 / (math.sqrt(0.125) + 1e-4), -0.875 / (math.sqrt(0.125) + 1e-4)),   # 0.3535, -2.4742
    (4, 0.5 / (math.sqrt(2 / 7) + 1e-4), -0.5 / (math.sqrt(2 / 7) + 1e-4)),       # 0.9352, -0.9352
])
def test_group_advantages_hand_computed(n_correct, a_correct, a_wrong):
    r = torch.tensor([1.0] * n_correct + [0.0] * (8 - n_correct))
    adv = group_advantages(r, 8, "group")
    assert adv[0].item() == pytest.approx(a_correct, rel=1e-5)
    assert adv[-1].item() == pytest.approx(a_wrong, rel=1e-5)
    none = group_advantages(r, 8, "none")
    assert none[0].item() == pytest.approx(1 - n_correct / 8, abs=1e-7)
    assert none[-1].item() == pytest.approx(-n_correct / 8, abs=1e-7)


def test_group_advantages_one_correct_of_eight_values():
    adv = group_advantages(torch.tensor([1.0] + [0.0] * 7), 8)
    assert round(adv[0].item(), 4) == 2.4742 and round(adv[1].item(), 4) == -0.3535


def test_group_vs_batch_scale_and_zero_variance():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0])  # group 1 mixed, group 2 all wrong
    g = group_advantages(r, 4, "group")
    assert torch.all(g[4:] == 0)  # zero-variance group: no signal
    b = group_advantages(r, 4, "batch")
    batch_std = r.std().item()
    assert b[0].item() == pytest.approx((1 - 0.75) / (batch_std + 1e-4), rel=1e-6)
    with pytest.raises(ValueError, match="group_size"):
        group_advantages(torch.ones(7), 4)
    with pytest.raises(ValueError, match="scale"):
        group_advantages(torch.ones(8), 4, "median")


# --- on-policy: ratio 1, clipping inert, gradient = -A grad logp aggregated ---
@pytest.mark.parametrize("cfg", ALL, ids=lambda c: f"{c.ratio_level}-{c.aggregation}")
def test_on_policy_gradient_is_advantage_weighted(cfg):
    B, T = 4, 6
    lengths = [6, 3, 1, 5]
    mask = _mask(lengths, T)
    logps = torch.randn(B, T).requires_grad_()
    adv = torch.tensor([1.5, -0.5, 2.0, -1.0])
    loss, info = policy_loss(logps, logps.detach(), adv, mask, cfg)
    loss.backward()
    assert info["clip/frac"].value == 0.0 and info["ratio/mean"].value == pytest.approx(1.0)
    L = torch.tensor(lengths, dtype=torch.float32).unsqueeze(1)
    if cfg.aggregation == "seq_mean_token_mean":
        weight = 1.0 / (B * L)  # sequence level too: d s_i / d logp_t = s_i / |o_i| with s_i = 1
    elif cfg.aggregation == "token_mean":
        weight = torch.full_like(L, 1.0 / sum(lengths))
    else:
        weight = torch.full_like(L, 1.0 / (B * cfg.max_len))
    expected = -adv.unsqueeze(1) * weight * mask
    assert torch.allclose(logps.grad, expected, atol=1e-7)
    assert loss.item() == pytest.approx(-(adv.unsqueeze(1) * weight * mask).sum().item(), abs=1e-6)


# --- D3: per-token gradient weight, 10 vs 100 tokens -------------------------
@pytest.mark.parametrize("cfg,ratio", [(GRPO, 10.0), (DAPO, 1.0), (DR, 1.0)])
def test_token_weight_ratio_short_vs_long(cfg, ratio):
    mask = _mask([10, 100], 100)
    logps = torch.zeros(2, 100, requires_grad=True)
    policy_loss(logps, logps.detach(), torch.tensor([1.0, 1.0]), mask, cfg)[0].backward()
    assert (logps.grad[0, 0] / logps.grad[1, 0]).item() == pytest.approx(ratio, rel=1e-6)


def test_dr_grpo_normaliser_independent_of_lengths():
    for lengths in ([10, 100], [50, 50], [1, 7]):
        mask = _mask(lengths, 100)
        logps = torch.zeros(2, 100, requires_grad=True)
        policy_loss(logps, logps.detach(), torch.tensor([1.0, 1.0]), mask, DR)[0].backward()
        assert torch.allclose(logps.grad[mask.bool()], torch.tensor(-1.0 / 200))


# --- GSPO identities (P1) -----------------------------------------------------
def test_sequence_ratio_is_geometric_mean():
    logps = torch.log(torch.tensor([[0.5, 0.25, 0.1]]))
    old = torch.log(torch.tensor([[0.25, 0.5, 0.1]]))
    s = torch.exp(sequence_log_ratio(logps, old, torch.ones(1, 3)))
    assert s.item() == pytest.approx((2.0 * 0.5 * 1.0) ** (1 / 3), rel=1e-6)
    masked = torch.exp(sequence_log_ratio(logps, old, torch.tensor([[1.0, 0.0, 0.0]])))
    assert masked.item() == pytest.approx(2.0, rel=1e-6)


def test_token_ratio_product_decays_as_in_gspo():
    assert 0.99 ** 200 == pytest.approx(0.134, abs=5e-4)


def test_gspo_equals_grpo_for_one_token_responses():
    B = 16
    old = torch.randn(B, 1)
    adv = torch.randn(B)
    mask = torch.ones(B, 1)
    grads = []
    for level in ("token", "sequence", "sequence_token"):
        logps = (old + 0.3 * torch.randn(B, 1, generator=torch.Generator().manual_seed(1))).requires_grad_()
        cfg = LossConfig(ratio_level=level, surrogate=Clip(eps_low=0.2, eps_high=0.28),
                         aggregation="seq_mean_token_mean")
        loss, _ = policy_loss(logps, old, adv, mask, cfg)
        loss.backward()
        grads.append((loss.item(), logps.grad.clone()))
    for value, grad in grads[1:]:
        assert value == pytest.approx(grads[0][0], abs=1e-6)
        assert torch.allclose(grad, grads[0][1], atol=1e-6)


@pytest.mark.parametrize("eps", [(3e-4, 4e-4), (0.2, 0.2), (0.99, 10.0)])
def test_gspo_token_equals_gspo_value_and_gradient(eps):
    B, T = 6, 9
    mask = _mask([9, 4, 1, 7, 9, 2], T)
    old = torch.randn(B, T, dtype=torch.float64)
    delta = 0.05 * torch.randn(B, T, dtype=torch.float64)
    adv = torch.randn(B, dtype=torch.float64)
    out = []
    for level in ("sequence", "sequence_token"):
        logps = (old + delta).requires_grad_()
        cfg = LossConfig(ratio_level=level, surrogate=Clip(eps_low=eps[0], eps_high=eps[1]),
                         aggregation="seq_mean_token_mean")
        loss, info = policy_loss(logps, old, adv, mask, cfg)
        loss.backward()
        out.append((loss.item(), logps.grad.clone(), info["clip/frac"].value))
    assert out[0][0] == pytest.approx(out[1][0], abs=1e-6)
    assert torch.allclose(out[0][1], out[1][1], atol=1e-6)
    assert out[0][2] == pytest.approx(out[1][2])


def test_sequence_ratio_broadcast_and_gradient_check():
    mask = _mask([3, 2], 3).double()
    old = torch.randn(2, 3, dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    cfg = LossConfig(ratio_level="sequence", surrogate=Clip(eps_low=0.99, eps_high=10.0),
                     aggregation="seq_mean_token_mean")  # smooth
    f = lambda lp: policy_loss(lp, old, adv, mask, cfg)[0]
    assert torch.autograd.gradcheck(f, (old + 0.1).clone().requires_grad_())
    r = importance_ratio(old + 0.1, old, mask, "sequence")
    assert torch.allclose(r, torch.full_like(r, math.exp(0.1)))


# --- clipping -----------------------------------------------------------------
def test_clipped_surrogate_hand_values():
    ratio = torch.tensor([[0.5, 0.9, 1.0, 1.3, 1.5]])
    up = clipped_surrogate(ratio, torch.tensor([2.0]), 0.2, 0.28)
    assert torch.allclose(up, torch.tensor([[1.0, 1.8, 2.0, 2.56, 2.56]]))
    down = clipped_surrogate(ratio, torch.tensor([-1.0]), 0.2, 0.28)
    assert torch.allclose(down, torch.tensor([[-0.8, -0.9, -1.0, -1.3, -1.5]]))


def test_clip_masks_hand_built():
    ratio = torch.tensor([[0.5, 0.9, 1.0, 1.3, 1.5],
                          [0.5, 0.7, 1.0, 1.3, 1.5]])
    adv = torch.tensor([1.0, -1.0])
    low, high = clip_masks(ratio, adv, 0.2, 0.28)
    # high: row 1 tokens 1.3, 1.5 (A > 0); low: row 2 tokens 0.5, 0.7 (A < 0); row 1's 0.5 has A > 0: no clip
    assert high.tolist() == [[False, False, False, True, True], [False] * 5]
    assert low.tolist() == [[False] * 5, [True, True, False, False, False]]


def test_clip_shares_hand_built_through_policy_loss():
    mask = torch.tensor([[1.0, 1, 1, 1, 1], [1, 1, 1, 1, 0]])  # last token of row 2 masked: 9 tokens
    old = torch.zeros(2, 5)
    logps = torch.log(torch.tensor([[0.5, 0.9, 1.0, 1.3, 1.5], [0.5, 0.7, 1.0, 1.3, 1.5]]))  # token ratios
    _, info = policy_loss(logps, old, torch.tensor([1.0, -1.0]), mask, DAPO)
    assert (info["clip/high"].total, info["clip/low"].total, info["clip/frac"].total) == (2, 2, 4)
    assert info["clip/frac"].value == pytest.approx(4 / 9) and info["clip/high"].weight == 9
    # mean pi_old of the up-clipped tokens: pi_old = 1 everywhere here
    assert info["clip/high_pi_old"].value == pytest.approx(1.0) and info["clip/high_pi_old"].weight == 2
    _, info = policy_loss(logps, old, torch.tensor([1.0, -1.0]), mask, GRPO)  # symmetric 0.2: the same tokens
    assert info["clip/high"].value == pytest.approx(2 / 9)


def test_clip_diagnostics_use_the_configured_ratio_level():
    """GSPO clips whole responses: its clip shares count the tokens of responses whose s_i leaves the range,
    whatever their token ratios (the token ratios 1.5 and 0.5 below average out to s_i = 0.866)."""
    old = torch.log(torch.tensor([[0.2, 0.4], [0.5, 0.5]]))
    logps = old + torch.log(torch.tensor([[1.5, 0.5], [1.3, 1.3]]))  # s_1 = sqrt(0.75) = 0.866, s_2 = 1.3
    mask, adv = torch.ones(2, 2), torch.tensor([1.0, 1.0])
    seq = LossConfig(ratio_level="sequence", surrogate=Clip(eps_low=0.2, eps_high=0.2),
                     aggregation="seq_mean_token_mean")
    _, info = policy_loss(logps, old, adv, mask, seq)
    assert info["clip/high"].total == 2  # both tokens of response 2, none of response 1
    assert info["clip/high_pi_old"].value == pytest.approx(0.5)  # pi_old of response 2's tokens
    _, tok = policy_loss(logps, old, adv, mask, GRPO)
    assert tok["clip/high"].total == 3  # token level: 1.5 of response 1 and both 1.3 of response 2
    assert tok["clip/high_pi_old"].value == pytest.approx((0.2 + 0.5 + 0.5) / 3)


def test_diagnostics_pool_over_parts_and_skipped_rows():
    """Pooling micro-batches by `+` gives the whole batch's means; a Share counts rows with A = 0 (skipped
    by the loop) as unclipped tokens, exactly what `policy_loss` on the whole batch gives."""
    B, T = 6, 5
    mask = _mask([5, 2, 4, 1, 5, 3], T)
    old = torch.randn(B, T, generator=torch.Generator().manual_seed(3))
    new = old + 0.4 * torch.randn(B, T, generator=torch.Generator().manual_seed(4))
    adv = torch.tensor([1.2, 0.0, -0.7, 0.0, -1.0, 2.0])
    _, whole = policy_loss(new, old, adv, mask, DAPO)
    parts = [policy_loss(new[r], old[r], adv[r], mask[r], DAPO)[1] for r in ([0, 2], [4, 5])]
    pooled = {k: parts[0][k] + parts[1][k] for k in parts[0]}
    skipped = float(mask[[1, 3]].sum())
    for k in ("clip/low", "clip/high", "clip/frac"):
        assert isinstance(pooled[k], Share)
        assert (pooled[k] + Share(0.0, skipped)).value == pytest.approx(whole[k].value, abs=1e-12)
    assert whole["clip/frac"].total > 0
    trained = policy_loss(new[[0, 2, 4, 5]], old[[0, 2, 4, 5]], adv[[0, 2, 4, 5]], mask[[0, 2, 4, 5]], DAPO)[1]
    for k in ("pi_old/mean", "ratio/mean", "clip/high_pi_old"):
        assert pooled[k].value == pytest.approx(trained[k].value, rel=1e-6)


def test_clip_higher_lets_low_probability_tokens_rise():
    ratio = torch.tensor([[1.25]], requires_grad=True)
    clipped_surrogate(ratio, torch.tensor([1.0]), 0.2, 0.2).sum().backward()
    assert ratio.grad.item() == 0.0  # symmetric: clipped, no gradient
    ratio.grad = None
    clipped_surrogate(ratio, torch.tensor([1.0]), 0.2, 0.28).sum().backward()
    assert ratio.grad.item() == 1.0  # Clip-Higher: still learning


# --- aggregation ----------------------------------------------------------------
def test_aggregations_hand_values():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert aggregate(per_token, mask, "seq_mean_token_mean").item() == pytest.approx((2.0 + 4.0) / 2)
    assert aggregate(per_token, mask, "token_mean").item() == pytest.approx(10.0 / 4)
    assert aggregate(per_token, mask, "seq_mean_token_sum_norm", max_len=5).item() == pytest.approx(10.0 / 10)
    with pytest.raises(ValueError, match="max_len"):
        aggregate(per_token, mask, "seq_mean_token_sum_norm")


# --- KL (G2) ------------------------------------------------------------------
def test_k3_nonnegative_and_zero_at_equality():
    logp = torch.randn(1000) * 3
    ref = torch.randn(1000) * 3
    assert bool((k3_kl(logp, ref) >= 0).all())
    assert torch.all(k3_kl(logp, logp) == 0)
    assert k3_kl(torch.tensor(0.0), torch.log(torch.tensor(2.0))).item() == pytest.approx(2 - math.log(2) - 1)
    assert bool((k1_kl(logp, ref) < 0).any())


def test_k3_unbiased_on_small_vocab():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(6, generator=g), 0)
    q = torch.softmax(torch.randn(6, generator=g), 0)
    exact = (p * (p / q).log()).sum().item()
    idx = torch.multinomial(p, 100_000, replacement=True, generator=g)
    est = k3_kl(p.log()[idx], q.log()[idx]).mean().item()
    assert abs(est - exact) / exact < 0.02


def test_policy_loss_kl_term():
    mask = torch.ones(2, 3)
    logps = torch.zeros(2, 3, requires_grad=True)
    ref = torch.full((2, 3), math.log(0.5))
    cfg = LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=0.2), aggregation="token_mean", beta=0.1)
    loss, info = policy_loss(logps, logps.detach(), torch.zeros(2), mask, cfg, ref_logps=ref)
    k3 = 0.5 - math.log(0.5) - 1
    assert info["kl/mean"].value == pytest.approx(k3, rel=1e-6)
    assert loss.item() == pytest.approx(0.1 * k3, rel=1e-6)
    with pytest.raises(ValueError, match="ref_logps"):
        policy_loss(logps, logps.detach(), torch.zeros(2), mask, cfg)


@pytest.mark.parametrize("cfg", [GRPO, DAPO, DR], ids=lambda c: c.aggregation)
def test_zero_advantage_rows_can_be_skipped(cfg):
    from gpolib.objectives import subset_scale
    B, T = 6, 7
    mask = _mask([7, 2, 5, 1, 6, 3], T)
    old = torch.randn(B, T, dtype=torch.float64)
    new = old + 0.2 * torch.randn(B, T, dtype=torch.float64)
    adv = torch.tensor([1.2, 0.0, -0.7, 0.0, 0.0, 2.0], dtype=torch.float64)
    full = new.clone().requires_grad_()
    loss_full, _ = policy_loss(full, old, adv, mask, cfg)
    loss_full.backward()
    keep = adv != 0
    sub = new[keep].clone().requires_grad_()
    loss_sub, _ = policy_loss(sub, old[keep], adv[keep], mask[keep], cfg)
    scale = subset_scale(cfg.aggregation, int(keep.sum()), B, float(mask[keep].sum()), float(mask.sum()))
    (loss_sub * scale).backward()
    assert (loss_sub * scale).item() == pytest.approx(loss_full.item(), abs=1e-12)
    assert torch.allclose(sub.grad, full.grad[keep], atol=1e-12)
    assert torch.all(full.grad[~keep] == 0)


def test_rloo_is_dr_grpo_centred_reward_times_g_over_g_minus_1():
    """C4: r_i - mean_{j != i} r_j = (r_i - mean_g) * G / (G - 1), exactly (Ahmadian et al. 2024)."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.3, 0.9, 0.1, 0.7])
    G = 4
    rloo = group_advantages(rewards, G, "rloo")
    assert torch.allclose(rloo, group_advantages(rewards, G, "none") * G / (G - 1), atol=1e-6, rtol=0)
    # by hand, first group [1, 0, 0, 1]: 1 - (0 + 0 + 1) / 3 = 2/3, 0 - 2/3 = -2/3
    assert torch.allclose(rloo[:4], torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3]), atol=1e-6, rtol=0)


def test_log_ratio_range_counts_only_tokens_with_gradient():
    """ratio/log_range = max - min of log r over tokens with A != 0 that the clip leaves a gradient. By hand, DAPO
    (0.2 / 0.28): row 1 (A = 1) ratios 0.5, 0.9, 1.0, 1.3, 1.5 -> 1.3 and 1.5 clipped above; row 2 (A = -1)
    0.5, 0.7 clipped below, 1.0 and 1.3 kept (the last token masked); row 3 has A = 0 (no gradient, ratio 3).
    Kept: 0.5, 0.9, 1.0 (row 1), 1.0, 1.3 (row 2) -> log 1.3 - log 0.5. CISPO keeps every token with A != 0:
    log 1.5 - log 0.5. Pooled parts give the union's range."""
    mask = torch.tensor([[1.0, 1, 1, 1, 1], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    r = torch.tensor([[0.5, 0.9, 1.0, 1.3, 1.5], [0.5, 0.7, 1.0, 1.3, 9.0], [3.0, 1, 1, 1, 1]])
    old, adv = torch.zeros(3, 5), torch.tensor([1.0, -1.0, 0.0])
    _, info = policy_loss(torch.log(r), old, adv, mask, DAPO)
    assert info["ratio/log_range"].value == pytest.approx(math.log(1.3) - math.log(0.5), rel=1e-6)
    cispo = LossConfig(ratio_level="token", surrogate=Cispo(cap=1.2), aggregation="token_mean")
    _, info = policy_loss(torch.log(r), old, adv, mask, cispo)
    assert info["ratio/log_range"].value == pytest.approx(math.log(1.5) - math.log(0.5), rel=1e-6)
    a, b = (policy_loss(torch.log(r[[i]]), old[[i]], adv[[i]], mask[[i]], DAPO)[1]["ratio/log_range"] for i in (0, 1))
    assert (a + b).value == pytest.approx(math.log(1.3) - math.log(0.5), rel=1e-6)
    assert policy_loss(torch.log(r[[2]]), old[[2]], adv[[2]], mask[[2]], DAPO)[1]["ratio/log_range"].value is None


def test_engine_logps_without_correction_are_measured_not_applied():
    """engine_logps with mismatch_correction='none': the loss is the uncorrected one, mismatch/* are logged
    (clipped_share: the tokens TIS at C = 2 would truncate); equal to the correction's diagnostics."""
    trainer = torch.log(torch.tensor([[0.9, 0.3, 0.5]]))
    engine = torch.log(torch.tensor([[0.3, 0.3, 0.4]]))  # w = 3, 1, 1.25
    mask, adv = torch.ones(1, 3), torch.tensor([1.0])
    plain, _ = policy_loss(trainer, trainer, adv, mask, GRPO)
    loss, info = policy_loss(trainer, trainer, adv, mask, GRPO, engine_logps=engine)
    assert loss.item() == plain.item()
    assert info["mismatch/clipped_share"].value == pytest.approx(1 / 3)
    assert info["mismatch/max_log_ratio"].value == pytest.approx(math.log(3.0), rel=1e-6)
    k3 = [w - math.log(w) - 1 for w in (3.0, 1.0, 1.25)]
    assert info["mismatch/kl"].value == pytest.approx(sum(k3) / 3, rel=1e-6)
    tis = LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=0.2), aggregation="seq_mean_token_mean",
                     mismatch_correction="token_truncate", mismatch_cap=2.0)
    corrected, tis_info = policy_loss(trainer, trainer, adv, mask, tis, engine_logps=engine)
    assert corrected.item() != plain.item()
    assert {k: tis_info[k].value for k in info if k.startswith("mismatch/")} == \
        {k: info[k].value for k in info if k.startswith("mismatch/")}
