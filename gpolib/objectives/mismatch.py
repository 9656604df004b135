"""The rollout-engine/trainer mismatch correction: a stop-gradient weight on w = pi_trainer_old / pi_engine.

TIS / MIS (Yao et al. 2025): at token or sequence level, truncated at a cap C or masked above it; the modes are
TRL 1.16's `vllm_importance_sampling_mode`. The weight multiplies each per-token term of the surrogate, before the
KL term (as TRL does); given engine log-probs without a correction, the mismatch is only measured.
Shapes: B responses, T completion positions; `mask` is 1 on real completion tokens.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..metrics import Max, Mean
from ..validation import MISMATCH_CORRECTIONS, choice

if TYPE_CHECKING:
    import torch


def mismatch_weights(trainer_logps: "torch.Tensor", engine_logps: "torch.Tensor", mask: "torch.Tensor", mode: str,
                     cap: float) -> "torch.Tensor":
    """Stop-gradient weights on the engine/trainer ratio, (B, T) for token modes, (B, 1) for sequence modes.

    log w = (log pi_trainer_old - log pi_engine) per token (summed over the response for sequence modes);
    '*_truncate': w = min(w, C) (TIS); '*_mask': w = 0 where w > C (MIS).
    """
    choice("mode", mode, MISMATCH_CORRECTIONS[1:])
    # log w_t = log pi_old(o_t) - log pi_engine(o_t), 0 on padding
    log_w = ((trainer_logps - engine_logps) * mask).detach()  # (B, T)
    if mode.startswith("sequence"):
        # log w_i = sum_t log w_t
        log_w = log_w.sum(dim=1, keepdim=True)  # (B, 1)
    w = log_w.exp()
    if mode.endswith("truncate"):
        return w.clamp(max=cap)
    return w.masked_fill(w > cap, 0.0)


def mismatch_correction(trainer_logps: "torch.Tensor", engine_logps: "torch.Tensor", mask: "torch.Tensor", mode: str,
                        cap: float) -> tuple:
    """The weight that multiplies each per-token loss term, (B, T) or (B, 1), and the mismatch diagnostics.

    mismatch/kl: mean over the masked tokens of k3 = w_t - log w_t - 1 with w_t = pi_old / pi_engine, the
    estimate of KL(pi_engine || pi_old) from the engine's samples (DeepSeekMath Eq. 4's estimator; TRL logs no
    KL, only min/mean/max of the weight); mismatch/max_log_ratio: max_t |log w_t|; mismatch/clipped_share:
    share of masked tokens whose weight was truncated or masked (every token of a sequence, in sequence modes).
    """
    mask = mask.to(trainer_logps.dtype)
    return mismatch_weights(trainer_logps, engine_logps, mask, mode, cap), mismatch_diagnostics(
        trainer_logps, engine_logps, mask, mode, cap)


def mismatch_diagnostics(trainer_logps: "torch.Tensor", engine_logps: "torch.Tensor", mask: "torch.Tensor", mode: str,
                         cap: float) -> dict:
    """`mismatch_correction`'s diagnostics alone (the weights of `mode` at `cap` counted, not applied)."""
    mask = mask.to(trainer_logps.dtype)
    # log w_t = log pi_old(o_t) - log pi_engine(o_t)
    log_w = ((trainer_logps - engine_logps) * mask).detach()  # (B, T)
    # k3 = w - log w - 1
    k3 = log_w.exp() - log_w - 1.0  # (B, T)
    raw = log_w.sum(dim=1, keepdim=True).exp() if mode.startswith("sequence") else log_w.exp()
    changed = (raw > cap).to(mask.dtype).expand_as(mask)  # (B, T)
    return {"mismatch/kl": Mean.of(k3, mask), "mismatch/clipped_share": Mean.of(changed, mask),
            "mismatch/max_log_ratio": Max.of(log_w.abs(), mask)}
