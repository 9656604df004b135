"""GMPO (Zhao et al. 2025, Geometric-Mean Policy Optimization): the geometric mean of token ratios, each token's
ratio clipped in log space before the mean (GMPO Sec. 3; range (e^-0.4, e^0.4), Sec. 4).

The geometric mean exp(mean_t log r_t) is GSPO's sequence ratio (GSPO Eq. 7); GMPO differs in where the clip
sits: per token, on log r_t, one-sided by the sign of the advantage (PPO's min written in log space).
Shapes: B responses, T completion positions; `mask` is 1 on real completion tokens.
"""
from __future__ import annotations

import math

import torch


def log_space_clip(log_ratio: torch.Tensor, advantages: torch.Tensor, eps_low: float, eps_high: float) -> torch.Tensor:
    """sgn(A) min(sgn(A) log r_t, sgn(A) clip(log r_t, -eps_low, eps_high)) per token. (B, T)."""
    sgn = torch.sign(advantages).unsqueeze(1)  # (B, 1)
    clamped = torch.clamp(log_ratio, -eps_low, eps_high)  # (B, T)
    # A > 0: min(log r, clip(log r)); A < 0: max(log r, clip(log r))
    return sgn * torch.minimum(sgn * log_ratio, sgn * clamped)


def geometric_ratio(logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                    eps_low: float, eps_high: float) -> torch.Tensor:
    """GMPO's sequence ratio exp((1/|o_i|) sum_t clipped log r_t). Returns (B,)."""
    clipped = log_space_clip(logps - old_logps, advantages, eps_low, eps_high) * mask  # (B, T)
    return torch.exp(clipped.sum(dim=1) / mask.sum(dim=1).clamp(min=1))


def ratio_space_range(eps_low: float, eps_high: float) -> tuple:
    """GMPO's log-space range (e^-eps_low, e^eps_high) as PPO-style (eps_low', eps_high') in ratio space."""
    return 1.0 - math.exp(-eps_low), math.exp(eps_high) - 1.0
