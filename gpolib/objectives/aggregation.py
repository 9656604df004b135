"""The aggregation of (B, T) token terms into one loss: sample-level (GRPO Eq. 3), token-level (DAPO Eq. 8) or
Dr. GRPO's constant normaliser; and the factor that lets the update skip rows that add nothing."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..validation import AGGREGATIONS, choice

if TYPE_CHECKING:
    import torch


def aggregate(per_token: "torch.Tensor", mask: "torch.Tensor", mode: str, max_len: int | None = None) -> "torch.Tensor":
    """Reduce (B, T) token terms l_{i,t} to a scalar: 'seq_mean_token_mean' (GRPO Eq. 3, sample-level),
    'token_mean' (DAPO Eq. 8, token-level) or 'seq_mean_token_sum_norm' (Dr. GRPO, constant normaliser)."""
    choice("mode", mode, AGGREGATIONS)
    masked = per_token * mask  # (B, T)
    if mode == "seq_mean_token_mean":
        # (1/B) sum_i (1/|o_i|) sum_t l_{i,t}
        return (masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1)).mean()
    if mode == "token_mean":
        # sum_{i,t} l_{i,t} / sum_i |o_i|
        return masked.sum() / mask.sum().clamp(min=1)
    if max_len is None:
        raise ValueError("max_len is required for aggregation='seq_mean_token_sum_norm'")
    # sum_{i,t} l_{i,t} / (B * max_len)
    return masked.sum() / (per_token.shape[0] * max_len)


def subset_scale(aggregation: str, rows: int, rows_total: int, tokens: int, tokens_total: int) -> float:
    """Factor that turns a loss aggregated over a subset of rows into its share of the full-batch loss.

    Rows whose advantage is 0 (and beta = 0) add nothing to the numerator of any aggregation, only to
    its denominator; computing the loss on the other rows and scaling by this factor gives the same
    value and gradient while skipping their forward and backward passes.
    """
    if aggregation == "token_mean":
        return tokens / max(tokens_total, 1)
    return rows / max(rows_total, 1)  # both sequence-mean forms divide by the number of rows
