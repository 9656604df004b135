"""The importance ratio entering the surrogate, at a ratio level: per token (GRPO, DAPO), per sequence (GSPO Eq. 7)
or GSPO-token (Eq. 13-14). Shapes: B responses, T completion positions; `mask` is 1 on real completion tokens."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..validation import RATIO_LEVELS, choice

if TYPE_CHECKING:
    import torch


def token_log_ratio(logps: "torch.Tensor", old_logps: "torch.Tensor") -> "torch.Tensor":
    """log r_{i,t}, GRPO Eq. 3 / DAPO Eq. 8. (B, T)."""
    # log r_{i,t} = log pi_theta(o_t) - log pi_old(o_t)
    return logps - old_logps


def sequence_log_ratio(logps: "torch.Tensor", old_logps: "torch.Tensor", mask: "torch.Tensor") -> "torch.Tensor":
    """log s_i, the GSPO sequence ratio, GSPO Eq. 7. Returns (B,)."""
    lengths = mask.sum(dim=1).clamp(min=1)  # (B,) |o_i|
    # log s_i = (1 / |o_i|) sum_t log r_{i,t}
    return (token_log_ratio(logps, old_logps) * mask).sum(dim=1) / lengths


def importance_ratio(logps: "torch.Tensor", old_logps: "torch.Tensor", mask: "torch.Tensor",
                     level: str) -> "torch.Tensor":
    """The ratio entering the surrogate, per token (B, T), at level 'token' (GRPO), 'sequence' (GSPO Eq. 7, s_i
    broadcast to every token of response i) or 'sequence_token' (GSPO-token Eq. 13-14: numerically s_i, gradient
    that of log pi_theta(o_t) scaled by s_i)."""
    choice("level", level, RATIO_LEVELS)
    if level == "token":
        # r_{i,t} = pi_theta(o_t) / pi_old(o_t)
        return token_log_ratio(logps, old_logps).exp()
    log_s = sequence_log_ratio(logps, old_logps, mask).unsqueeze(1)  # (B, 1)
    if level == "sequence":
        # s_i = exp(log s_i), the same for every token of response i
        return log_s.exp().expand_as(logps)
    # s_{i,t} = sg[s_i] * pi_theta(o_t) / sg[pi_theta(o_t)]
    return (logps - logps.detach() + log_s.detach()).exp()
