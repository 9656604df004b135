"""CISPO (MiniMax-M1 Sec. 3.1): the importance-sampling weight bounded and detached, so that every token keeps its
gradient.

  f(r, A) = sg(clip(r, floor, cap)) A log pi_theta      MiniMax-M1 Eq. 4-5: floor = 1 - eps_low^IS, cap = 1 + eps_high^IS
A token whose ratio PPO's clip would silence keeps the gradient clip(r) A d log pi; the weight is bounded instead
of the update. The bounds are absolute: `cap` is the largest weight (ScaleRL's eps_max = 5, Khatri et al. 2025, the
value TRL 1.16 recommends), `floor` the smallest (0: none, as the paper sets it).
The two exports write them in each target's own convention: TRL's epsilon_high is the cap itself (it clamps
r <= epsilon_high and has no floor); verl clamps to [1 - clip_ratio_low, 1 + clip_ratio_high].
`capped/frac`: tokens whose weight a bound holds on the side the advantage pushes (r > cap with A > 0, r < floor
with A < 0; TRL's cispo_clip_ratio: r > epsilon_high with A > 0). No token loses its gradient.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..metrics import Metric, Share
from ..validation import fail, positive
from .surrogate import Surrogate, decimal, per_token, register


@register
@dataclass(frozen=True, kw_only=True)
class Cispo(Surrogate):
    """MiniMax-M1's clipped IS-weight policy optimisation, per token."""

    name: ClassVar[str] = "cispo"
    metrics: ClassVar[dict] = {
        "capped/frac": Metric("IS weight held at its cap or floor, gradient kept (fraction of tokens)", update=True,
                              missing=0.0)}
    ratio_levels: ClassVar[tuple] = ("token",)

    cap: float = 5.0
    """the largest importance-sampling weight, 1 + eps_high^IS of MiniMax-M1 Eq. 5 (the paper tunes it without
    giving its value; 5 is ScaleRL's eps_max, TRL's epsilon_high for loss_type='cispo')"""
    floor: float = 0.0
    """the smallest importance-sampling weight, 1 - eps_low^IS; 0: no lower bound (MiniMax-M1 Sec. 3.1: "we did not
    impose a lower bound on the IS weight")"""

    def check(self) -> None:
        positive("cap", self.cap, 1, strict=False)  # the range holds r = 1
        positive("floor", self.floor, 0, strict=False)
        if self.floor > 1:
            fail("floor", self.floor, "0 <= floor <= 1 (the range holds r = 1)")

    def terms(self, logps, old_logps, ratio, advantages, mask):
        # r_hat = sg(clip(r, floor, cap))
        weight = ratio.detach().clamp(self.floor, self.cap)  # (B, T)
        # sg(r_hat) A log pi_theta
        return weight * per_token(advantages) * logps

    def diagnostics(self, ratio, old_logps, advantages, mask) -> tuple:
        adv = per_token(advantages)  # (B, 1) or (B, T)
        # a bound holds the weight where it limits the update: r > cap with A > 0, r < floor with A < 0
        held = ((ratio > self.cap) & (adv > 0)) | ((ratio < self.floor) & (adv < 0))  # (B, T)
        return {"capped/frac": Share.of(held, mask)}, None

    def trl(self, loss) -> dict:
        return {"loss_type": "cispo", "epsilon_high": self.cap}  # TRL's cispo reads epsilon_high only

    def trl_missing(self, loss) -> list:
        out = []
        if self.floor > 0:
            out.append(f"surrogate='cispo' with floor={self.floor} (TRL's cispo has no lower bound on the IS weight)")
        if loss.aggregation != "token_mean":
            out.append(f"surrogate='cispo' with aggregation={loss.aggregation!r} (TRL's cispo is token-mean)")
        return out

    def verl(self, loss) -> dict:
        return {"policy_loss.loss_mode": "cispo", "clip_ratio_low": decimal(1 - self.floor),
                "clip_ratio_high": decimal(self.cap - 1)}

    def verl_missing(self, loss) -> list:
        return []

    def clipping(self, loss) -> str:
        low = f" and {self.floor:g}" if self.floor > 0 else ""
        return f"IS weight at {self.cap:g}{low} (stop-gradient); no gradient zeroed"

    def identity(self) -> dict:
        # recorded as the ratio-clip range around 1 that LossConfig held before: eps_low = 1 - floor, eps_high = cap - 1
        return {"eps_low": decimal(1 - self.floor), "eps_high": decimal(self.cap - 1)}

    @classmethod
    def from_identity(cls, fields: dict) -> "Cispo":
        # eps_low >= 1 meant no lower bound
        return cls(cap=decimal(1 + fields["eps_high"]), floor=decimal(max(0.0, 1 - fields["eps_low"])))
