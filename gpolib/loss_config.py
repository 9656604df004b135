"""`LossConfig`: the policy objective's axes, validated on construction (re-exported by `gpolib.config`).

Ratio level x surrogate form x aggregation, plus the KL weight and the rollout/trainer mismatch correction.
Every field added after the first runs were recorded has a default that keeps the old objective, and a run's
identity holds only the fields that differ from their defaults (`TrainConfig.identity`), so adding one does
not rename recorded runs. A bad value raises `ValueError` naming the field and the allowed values
(`gpolib.validation.check_loss`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .validation import check_loss


@dataclass(frozen=True, kw_only=True)
class LossConfig:
    """The policy objective: ratio level x surrogate x aggregation (+ optional KL, mismatch correction)."""

    ratio_level: str = "token"
    """'token' (GRPO/DAPO: r_t = pi/pi_old per token), 'sequence' (GSPO Eq. 7:
    s_i = exp(mean_t log r_t), broadcast to tokens), 'sequence_token' (GSPO-token Eq. 13-14)."""
    eps_low: float = 0.2
    """lower clip range: the ratio is clipped below at 1 - eps_low (epsilon_low in DAPO Eq. 8); under
    surrogate='cispo' the IS weight's (eps_low >= 1: no lower bound, MiniMax-M1 Sec. 3.1), under 'gmpo' the
    log ratio's (log r >= -eps_low, GMPO: 0.4)."""
    eps_high: float = 0.2
    """upper clip range: the ratio is clipped above at 1 + eps_high (DAPO Clip-Higher: 0.28); under 'cispo'
    the IS weight's, under 'gmpo' the log ratio's (log r <= eps_high, GMPO: 0.4)."""
    aggregation: str = "seq_mean_token_mean"
    """'seq_mean_token_mean' (GRPO Eq. 3, sample-level), 'token_mean' (DAPO Eq. 8, token-level),
    'seq_mean_token_sum_norm' (Dr. GRPO: sum of token terms / (B * max_len))."""
    max_len: Optional[int] = None
    """constant normaliser of Dr. GRPO (the generation budget); required by 'seq_mean_token_sum_norm'."""
    beta: float = 0.0
    """weight of the k3 KL penalty to the reference policy (DeepSeekMath Eq. 3-4); 0 disables it."""
    surrogate: str = "clip"
    """per-token objective: 'clip' (PPO's clipped surrogate min(r A, clip(r) A), DAPO Eq. 8), 'cispo'
    (MiniMax-M1 Sec. 3.1: sg(clip(r)) A log pi, every token keeps its gradient; gpolib.is_weights), 'gmpo'
    (GMPO: the geometric mean of log-space-clipped token ratios times A, one term per response;
    gpolib.geometric). 'cispo' and 'gmpo' need ratio_level='token'."""
    mismatch_correction: str = "none"
    """rollout-engine/trainer mismatch correction on w = pi_old / pi_engine (Yao et al. 2025; TRL 1.16's
    `vllm_importance_sampling_mode`): 'none', 'token_truncate' (TIS), 'token_mask' (MIS), 'sequence_truncate',
    'sequence_mask'. The per-token loss term is multiplied by the detached weight, as TRL does."""
    mismatch_cap: float = 2.0
    """C, the cap of the mismatch weight: truncated to C or masked above C (FlashRL / Yao et al. 2025: C = 2);
    finite (a config is stored as strict JSON; a huge C stands for no cap)."""

    def __post_init__(self) -> None:
        check_loss(self)
