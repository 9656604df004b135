"""Estimators of the KL divergence to the reference policy, per token (DeepSeekMath Eq. 4; Schulman's k1 / k3)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def k3_kl(logps: "torch.Tensor", ref_logps: "torch.Tensor") -> "torch.Tensor":
    """Unbiased, non-negative KL estimator D_KL[pi || pi_ref], DeepSeekMath Eq. 4 (Schulman's k3). (B, T)."""
    log_q_over_p = ref_logps - logps
    # k3 = pi_ref / pi - log(pi_ref / pi) - 1
    return log_q_over_p.exp() - log_q_over_p - 1.0


def k1_kl(logps: "torch.Tensor", ref_logps: "torch.Tensor") -> "torch.Tensor":
    """Naive estimator: unbiased but can be negative, high variance. (B, T)."""
    # k1 = log(pi / pi_ref)
    return logps - ref_logps
