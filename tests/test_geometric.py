"""GMPO's geometric ratio by hand: one token = GRPO's clipped surrogate, log-space clip per token."""
import math

import torch

from gpolib.objectives.gmpo import geometric_ratio
from gpolib.objectives import clipped_surrogate


def test_one_token_gmpo_equals_grpo_with_the_log_space_range():
    old = -torch.rand(6, 1)
    logps = (old + torch.tensor([[0.6], [-0.6], [0.1], [0.6], [-0.6], [0.0]])).requires_grad_(True)
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0, 2.0])
    mask = torch.ones(6, 1)
    gmpo = geometric_ratio(logps, old, adv, mask, 0.4, 0.4) * adv  # (B,)
    grpo = clipped_surrogate(torch.exp(logps - old), adv, 1 - math.exp(-0.4), math.exp(0.4) - 1)[:, 0]
    assert torch.allclose(gmpo, grpo, atol=1e-6, rtol=0)
    (g1,) = torch.autograd.grad(gmpo.sum(), logps, retain_graph=True)
    (g2,) = torch.autograd.grad(grpo.sum(), logps)
    assert torch.allclose(g1, g2, atol=1e-6, rtol=0) and g1[0, 0] == 0.0 and g1[3, 0] != 0.0


def test_clipped_tokens_leave_the_mean_without_gradient():
    old = torch.zeros(1, 3)
    logps = torch.tensor([[1.0, 0.2, -0.1]], requires_grad=True)  # first token above e^0.4
    s = geometric_ratio(logps, old, torch.tensor([1.0]), torch.ones(1, 3), 0.4, 0.4)
    assert math.isclose(float(s.detach()), math.exp((0.4 + 0.2 - 0.1) / 3), rel_tol=1e-6)
    (g,) = torch.autograd.grad(s.sum(), logps)
    assert g[0, 0] == 0.0 and math.isclose(float(g[0, 1]), float(s.detach()) / 3, rel_tol=1e-6)
