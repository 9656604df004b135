"""The family since GSPO, second round (issue 53): SAPO, LUSPO, VESPO and the two selection steps, by hand.

Each value here is worked from the paper's equation on a batch small enough to follow; the parity with TRL's and
verl's own code is in tests/test_trl_family_parity.py and tests/test_verl_parity.py."""
import math

import pytest
import torch

from gpolib import LossConfig, presets
from gpolib.objectives import Sapo, policy_loss


def _grad(loss, x):
    (g,) = torch.autograd.grad(loss, x)
    return g


def test_sapo_by_hand_the_gate_and_its_weight_no_token_zeroed():
    """Two responses of two tokens, log r = (0, 3) and (0, -1), A = (+1, -1): f = (4 / tau) sigmoid(tau (r - 1)) A;
    d f / d log r = 4 sigma (1 - sigma) r A: 1 * A at r = 1, small at r = e^3, never 0."""
    old = torch.zeros(2, 2, dtype=torch.float64)
    logps = torch.tensor([[0.0, 3.0], [0.0, -1.0]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.float64)
    loss, info = policy_loss(logps, old, adv, mask, LossConfig(surrogate=Sapo(tau_pos=1.0, tau_neg=1.05)))

    def sig(x):
        return 1 / (1 + math.exp(-x))

    r = [[1.0, math.e ** 3], [1.0, math.e ** -1]]
    tau = [1.0, 1.05]
    f = [[4 / tau[i] * sig(tau[i] * (r[i][t] - 1)) * (1, -1)[i] for t in range(2)] for i in range(2)]
    assert loss.item() == pytest.approx(-sum(sum(row) / 2 for row in f) / 2, abs=1e-12)
    w = [[4 * sig(tau[i] * (r[i][t] - 1)) * (1 - sig(tau[i] * (r[i][t] - 1))) for t in range(2)] for i in range(2)]
    expected = torch.tensor([[-w[i][t] * r[i][t] * (1, -1)[i] / 4 for t in range(2)] for i in range(2)],
                            dtype=torch.float64)
    g = _grad(loss, logps)
    assert torch.allclose(g, expected, atol=1e-12) and bool((g != 0).all())
    assert w[0][0] == 1.0 and w[0][1] < 0.1  # the weight: 1 on-policy, below 0.1 at r = e^3
    assert info["gate/mean"].value == pytest.approx(sum(map(sum, w)) / 4, abs=1e-12)
    assert info["gate/low_frac"].value == 0.25 and info["gate/zeroed_frac"].value == 0.0
    # no token zeroed: the log-ratio range spans every token with A != 0, the one at r = e^3 included
    assert info["ratio/log_range"].value == pytest.approx(4.0)
    assert Sapo().diagnostics(torch.exp(logps.detach()), old, adv, mask)[1] is None


@pytest.mark.parametrize("kw, match", [(dict(tau_pos=0.0), "tau_pos"), (dict(tau_neg=-1.0), "tau_neg"),
                                       (dict(tau_pos=float("inf")), "tau_pos")])
def test_sapo_checks_its_temperatures(kw, match):
    with pytest.raises(ValueError, match=match):
        Sapo(**kw)


def test_sapo_preset_cites_and_sets_the_papers_temperatures():
    cfg = presets.get("sapo")
    assert cfg.loss.surrogate == Sapo(tau_pos=1.0, tau_neg=1.05) and cfg.loss.aggregation == "seq_mean_token_mean"
    assert presets.get("sapo", loss_tau_neg=2.0).loss.surrogate.tau_neg == 2.0


def test_luspo_by_hand_is_gspo_times_the_length():
    """Responses of 1 and 3 tokens, log s = 0.1 and -0.1, A = +1 and +1, clip 1 +- 0.05: response 1 clipped above
    (no gradient), response 2 unclipped: loss = -(1 * 1.05 + 3 * e^-0.1) / 2, d loss / d log pi_t = -e^-0.1 / 2 on
    each token of response 2 (3 tokens share d s / d log pi_t = s / 3, times |o| = 3)."""
    from gpolib.objectives import Luspo

    old = torch.zeros(2, 3, dtype=torch.float64)
    logps = torch.tensor([[0.1, 0.0, 0.0], [-0.1, -0.1, -0.1]], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1.0, 0, 0], [1, 1, 1]], dtype=torch.float64)
    adv = torch.tensor([1.0, 1.0], dtype=torch.float64)
    cfg = LossConfig(ratio_level="sequence", surrogate=Luspo(eps_low=0.05, eps_high=0.05))
    loss, info = policy_loss(logps, old, adv, mask, cfg)
    assert loss.item() == pytest.approx(-(1 * 1.05 + 3 * math.exp(-0.1)) / 2, abs=1e-12)
    g = _grad(loss, logps)
    assert torch.allclose(g, torch.tensor([[0.0, 0, 0], [-math.exp(-0.1) / 2] * 3], dtype=torch.float64), atol=1e-12)
    assert info["clip/high"].value == 0.25  # 1 of the 4 tokens, response 1's
    gspo, _ = policy_loss(logps, old, adv, mask, cfg.replace(surrogate="clip", eps_low=0.05, eps_high=0.05))
    assert gspo.item() == pytest.approx(-(1.05 + math.exp(-0.1)) / 2, abs=1e-12)  # GSPO: each response weighs 1
    with pytest.raises(ValueError, match="ratio_level"):
        LossConfig(ratio_level="token", surrogate="luspo")
    from gpolib.export import trl_missing, verl_missing

    assert trl_missing("luspo") == [] and any("KL" in m for m in trl_missing(presets.get("luspo", loss_beta=0.04)))
    assert verl_missing("luspo") == ["surrogate='luspo' (no verl policy loss computes it)"]


def test_vespo_by_hand_the_gamma_weight_of_the_unnormalised_ratio():
    """Response 1: log r = (0.2, 0.3), A = +1: ln w = 0.5 (the sum, not GSPO's mean), phi = e^(3 + 2 * 0.5 - 3 e^0.5);
    response 2: log r = (0, 0), A = -1: phi(1) = 1. token_mean: d loss / d log pi_t = -phi_i A_i / 4, detached phi."""
    from gpolib.objectives import Vespo

    old = torch.full((2, 2), -1.0, dtype=torch.float64)
    logps = (old + torch.tensor([[0.2, 0.3], [0.0, 0.0]], dtype=torch.float64)).requires_grad_(True)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.float64)
    loss, info = policy_loss(logps, old, adv, mask, presets.get("vespo").loss)
    phi1 = math.exp(3 + 2 * 0.5 - 3 * math.exp(0.5))
    assert loss.item() == pytest.approx(-(phi1 * (-0.8 - 0.7) + 1.0 * 2.0) / 4, abs=1e-12)
    g = _grad(loss, logps)
    assert torch.allclose(g, torch.tensor([[-phi1 / 4] * 2, [0.25] * 2], dtype=torch.float64), atol=1e-12)
    assert info["gamma_weight/mean"].value == pytest.approx((phi1 + 1) / 2, abs=1e-12)
    assert info["gamma_weight/low_frac"].value == 0.0 and phi1 > 0.1
    with pytest.raises(ValueError, match="rate_neg"):
        Vespo(rate_neg=0.0)
    with pytest.raises(ValueError, match="ratio_level"):
        LossConfig(ratio_level="sequence", surrogate="vespo")


def test_high_entropy_selection_by_hand_keeps_the_top_tokens_only():
    """Five real tokens with entropies 0.1 .. 0.5, rho = 0.4: the 0.6 quantile is 0.34, so the tokens of entropy 0.4
    and 0.5 keep their term; the padding never does. GRPO at r = 1: d loss / d log pi = -A / |o| / B there, else 0."""
    logps = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]], dtype=torch.float64)
    ent = torch.tensor([[0.1, 0.5, 0.3], [0.4, 0.2, 9.0]], dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    loss, info = policy_loss(logps, logps.detach(), adv, mask, LossConfig(top_entropy_quantile=0.4), entropies=ent)
    g = _grad(loss, logps)
    assert torch.allclose(g, torch.tensor([[0, -1 / 6, 0], [1 / 4, 0, 0]], dtype=torch.float64), atol=1e-12)
    assert info["select/entropy_dropped"].value == pytest.approx(3 / 5)
    assert info["select/entropy_kept"].value == pytest.approx(0.45)
    with pytest.raises(ValueError, match="entropies are required"):
        policy_loss(logps, logps.detach(), adv, mask, LossConfig(top_entropy_quantile=0.4))


def test_off_policy_mask_by_hand_drops_only_drifted_negative_responses():
    """delta = 0.2: response 1 (A > 0, drift 0.5) kept; response 2 (A < 0, drift 0.5) dropped; response 3 (A < 0,
    drift 0.1) kept. The drift is mean log(pi_sample / pi_theta), pi_sample = pi_old without engine log-probs."""
    old = torch.zeros(3, 2, dtype=torch.float64)
    logps = torch.tensor([[-0.5, -0.5], [-0.5, -0.5], [-0.1, -0.1]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([1.0, -1.0, -1.0], dtype=torch.float64)
    mask = torch.ones(3, 2, dtype=torch.float64)
    cfg = LossConfig(surrogate=Sapo(), off_policy_mask_threshold=0.2)
    loss, info = policy_loss(logps, old, adv, mask, cfg)
    g = _grad(loss, logps)
    assert bool((g[0] != 0).all()) and bool((g[1] == 0).all()) and bool((g[2] != 0).all())
    assert info["select/off_policy_dropped"].value == pytest.approx(1 / 3)
    engine = logps.detach() + 0.05  # pi_sample close to pi_theta: nothing drifts past delta
    _, info = policy_loss(logps, old, adv, mask, cfg, engine_logps=engine)
    assert info["select/off_policy_dropped"].value == 0.0


@pytest.mark.parametrize("kw, match", [(dict(top_entropy_quantile=0.0), "top_entropy_quantile"),
                                       (dict(top_entropy_quantile=1.5), "top_entropy_quantile"),
                                       (dict(off_policy_mask_threshold=-0.1), "off_policy_mask_threshold"),
                                       (dict(off_policy_mask_threshold=float("nan")), "off_policy_mask_threshold")])
def test_selection_fields_are_checked(kw, match):
    with pytest.raises(ValueError, match=match):
        LossConfig(**kw)


def test_selection_is_off_by_default_and_keeps_identities():
    assert presets.get("grpo").identity() == presets.get("grpo", loss_top_entropy_quantile=1.0).identity()
    assert "top_entropy_quantile" in presets.get("grpo", loss_top_entropy_quantile=0.2).identity()["loss"]
    top = presets.get("grpo_top_entropy")
    assert top.loss.top_entropy_quantile == 0.2
    assert top.loss.replace(top_entropy_quantile=1.0) == presets.get("grpo").loss
