"""LUSPO (arXiv 2602.05261, Length-Unbiased Sequence Policy Optimization): GSPO's clipped sequence term scaled by
the response's length, against GSPO's length bias (its "response length collapse").

  f_i = |o_i| min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i)       on every token of response i
with s_i GSPO's sequence ratio (GSPO Eq. 7). GSPO's loss means the one term per response over the responses, so
every response weighs the same whatever its length; LUSPO weighs each by its length |o_i|. Under the sequence-mean
aggregation ('seq_mean_token_mean', (1/B) sum_i (1/|o_i|) sum_t) the factor |o_i| makes the loss
(1/B) sum_i |o_i| f_i^GSPO: the sum over each response's tokens, mean over the responses, which is TRL 1.16's
loss_type='luspo'. The clip is GSPO's, so `clip/*` count the responses' tokens the clip leaves without gradient.
TRL: loss_type='luspo', importance_sampling_level='sequence', epsilon / epsilon_high. verl 0.9.1 has no LUSPO loss.
Shapes: B responses, T completion positions; `mask` is 1 on real completion tokens.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .clip import CLIP_METRICS, check_clip_range, clip_diagnostics, clipped_surrogate
from .surrogate import Surrogate, register


@register
@dataclass(frozen=True, kw_only=True)
class Luspo(Surrogate):
    """LUSPO: GSPO's clipped sequence term times the response length."""

    name: ClassVar[str] = "luspo"
    metrics: ClassVar[dict] = CLIP_METRICS
    ratio_levels: ClassVar[tuple] = ("sequence", "sequence_token")
    granularity: ClassVar[str] = "sequence (length-normalised), term x |o|"

    eps_low: float = 3e-4
    """the sequence ratio is clipped below at 1 - eps_low (GSPO Sec. 5.1: 3e-4, the range LUSPO keeps from GSPO)"""
    eps_high: float = 4e-4
    """the sequence ratio is clipped above at 1 + eps_high (GSPO Sec. 5.1: 4e-4)"""

    def check(self) -> None:
        check_clip_range(self.eps_low, self.eps_high)

    def terms(self, logps, old_logps, ratio, advantages, mask):
        lengths = mask.sum(dim=1, keepdim=True)  # (B, 1) |o_i|
        # f_i = |o_i| min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i)
        return lengths * clipped_surrogate(ratio, advantages, self.eps_low, self.eps_high)

    def diagnostics(self, ratio, old_logps, advantages, mask) -> tuple:
        return clip_diagnostics(ratio, old_logps, advantages, mask, self.eps_low, self.eps_high)

    def trl(self, loss) -> dict:
        return {"loss_type": "luspo", "epsilon": self.eps_low, "epsilon_high": self.eps_high}

    def trl_missing(self, loss) -> list:
        out = []
        if loss.aggregation != "seq_mean_token_mean":
            out.append(f"surrogate='luspo' with aggregation={loss.aggregation!r} (TRL's luspo: the sum over each "
                       "response's tokens, mean over the responses)")
        if loss.beta > 0:
            out.append("beta > 0 with surrogate='luspo' (TRL's luspo sums the KL term over each response's tokens; "
                       "ours means it)")
        return out

    def clipping(self, loss) -> str:
        return f"|o| x PPO clip of s, [{1 - self.eps_low:g}, {1 + self.eps_high:g}]"
