"""SAPO (Gao et al. 2025, Soft Adaptive Policy Optimization, arXiv 2511.20347): a smooth, temperature-controlled
gate in place of PPO's hard clip, at the token or the sequence ratio.

  f(r, A) = (4 / tau) sigmoid(tau (r - 1)) A,    tau = tau_pos if A > 0 else tau_neg        (SAPO Sec. 3)
Its derivative in r is 4 sigma (1 - sigma), sigma = sigmoid(tau (r - 1)): 1 at r = 1 (the unclipped policy
gradient there) and decaying smoothly as r leaves 1, so a token far off-policy keeps a small gradient instead of none.
That factor is the gate's weight: `gate/mean` is its mean over the tokens, `gate/low_frac` the share of tokens whose
weight falls below 0.1 (SAPO's softly "clipped" tokens). No token's gradient is zeroed, save where the weight
underflows to 0 in floating point (tau (r - 1) beyond ~88 in float32): `gate/zeroed_frac` counts those, C5's check. tau_neg > tau_pos damps
negative-advantage updates faster (SAPO: tau_pos = 1.0, tau_neg = 1.05, TRL's and verl's defaults).
TRL 1.16: loss_type='sapo' with sapo_temperature_pos / _neg, token or sequence ratio, mean over responses; verl
0.9.1: loss_mode 'sapo' with actor.tau_pos / tau_neg, token ratio, mean over responses. Both read A > 0 for tau_pos.
Shapes: B responses, T completion positions; `mask` is 1 on real completion tokens.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..metrics import Mean, Metric, Share
from ..validation import positive
from .surrogate import Surrogate, per_token, register

if TYPE_CHECKING:
    import torch

LOW_WEIGHT = 0.1
"""a gate weight below this counts in `gate/low_frac`"""


def temperatures(advantages: "torch.Tensor", tau_pos: float, tau_neg: float) -> "torch.Tensor":
    """tau per token: tau_pos where A > 0, tau_neg elsewhere. (B, 1) or (B, T)."""
    adv = per_token(advantages)  # (B, 1) or (B, T)
    positive_adv = (adv > 0).to(adv.dtype)  # in the advantages' dtype (a bool times a float is float32)
    return positive_adv * tau_pos + (1 - positive_adv) * tau_neg


def gate_weight(ratio: "torch.Tensor", tau: "torch.Tensor") -> "torch.Tensor":
    """d gate / d r = 4 sigma (1 - sigma), sigma = sigmoid(tau (r - 1)), in (0, 1]. (B, T)."""
    sigma = (tau * (ratio - 1.0)).sigmoid()  # (B, T)
    # w = 4 sigma (1 - sigma)
    return 4.0 * sigma * (1.0 - sigma)


@register
@dataclass(frozen=True, kw_only=True)
class Sapo(Surrogate):
    """SAPO's soft gate of the ratio at the configured level (token: SAPO; sequence: TRL's sequence-level form)."""

    name: ClassVar[str] = "sapo"
    metrics: ClassVar[dict] = {
        "gate/mean": Metric("SAPO gate weight 4 sigma (1 - sigma), mean over tokens", update=True),
        "gate/low_frac": Metric("SAPO gate weight < 0.1 (fraction of tokens)", update=True, missing=0.0),
        "gate/zeroed_frac": Metric("SAPO gate weight 0 in floating point, gradient zeroed (fraction of tokens)",
                                   update=True, missing=0.0)}

    tau_pos: float = 1.0
    """tau_pos of SAPO Sec. 3, the gate's temperature where A > 0 (SAPO: 1.0)"""
    tau_neg: float = 1.05
    """tau_neg, the gate's temperature where A <= 0 (SAPO: 1.05, above tau_pos: negative updates damped faster)"""

    def check(self) -> None:
        positive("tau_pos", self.tau_pos, 0)
        positive("tau_neg", self.tau_neg, 0)

    def terms(self, logps, old_logps, ratio, advantages, mask):
        tau = temperatures(advantages, self.tau_pos, self.tau_neg)  # (B, 1) or (B, T)
        # f(r, A) = (4 / tau) sigmoid(tau (r - 1)) A
        return (tau * (ratio - 1.0)).sigmoid() * (4.0 / tau) * per_token(advantages)

    def diagnostics(self, ratio, old_logps, advantages, mask) -> tuple:
        weight = gate_weight(ratio, temperatures(advantages, self.tau_pos, self.tau_neg))  # (B, T)
        return {"gate/mean": Mean.of(weight, mask), "gate/low_frac": Share.of(weight < LOW_WEIGHT, mask),
                "gate/zeroed_frac": Share.of(weight == 0, mask)}, None

    def trl(self, loss) -> dict:
        return {"loss_type": "sapo", "sapo_temperature_pos": self.tau_pos, "sapo_temperature_neg": self.tau_neg}

    def trl_missing(self, loss) -> list:
        if loss.aggregation != "seq_mean_token_mean":
            return [f"surrogate='sapo' with aggregation={loss.aggregation!r} (TRL's sapo: mean over responses)"]
        return []

    def verl(self, loss) -> dict:
        return {"policy_loss.loss_mode": "sapo", "tau_pos": self.tau_pos, "tau_neg": self.tau_neg}

    def verl_missing(self, loss) -> list:
        out = []
        if loss.ratio_level != "token":
            out.append(f"surrogate='sapo' with ratio_level={loss.ratio_level!r} (verl's sapo gates the token ratio)")
        if loss.aggregation != "seq_mean_token_mean":
            out.append(f"surrogate='sapo' with aggregation={loss.aggregation!r} (verl's sapo: mean over responses)")
        return out

    def clipping(self, loss) -> str:
        unit = "response" if loss.ratio_level == "sequence" else "token"
        return f"sigmoid gate of the {unit} ratio, tau {self.tau_pos:g}/{self.tau_neg:g}"  # none zeroed
