"""Rewards: DAPO overlong shaping and overlong filtering (the strict answer parser lives here too)."""
from __future__ import annotations

import re

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


# ---------------------------------------------------------------------------
# Strict answer parser and correctness reward
# ---------------------------------------------------------------------------
# The final-answer format of the embedded task (gpolib.tasks) is one last line
#     A=<int>
# where <int> is "0" or an optional "-" followed by 1..MAX_ANSWER_DIGITS ASCII
# digits without a leading zero. The line must start the text or follow a "\n";
# at most one "\n" may follow it and nothing else (no spaces, no "\r", no second
# answer). Everything before the answer line is free text. Anything else, any
# non-str input, non-ASCII digits and over-long numbers parse to None.

MAX_ANSWER_DIGITS = 12
"""longest accepted answer, in digits; longer numbers are rejected before matching"""
ANSWER_PREFIX = "A="
_ANSWER_LINE = re.compile(r"A=(?:0|-?[1-9][0-9]{0,%d})" % (MAX_ANSWER_DIGITS - 1))


def parse_answer(text) -> int | None:
    """The integer on the final `A=<int>` line of `text`, or None if the format is not met.

    Cost is one `rfind` over the text plus a match on at most 2 + 1 + 12 characters,
    so arbitrarily long inputs parse in linear time without backtracking.
    """
    if not isinstance(text, str):
        return None
    body = text[:-1] if text.endswith("\n") else text
    line = body[body.rfind("\n") + 1:]  # rfind is -1 when there is no newline
    if len(line) > len(ANSWER_PREFIX) + 1 + MAX_ANSWER_DIGITS or not _ANSWER_LINE.fullmatch(line):
        return None
    return int(line[len(ANSWER_PREFIX):])


def correctness_reward(text, answer: int) -> float:
    """1.0 if `parse_answer(text)` equals `answer`, else 0.0 (never raises)."""
    parsed = parse_answer(text)
    if parsed is None or isinstance(answer, bool) or not isinstance(answer, int):
        return 0.0
    return 1.0 if parsed == answer else 0.0
