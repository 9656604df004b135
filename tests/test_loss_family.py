"""The family since GSPO composed by LossConfig: CISPO, GMPO, the TIS / MIS mismatch correction, by hand; each
surrogate's own parameters and diagnostics, and the identity of runs recorded when every bound was eps_low /
eps_high."""
import dataclasses
import math

import pytest
import torch

from gpolib import LossConfig, TrainConfig, presets
from gpolib.metrics import Max
from gpolib.objectives import Cispo, Clip, Gmpo, policy_loss

MODES = ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]


def _grad(loss, x):
    (g,) = torch.autograd.grad(loss, x)
    return g


def test_cispo_keeps_the_gradient_of_a_token_outside_the_clip_range():
    old = torch.log(torch.tensor([[0.2, 0.5]]))
    logps = (old + torch.tensor([[math.log(2.0), 0.0]])).requires_grad_(True)  # r = 2 (> 1.28), r = 1
    adv, mask = torch.tensor([1.0]), torch.ones(1, 2)
    clip = LossConfig(surrogate=Clip(eps_high=0.28), aggregation="token_mean")
    cispo = clip.replace(surrogate=Cispo(cap=1.28))
    g_clip = _grad(policy_loss(logps, old, adv, mask, clip)[0], logps)
    loss, info = policy_loss(logps, old, adv, mask, cispo)
    g_cispo = _grad(loss, logps)
    assert g_clip[0, 0] == 0.0  # PPO's clip removes the token's gradient
    # loss = -(1/2) (1.28 * 1 * log 0.4 + 1 * 1 * log 0.5); d loss / d logp = -(1/2) [1.28, 1]
    assert math.isclose(loss.item(), -0.5 * (1.28 * math.log(0.4) + math.log(0.5)), abs_tol=1e-6)
    assert torch.allclose(g_cispo, torch.tensor([[-0.64, -0.5]]), atol=1e-6, rtol=0)
    assert info["capped/frac"].value == 0.5  # the cap holds the first token's weight (A > 0)
    assert not any(k.startswith("clip/") for k in info)  # CISPO clips no update: no clip/* of its own


def test_cispo_without_lower_bound_keeps_small_weights():
    old = torch.zeros(1, 1)
    logps = torch.full((1, 1), math.log(0.1), requires_grad=True)  # r = 0.1, below any 1 - eps_low < 1
    cfg = LossConfig(surrogate=Cispo(cap=5.0, floor=0.0), aggregation="token_mean")
    g = _grad(policy_loss(logps, old, torch.tensor([-1.0]), torch.ones(1, 1), cfg)[0], logps)
    assert math.isclose(float(g), 0.1, abs_tol=1e-7)  # -(0.1 * -1) = 0.1


def test_gmpo_of_one_token_equals_grpo_with_the_range_e_minus_0_4_to_e_0_4():
    g = torch.Generator().manual_seed(0)
    B = 16
    old = -2 * torch.rand(B, 1, generator=g)
    logps = (old + 0.6 * torch.randn(B, 1, generator=g)).requires_grad_(True)  # both sides of +-0.4
    adv, mask = torch.randn(B, generator=g), torch.ones(B, 1)
    gmpo = LossConfig(surrogate=Gmpo(log_clip_low=0.4, log_clip_high=0.4))
    grpo = LossConfig(surrogate=Clip(eps_low=1 - math.exp(-0.4), eps_high=math.exp(0.4) - 1))
    (l_gmpo, i_gmpo), (l_grpo, i_grpo) = policy_loss(logps, old, adv, mask, gmpo), policy_loss(logps, old, adv, mask, grpo)
    assert abs(l_gmpo.item() - l_grpo.item()) <= 1e-6
    assert float((_grad(l_gmpo, logps) - _grad(l_grpo, logps)).abs().max()) <= 1e-6
    assert i_gmpo["clip/frac"].value == i_grpo["clip/frac"].value > 0


def test_gmpo_by_hand_the_clipped_token_loses_its_gradient():
    old = torch.zeros(1, 3)
    logps = torch.tensor([[0.8, 0.2, 0.0]], requires_grad=True)  # log r = 0.8 (> 0.4), 0.2; third is padding
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, _ = policy_loss(logps, old, torch.tensor([2.0]), mask, LossConfig(surrogate=Gmpo()))
    # ratio = exp((0.4 + 0.2) / 2) = e^0.3; loss = -2 e^0.3; d/d logp_1 = -2 e^0.3 / 2
    assert math.isclose(loss.item(), -2 * math.exp(0.3), abs_tol=1e-6)
    assert torch.allclose(_grad(loss, logps), torch.tensor([[0.0, -math.exp(0.3), 0.0]]), atol=1e-6, rtol=0)


@pytest.mark.parametrize("mode", MODES)
def test_an_unbinding_cap_and_equal_logps_give_the_plain_loss(mode):
    g = torch.Generator().manual_seed(1)
    old = -2 * torch.rand(4, 5, generator=g)
    logps = (old + 0.3 * torch.randn(4, 5, generator=g)).requires_grad_(True)
    adv, mask = torch.randn(4, generator=g), (torch.rand(4, 5, generator=g) > 0.3).float()
    plain = LossConfig(beta=0.1)
    corrected = dataclasses.replace(plain, mismatch_correction=mode, mismatch_cap=1e30)  # math.inf: tests/test_is_weights.py
    ref = old + 0.1
    l0, _ = policy_loss(logps, old, adv, mask, plain, ref)
    l1, info = policy_loss(logps, old, adv, mask, corrected, ref, engine_logps=old.clone())
    assert l0.item() == l1.item() and torch.equal(_grad(l0, logps), _grad(l1, logps))
    assert info["mismatch/kl"].value == 0.0 and info["mismatch/clipped_share"].value == 0.0
    assert info["mismatch/max_log_ratio"].value == 0.0


def test_token_truncate_by_hand_with_its_metrics():
    old = torch.log(torch.tensor([[0.9, 0.3]]))
    engine = torch.log(torch.tensor([[0.3, 0.3]]))  # w = 3, 1
    logps = old.clone().requires_grad_(True)  # r = 1
    cfg = LossConfig(aggregation="token_mean", mismatch_correction="token_truncate", mismatch_cap=2.0)
    loss, info = policy_loss(logps, old, torch.tensor([1.0]), torch.ones(1, 2), cfg, engine_logps=engine)
    # loss = -(min(3, 2) * 1 + 1 * 1) / 2
    assert math.isclose(loss.item(), -1.5, abs_tol=1e-6)
    assert torch.allclose(_grad(loss, logps), torch.tensor([[-1.0, -0.5]]), atol=1e-6, rtol=0)
    assert math.isclose(info["mismatch/kl"].value, (3 - math.log(3) - 1) / 2, abs_tol=1e-6)
    assert math.isclose(info["mismatch/max_log_ratio"].value, math.log(3), abs_tol=1e-6)
    assert info["mismatch/clipped_share"].value == 0.5


def test_a_masked_sequence_contributes_nothing():
    g = torch.Generator().manual_seed(2)
    old = -2 * torch.rand(3, 4, generator=g)
    logps = (old + 0.2 * torch.randn(3, 4, generator=g)).requires_grad_(True)
    adv, mask = torch.tensor([1.0, -0.5, 2.0]), torch.ones(3, 4)
    engine = old.clone()
    engine[1] -= 0.5  # sequence weight of row 1: e^(4 * 0.5) = e^2 > 2, masked; rows 0 and 2: 1
    cfg = LossConfig(mismatch_correction="sequence_mask", mismatch_cap=2.0)
    loss, info = policy_loss(logps, old, adv, mask, cfg, engine_logps=engine)
    without, _ = policy_loss(logps, old, torch.tensor([1.0, 0.0, 2.0]), mask, LossConfig())
    grad = _grad(loss, logps)
    assert abs(loss.item() - without.item()) <= 1e-7 and torch.equal(grad[1], torch.zeros(4))
    assert torch.allclose(grad, _grad(without, logps), atol=1e-7, rtol=0)
    assert math.isclose(info["mismatch/clipped_share"].value, 1 / 3, abs_tol=1e-7)


def test_the_correction_needs_engine_logps():
    with pytest.raises(ValueError, match="engine_logps"):
        policy_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1), torch.ones(1, 2),
                    LossConfig(mismatch_correction="token_truncate"))


def test_max_pools_by_plus():
    mask = torch.tensor([[1.0, 0.0]])
    assert Max.of(torch.tensor([[1.0, 9.0]]), mask).value == 1.0 and Max.of(torch.ones(1, 2), mask * 0).value is None
    assert (Max(1.0) + Max(None) + Max(3.0)).value == 3.0


@pytest.mark.parametrize("kw, match", [
    (dict(surrogate="ppo"), "surrogate='ppo' is invalid; allowed: 'clip' \\| 'cispo' \\| 'gmpo'"),
    (dict(surrogate=Clip), "surrogate=<class .*Clip'> is invalid; allowed: 'clip'"),
    (dict(surrogate="cispo", ratio_level="sequence"), "ratio_level='sequence' is invalid; allowed: 'token' with "
     "surrogate='cispo'"),
    (dict(surrogate="gmpo", ratio_level="sequence_token"), "ratio_level='sequence_token' is invalid; allowed: 'token'"),
    (dict(mismatch_correction="tis"), "mismatch_correction='tis' is invalid; allowed: 'none' \\| 'token_truncate'"),
    (dict(mismatch_cap=0.0), "mismatch_cap=0.0 is invalid; allowed: > 0"),
    (dict(mismatch_cap=float("nan")), "mismatch_cap=nan is invalid; allowed: a finite number > 0"),
    (dict(mismatch_cap=math.inf), "mismatch_cap=inf is invalid; allowed: a finite number > 0"),
])
def test_bad_values_raise_naming_the_allowed(kw, match):
    with pytest.raises(ValueError, match=match):
        LossConfig(**kw)


def test_each_surrogate_checks_its_own_parameters():
    """A ratio clip range, an IS-weight cap and a log-space range are different fields, each checked for what it is."""
    with pytest.raises(ValueError, match="eps_low=1.0 is invalid; allowed: 0 <= eps_low < 1"):
        Clip(eps_low=1.0)  # 1 - eps_low must stay positive
    assert Gmpo(log_clip_low=1.5).log_clip_low == 1.5  # a log-space bound: e^-1.5 > 0
    assert Cispo(floor=0.0).floor == 0.0  # no lower bound on the IS weight
    with pytest.raises(ValueError, match="cap=0.9 is invalid; allowed: >= 1"):
        Cispo(cap=0.9)
    with pytest.raises(ValueError, match="unknown LossConfig field.*'cap'.*allowed: .*eps_high"):
        LossConfig().replace(cap=4.0)  # the clip has no cap
    assert LossConfig().replace(surrogate="cispo", cap=4.0).surrogate == Cispo(cap=4.0)
    assert presets.get("dapo").replace(loss_surrogate="cispo").loss.surrogate == Cispo()  # a name: its defaults


def test_a_config_recorded_with_eps_low_eps_high_reads_back_with_its_identity():
    """Runs recorded before surrogates were objects held every bound as LossConfig.eps_low / eps_high: read back,
    the same objective, and the same identity (the run keeps its folder name)."""
    old = {"ratio_level": "token", "eps_low": 1.0, "eps_high": 4.0, "aggregation": "token_mean", "max_len": None,
           "beta": 0.0, "surrogate": "cispo", "mismatch_correction": "none", "mismatch_cap": 2.0}
    cispo = presets.get("cispo")
    added = {"top_entropy_quantile": 1.0, "off_policy_mask_threshold": None}  # fields added since, at their defaults
    assert LossConfig.from_dict(old) == cispo.loss and cispo.loss.identity() == {**old, **added}
    assert LossConfig.from_dict({**old, "surrogate": "gmpo", "eps_low": 0.4, "eps_high": 0.4,
                                 "aggregation": "seq_mean_token_mean"}) == presets.get("gmpo").loss
    assert LossConfig.from_dict({"eps_high": 0.28}) == LossConfig(surrogate=Clip(eps_high=0.28))  # older: no surrogate
    recorded = {**cispo.to_dict(), "loss": old}
    assert TrainConfig.same_run(recorded, cispo) == [] and TrainConfig.from_dict(recorded) == cispo
    assert TrainConfig.same_run(recorded, cispo.replace(loss_cap=4.0)) == ["loss"]
    two_sided = Cispo(cap=1.28, floor=0.8)  # the bounds typed as 1 +- eps read back as typed
    assert two_sided.identity() == {"eps_low": 0.2, "eps_high": 0.28}
    assert Cispo.from_identity(two_sided.identity()) == two_sided
    assert LossConfig.from_dict(cispo.loss.to_dict()) == cispo.loss  # the stored form names the surrogate


def test_relations_and_defaults_keep_the_identity():
    with pytest.raises(ValueError, match="old_logps='engine'"):
        TrainConfig(old_logps="engine", loss=LossConfig(mismatch_correction="token_truncate"))
    with pytest.raises(ValueError, match="advantage_estimator='gae'"):
        TrainConfig(advantage_estimator="gae", loss=LossConfig(surrogate="gmpo"))
    base = TrainConfig()
    assert base.identity() == {} and base.replace(loss_surrogate="clip").fingerprint() == base.fingerprint()
    assert base.replace(loss_mismatch_correction="token_truncate").identity() == {
        "loss": {"mismatch_correction": "token_truncate"}}
