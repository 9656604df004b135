"""PPO's clipped surrogate with decoupled ranges (DAPO Clip-Higher): GRPO, DAPO, GSPO, GFPO, Dr. GRPO, PPO, VAPO.

  f(r, A) = min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)        DAPO Eq. 8 (PPO Eq. 7 with eps_low = eps_high)
at any ratio level: GSPO clips its sequence ratio s_i (GSPO Eq. 5). A token whose ratio has left the range on the
side its advantage pushes keeps no gradient; `clip/*` count those tokens (`clip_masks`).
TRL: epsilon / epsilon_high; verl: clip_ratio_low / clip_ratio_high, loss_mode 'vanilla' (token ratio) or 'gspo'
(sequence ratio: verl's GSPO loss is the GSPO-token form, equal to GSPO with one advantage per response).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..metrics import Mean, Metric, Share
from ..validation import fail, positive
from .surrogate import Surrogate, per_token, register

if TYPE_CHECKING:
    import torch

CLIP_METRICS = {
    "clip/low": Metric("clipped low (fraction)", update=True, missing=0.0),
    "clip/high": Metric("clipped high (fraction)", update=True, missing=0.0),
    "clip/frac": Metric("clipped (fraction of tokens)", update=True, missing=0.0),
    "clip/high_pi_old": Metric("pi_old of up-clipped tokens", update=True),
}
"""what a clip reports (PPO's here, GMPO's log-space one too): shares of the masked tokens clipped below (r < lower
bound, A < 0), above (r > upper bound, A > 0), either; mean pi_old of those clipped above (DAPO Sec. 3.1: mostly
low-probability tokens)"""


def clipped_surrogate(ratio: "torch.Tensor", advantages: "torch.Tensor", eps_low: float,
                      eps_high: float) -> "torch.Tensor":
    """Per-token objective of DAPO Eq. 8, to be maximised. ratio: (B, T); advantages: (B,) or (B, T). Returns (B, T)."""
    adv = per_token(advantages)  # (B, 1) or (B, T)
    # r A
    surr1 = ratio * adv
    # clip(r, 1 - eps_low, 1 + eps_high) A
    surr2 = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * adv
    # min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)
    return surr1.minimum(surr2)


def check_clip_range(eps_low: float, eps_high: float) -> None:
    """A ratio clip range [1 - eps_low, 1 + eps_high]: both >= 0 and 1 - eps_low positive (else ValueError naming
    the field)."""
    positive("eps_low", eps_low, 0, strict=False)
    positive("eps_high", eps_high, 0, strict=False)
    if eps_low >= 1:
        fail("eps_low", eps_low, "0 <= eps_low < 1 (1 - eps_low must stay positive)")


def clip_masks(ratio: "torch.Tensor", advantages: "torch.Tensor", eps_low: float, eps_high: float) -> tuple:
    """Where the clip is active: low (r < 1 - eps_low and A < 0), high (r > 1 + eps_high and A > 0). (B, T) each."""
    adv = per_token(advantages)  # (B, 1) or (B, T)
    return (ratio < 1.0 - eps_low) & (adv < 0), (ratio > 1.0 + eps_high) & (adv > 0)


def clip_diagnostics(ratio: "torch.Tensor", old_logps: "torch.Tensor", advantages: "torch.Tensor",
                     mask: "torch.Tensor", eps_low: float, eps_high: float) -> tuple:
    """`CLIP_METRICS` of a clip at (1 - eps_low, 1 + eps_high) and the tokens it leaves without gradient. (B, T)."""
    low, high = clip_masks(ratio, advantages, eps_low, eps_high)  # (B, T) each
    p_old = old_logps.exp()  # (B, T)
    return {"clip/low": Share.of(low, mask), "clip/high": Share.of(high, mask),
            "clip/frac": Share.of(low | high, mask), "clip/high_pi_old": Mean.of(p_old, high * mask)}, low | high


@register
@dataclass(frozen=True, kw_only=True)
class Clip(Surrogate):
    """PPO's clip of the ratio at the configured level, with DAPO's decoupled range."""

    name: ClassVar[str] = "clip"
    metrics: ClassVar[dict] = CLIP_METRICS

    eps_low: float = 0.2
    """epsilon_low of DAPO Eq. 8: the ratio is clipped below at 1 - eps_low (PPO: 0.2)"""
    eps_high: float = 0.2
    """epsilon_high: the ratio is clipped above at 1 + eps_high (DAPO Clip-Higher: 0.28)"""

    def check(self) -> None:
        check_clip_range(self.eps_low, self.eps_high)

    def terms(self, logps, old_logps, ratio, advantages, mask):
        return clipped_surrogate(ratio, advantages, self.eps_low, self.eps_high)

    def diagnostics(self, ratio, old_logps, advantages, mask) -> tuple:
        return clip_diagnostics(ratio, old_logps, advantages, mask, self.eps_low, self.eps_high)

    def trl(self, loss) -> dict:
        return {"epsilon": self.eps_low, "epsilon_high": self.eps_high}

    def trl_missing(self, loss) -> list:
        return []

    def verl(self, loss) -> dict:
        return {"clip_ratio_low": self.eps_low, "clip_ratio_high": self.eps_high,
                "policy_loss.loss_mode": "vanilla" if loss.ratio_level == "token" else "gspo"}

    def verl_missing(self, loss) -> list:
        return []

    def clipping(self, loss) -> str:
        unit = "response" if loss.ratio_level == "sequence" else "token"
        return f"PPO clip of the {unit} ratio, [{1 - self.eps_low:g}, {1 + self.eps_high:g}]"
