"""GMPO (Zhao et al. 2025, Geometric-Mean Policy Optimization): the geometric mean of token ratios, each token's
ratio clipped in log space before the mean (GMPO Sec. 3; range (e^-0.4, e^0.4), Sec. 4).

  f_i = exp((1/|o_i|) sum_t clip_log(log r_t)) A_i      on every token of response i (GMPO Sec. 3)
so the sequence-mean aggregation gives GMPO's mean over responses. The geometric mean exp(mean_t log r_t) is GSPO's
sequence ratio (GSPO Eq. 7); GMPO differs in where the clip sits: per token, on log r_t, one-sided by the sign of
the advantage (PPO's min written in log space), so it needs one advantage per response. Its bounds are log-space:
`log_clip_low`, `log_clip_high`. `clip/*` count the token ratios outside (e^-log_clip_low, e^log_clip_high) on the
side the advantage pushes, the tokens that leave the mean without gradient.
TRL: trl.experimental.gmpo.GMPOTrainer (epsilon / epsilon_high in log space); verl: loss_mode 'geo_mean'
(clip_ratio_low / clip_ratio_high in log space); both mean over responses.
Shapes: B responses, T completion positions; `mask` is 1 on real completion tokens.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..validation import fail, positive
from .clip import CLIP_METRICS, clip_diagnostics
from .surrogate import Surrogate, register

if TYPE_CHECKING:
    import torch


def log_space_clip(log_ratio: "torch.Tensor", advantages: "torch.Tensor", eps_low: float,
                   eps_high: float) -> "torch.Tensor":
    """sgn(A) min(sgn(A) log r_t, sgn(A) clip(log r_t, -eps_low, eps_high)) per token. (B, T); advantages (B,)."""
    sgn = advantages.sign().unsqueeze(1)  # (B, 1)
    clamped = log_ratio.clamp(-eps_low, eps_high)  # (B, T)
    # A > 0: min(log r, clip(log r)); A < 0: max(log r, clip(log r))
    return sgn * (sgn * log_ratio).minimum(sgn * clamped)


def geometric_ratio(logps: "torch.Tensor", old_logps: "torch.Tensor", advantages: "torch.Tensor",
                    mask: "torch.Tensor", eps_low: float, eps_high: float) -> "torch.Tensor":
    """GMPO's sequence ratio exp((1/|o_i|) sum_t clipped log r_t). Returns (B,)."""
    clipped = log_space_clip(logps - old_logps, advantages, eps_low, eps_high) * mask  # (B, T)
    return (clipped.sum(dim=1) / mask.sum(dim=1).clamp(min=1)).exp()


def ratio_space_range(eps_low: float, eps_high: float) -> tuple:
    """GMPO's log-space range (e^-eps_low, e^eps_high) as PPO-style (eps_low', eps_high') in ratio space."""
    return 1.0 - math.exp(-eps_low), math.exp(eps_high) - 1.0


@register
@dataclass(frozen=True, kw_only=True)
class Gmpo(Surrogate):
    """GMPO: the geometric mean of log-space-clipped token ratios times A, one term per response."""

    name: ClassVar[str] = "gmpo"
    metrics: ClassVar[dict] = CLIP_METRICS
    ratio_levels: ClassVar[tuple] = ("token",)
    granularity: ClassVar[str] = "sequence: geometric mean of token ratios"

    log_clip_low: float = 0.4
    """log r_t is clipped below at -log_clip_low (GMPO Sec. 4: 0.4, the ratio range (e^-0.4, e^0.4))"""
    log_clip_high: float = 0.4
    """log r_t is clipped above at log_clip_high (GMPO Sec. 4: 0.4)"""

    def check(self) -> None:
        positive("log_clip_low", self.log_clip_low, 0, strict=False)
        positive("log_clip_high", self.log_clip_high, 0, strict=False)

    def check_train(self, cfg) -> None:
        if cfg.advantage_estimator == "gae":
            fail("loss.surrogate", self.name, "a surrogate other than 'gmpo' with advantage_estimator='gae' (GMPO's "
                 "clip side follows one advantage per response)")

    def terms(self, logps, old_logps, ratio, advantages, mask):
        seq = geometric_ratio(logps, old_logps, advantages, mask, self.log_clip_low, self.log_clip_high)  # (B,)
        # f_i = s_i A_i on every token of response i
        return (seq * advantages).unsqueeze(1).expand_as(logps)

    def diagnostics(self, ratio, old_logps, advantages, mask) -> tuple:
        return clip_diagnostics(ratio, old_logps, advantages, mask,
                                *ratio_space_range(self.log_clip_low, self.log_clip_high))

    def trl(self, loss) -> dict:
        return {"epsilon": self.log_clip_low, "epsilon_high": self.log_clip_high}  # GMPOConfig: log space

    def trl_missing(self, loss) -> list:
        out = []
        if loss.aggregation != "seq_mean_token_mean":
            out.append(f"surrogate='gmpo' with aggregation={loss.aggregation!r} (TRL's GMPOTrainer: mean over "
                       "responses)")
        if loss.mismatch_correction != "none":
            out.append("mismatch_correction with surrogate='gmpo' (TRL's GMPOTrainer does not apply the IS weight)")
        return out

    def trl_classes(self) -> tuple:
        from trl.experimental.gmpo import GMPOConfig, GMPOTrainer
        return GMPOConfig, GMPOTrainer

    def verl(self, loss) -> dict:
        return {"policy_loss.loss_mode": "geo_mean", "clip_ratio_low": self.log_clip_low,
                "clip_ratio_high": self.log_clip_high}

    def verl_missing(self, loss) -> list:
        out = []
        if loss.aggregation != "seq_mean_token_mean":
            out.append(f"surrogate='gmpo' with aggregation={loss.aggregation!r} (verl's geo_mean: mean over "
                       "responses)")
        if loss.mismatch_correction.startswith("token"):
            out.append("token-level mismatch_correction with surrogate='gmpo' (verl's geo_mean takes the geometric "
                       "mean of the token weights)")
        return out

    def clipping(self, loss) -> str:
        return f"token log ratios clipped to [-{self.log_clip_low:g}, {self.log_clip_high:g}], then mean"

    def identity(self) -> dict:
        # recorded under LossConfig's former eps_low / eps_high
        return {"eps_low": self.log_clip_low, "eps_high": self.log_clip_high}

    @classmethod
    def from_identity(cls, fields: dict) -> "Gmpo":
        return cls(log_clip_low=fields["eps_low"], log_clip_high=fields["eps_high"])
