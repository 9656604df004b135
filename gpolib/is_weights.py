"""Stop-gradient importance-sampling weights: CISPO's clipped IS weight and the rollout-trainer mismatch correction.

Both multiply a per-token term by a weight that carries no gradient:
  - CISPO (MiniMax-M1 Sec. 3.1): sg(clip(r, 1 - eps_low, 1 + eps_high)) * A * log pi_theta, so a token outside
    the range keeps its gradient (PPO's clip zeroes it);
  - TIS / MIS on the engine/trainer ratio w = pi_trainer_old / pi_engine (Yao et al. 2025), at token or sequence
    level, truncated at a cap C or masked above it; the modes are TRL 1.16's `vllm_importance_sampling_mode`.
Shapes: B responses, T completion positions; `mask` is 1 on real completion tokens.
"""
from __future__ import annotations

import torch

MISMATCH_MODES = ("none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def cispo_surrogate(logps: torch.Tensor, ratio: torch.Tensor, advantages: torch.Tensor, eps_low: float,
                    eps_high: float) -> torch.Tensor:
    """Per-token CISPO objective (MiniMax-M1 Sec. 3.1), to be maximised. logps, ratio (B, T); advantages (B,)."""
    adv = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages  # (B, 1) or (B, T)
    # r_hat = sg(clip(r, 1 - eps_low^IS, 1 + eps_high^IS))
    weight = torch.clamp(ratio.detach(), 1.0 - eps_low, 1.0 + eps_high)  # (B, T)
    # sg(r_hat) A log pi_theta
    return weight * adv * logps


def mismatch_weights(trainer_logps: torch.Tensor, engine_logps: torch.Tensor, mask: torch.Tensor, mode: str,
                     cap: float) -> torch.Tensor:
    """Stop-gradient weights on the engine/trainer ratio, (B, T) for token modes, (B, 1) for sequence modes.

    log w = (log pi_trainer_old - log pi_engine) per token (summed over the response for sequence modes);
    '*_truncate': w = min(w, C) (TIS); '*_mask': w = 0 where w > C (MIS).
    """
    # log w_t = log pi_old(o_t) - log pi_engine(o_t), 0 on padding
    log_w = ((trainer_logps - engine_logps) * mask).detach()  # (B, T)
    if mode.startswith("sequence"):
        # log w_i = sum_t log w_t
        log_w = log_w.sum(dim=1, keepdim=True)  # (B, 1)
    w = torch.exp(log_w)
    if mode.endswith("truncate"):
        return torch.clamp(w, max=cap)
    if mode.endswith("mask"):
        return w.masked_fill(w > cap, 0.0)
    raise ValueError(f"mode={mode!r} is invalid; allowed: {' | '.join(map(repr, MISMATCH_MODES[1:]))}")
