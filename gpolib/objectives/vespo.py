"""VESPO (arXiv 2602.10693): a detached, Gamma-shaped weight of the unnormalised sequence ratio on each token's
policy gradient, in place of a clip; meant to stay stable on stale (off-policy) samples.

  w_i = prod_t r_{i,t} = exp(sum_t log r_{i,t})              the sequence ratio, not length-normalised (not GSPO's)
  phi(w) = exp(lambda + k ln w - lambda w)                    Gamma-shaped, phi(1) = 1, peak at w = k / lambda
  f_{i,t} = sg(phi(w_i)) A_i log pi_theta(o_{i,t})            (k, lambda) = (2, 3) for A >= 0 and (3, 2) for A < 0
so a response whose ratio drifts far from 1 either way has its gradient damped smoothly, more so, on the rising side,
for the negative advantages. As TRL 1.16 computes it: each log r_{i,t} is clamped to [-20, 20] and ln w to
[ln 1e-8, 20] before exp, so phi stays finite. `gamma_weight/mean`: phi's mean over the responses (TRL's
vespo/phi_seq_mean); `gamma_weight/low_frac`: the share of tokens whose phi < 0.1. No token's gradient is zeroed.
TRL: loss_type='vespo' (token-level importance_sampling_level; mean over the batch's tokens) with vespo_k_pos,
vespo_lambda_pos, vespo_k_neg, vespo_lambda_neg; its vLLM correction enters w rather than multiplying the loss, so
a mismatch correction is not exported. verl 0.9.1 has no VESPO loss.
Shapes: B responses, T completion positions; `mask` is 1 on real completion tokens.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..metrics import Mean, Metric, Share
from ..validation import positive
from .surrogate import Surrogate, per_token, register

if TYPE_CHECKING:
    import torch

LOG_R_MAX = 20.0
"""|log r_{i,t}| is clamped here before the sum (TRL 1.16)"""
LOG_W_RANGE = (math.log(1e-8), 20.0)
"""ln w is clamped to this range before exp (TRL 1.16)"""
LOW_WEIGHT = 0.1
"""a weight phi below this counts in `gamma_weight/low_frac`"""


def by_sign(advantages: "torch.Tensor", nonnegative: float, negative: float) -> "torch.Tensor":
    """`nonnegative` where A >= 0, `negative` where A < 0, in the advantages' dtype. (B, 1) or (B, T)."""
    nonneg = (per_token(advantages) >= 0).to(advantages.dtype)  # (B, 1) or (B, T)
    return nonneg * nonnegative + (1 - nonneg) * negative


def gamma_weight(logps: "torch.Tensor", old_logps: "torch.Tensor", advantages: "torch.Tensor", mask: "torch.Tensor",
                 shapes: tuple, rates: tuple) -> "torch.Tensor":
    """phi(w_i), detached; shapes / rates: (k, lambda) for (A >= 0, A < 0). (B, 1) or (B, T)."""
    log_r = (logps - old_logps).detach().clamp(-LOG_R_MAX, LOG_R_MAX)  # (B, T)
    # ln w_i = sum_t log r_{i,t}
    log_w = (log_r * mask).sum(dim=1, keepdim=True).clamp(*LOG_W_RANGE)  # (B, 1)
    k, lam = by_sign(advantages, *shapes), by_sign(advantages, *rates)  # (B, 1) or (B, T)
    # phi(w) = exp(lambda + k ln w - lambda w)
    return (lam + k * log_w - lam * log_w.exp()).exp()


@register
@dataclass(frozen=True, kw_only=True)
class Vespo(Surrogate):
    """VESPO: sg(phi(w)) A log pi, phi a Gamma-shaped function of the unnormalised sequence ratio."""

    name: ClassVar[str] = "vespo"
    metrics: ClassVar[dict] = {
        "gamma_weight/mean": Metric("VESPO weight phi(w), mean over responses", update=True),
        "gamma_weight/low_frac": Metric("VESPO weight phi(w) < 0.1 (fraction of tokens)", update=True, missing=0.0)}
    ratio_levels: ClassVar[tuple] = ("token",)
    granularity: ClassVar[str] = "sequence: product of token ratios"

    shape_pos: float = 2.0
    """k for A >= 0, the Gamma shape (VESPO: 2)"""
    rate_pos: float = 3.0
    """lambda for A >= 0, the Gamma rate (VESPO: 3)"""
    shape_neg: float = 3.0
    """k for A < 0 (VESPO: 3)"""
    rate_neg: float = 2.0
    """lambda for A < 0 (VESPO: 2)"""

    def check(self) -> None:
        for name in ("shape_pos", "shape_neg"):
            positive(name, getattr(self, name), 0, strict=False)
        for name in ("rate_pos", "rate_neg"):
            positive(name, getattr(self, name), 0)

    def weight(self, logps, old_logps, advantages, mask) -> "torch.Tensor":
        """phi(w_i) with its (k, lambda) by the advantage's sign, detached. (B, 1) or (B, T)."""
        return gamma_weight(logps, old_logps, advantages, mask, (self.shape_pos, self.shape_neg),
                            (self.rate_pos, self.rate_neg))

    def terms(self, logps, old_logps, ratio, advantages, mask):
        phi = self.weight(logps, old_logps, advantages, mask)  # (B, 1) or (B, T)
        # f_{i,t} = sg(phi(w_i)) A_i log pi_theta(o_{i,t})
        return phi * per_token(advantages) * logps

    def diagnostics(self, ratio, old_logps, advantages, mask) -> tuple:
        phi = self.weight(ratio.log() + old_logps, old_logps, advantages, mask).expand_as(mask)  # (B, T)
        responses = (mask.sum(dim=1) > 0).to(mask.dtype)  # (B,)
        return {"gamma_weight/mean": Mean.of(phi[:, 0], responses),
                "gamma_weight/low_frac": Share.of(phi < LOW_WEIGHT, mask)}, None

    def trl(self, loss) -> dict:
        return {"loss_type": "vespo", "vespo_k_pos": self.shape_pos, "vespo_lambda_pos": self.rate_pos,
                "vespo_k_neg": self.shape_neg, "vespo_lambda_neg": self.rate_neg}

    def trl_missing(self, loss) -> list:
        out = []
        if loss.aggregation != "token_mean":
            out.append(f"surrogate='vespo' with aggregation={loss.aggregation!r} (TRL's vespo: mean over the batch's "
                       "tokens)")
        if loss.mismatch_correction != "none":
            out.append("mismatch_correction with surrogate='vespo' (TRL folds the vLLM weight into w instead)")
        return out

    def clipping(self, loss) -> str:
        pos, neg = f"{self.shape_pos:g}/{self.rate_pos:g}", f"{self.shape_neg:g}/{self.rate_neg:g}"
        return f"Gamma weight of prod r, k/lambda {pos}, {neg}"
