"""CISPO's clipped IS weight and the TIS / MIS mismatch weights, by hand."""
import math

import pytest
import torch

from gpolib.objectives import Cispo, clipped_surrogate, mismatch_weights


def test_cispo_keeps_the_gradient_of_a_token_ppo_clips():
    old = torch.log(torch.tensor([[0.2, 0.5]]))
    logps = (old + torch.tensor([[math.log(2.0), 0.0]])).requires_grad_(True)  # r = 2 (above 1.28), r = 1
    ratio = torch.exp(logps - old)
    adv = torch.tensor([1.0])
    (g_ppo,) = torch.autograd.grad(clipped_surrogate(ratio, adv, 0.2, 0.28).sum(), logps)
    cispo = Cispo(cap=1.28, floor=0.8)  # the weight's bounds 1 + 0.28, 1 - 0.2
    (g_cispo,) = torch.autograd.grad(cispo.terms(logps, old, ratio, adv, torch.ones_like(ratio)).sum(), logps)
    assert g_ppo[0, 0] == 0.0 and math.isclose(float(g_ppo[0, 1]), 1.0, abs_tol=1e-6)
    # d/dlogp [sg(clip(r)) A logp] = clip(r) A: 1.28 for the clipped token, 1 for the other
    assert torch.allclose(g_cispo, torch.tensor([[1.28, 1.0]]), atol=1e-6, rtol=0)


@pytest.mark.parametrize("mode", ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"])
def test_equal_logps_and_infinite_cap_change_nothing(mode):
    lp = -torch.rand(3, 5)
    mask = torch.ones(3, 5)
    w = mismatch_weights(lp, lp, mask, mode, math.inf)
    assert torch.equal(w, torch.ones_like(w))


def test_truncate_and_mask_by_hand():
    trainer = torch.log(torch.tensor([[0.9, 0.3, 0.5]]))
    engine = torch.log(torch.tensor([[0.3, 0.3, 0.5]]))  # token ratios 3, 1, 1 (last token padding)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert torch.allclose(mismatch_weights(trainer, engine, mask, "token_truncate", 2.0), torch.tensor([[2.0, 1.0, 1.0]]))
    assert torch.allclose(mismatch_weights(trainer, engine, mask, "token_mask", 2.0), torch.tensor([[0.0, 1.0, 1.0]]))
    assert torch.allclose(mismatch_weights(trainer, engine, mask, "sequence_truncate", 2.0), torch.tensor([[2.0]]))
    assert torch.allclose(mismatch_weights(trainer, engine, mask, "sequence_mask", 4.0), torch.tensor([[3.0]]))
