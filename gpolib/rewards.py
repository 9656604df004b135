"""Rewards: DAPO overlong shaping and overlong filtering (the strict answer parser lives here too)."""
from __future__ import annotations

import torch


def soft_overlong_penalty(length, max_len: int, cache_len: int):
    """Soft overlong punishment, DAPO Eq. 13.

    R_length(y) = 0                                  if |y| <= L_max - L_cache
                = ((L_max - L_cache) - |y|) / L_cache  if L_max - L_cache < |y| <= L_max
                = -1                                 if L_max < |y|
    `length` is an int or a tensor of lengths; returns the same kind.
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(f"cache_len={cache_len!r} is invalid; allowed: 0 < cache_len <= max_len={max_len}")
    as_tensor = torch.as_tensor(length, dtype=torch.float32)
    start = max_len - cache_len
    ramp = (start - as_tensor) / cache_len
    out = torch.where(as_tensor <= start, torch.zeros_like(as_tensor),
                      torch.where(as_tensor <= max_len, ramp, -torch.ones_like(as_tensor)))
    return out if isinstance(length, torch.Tensor) else float(out)


def overlong_filter_mask(mask: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """DAPO overlong filtering: drop truncated responses from the loss. mask (B, T), truncated (B,) -> (B, T)."""
    return mask * (~truncated.bool()).to(mask.dtype).unsqueeze(1)
