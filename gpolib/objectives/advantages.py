"""Group-relative advantages: one per response, from the rewards of its group of G (DeepSeekMath Eq. 3 and its
variants: Dr. GRPO's unscaled centring, the batch std, RLOO's leave-one-out baseline). Computed before the loss;
value-model (GAE) advantages are `gpolib.gae`'s."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..validation import ADV_SCALES, choice

if TYPE_CHECKING:
    import torch

ADV_EPS = 1e-4
"""added to the std in the advantage's denominator (DeepSeekMath Eq. 3 as implemented in practice)"""


def check_scale(scale: str) -> None:
    """Raise unless `scale` is an advantage normalisation: 'group' | 'batch' | 'none' | 'rloo' (ADV_SCALES)."""
    choice("scale", scale, ADV_SCALES)


def group_advantages(rewards: "torch.Tensor", group_size: int, scale: str = "group") -> "torch.Tensor":
    """Group-relative advantages, DeepSeekMath Eq. 3 (outcome supervision) / Dr. GRPO Sec. 3.2.

    scale='group' divides by the group's std (unbiased), 'batch' by the whole batch's, 'none' keeps
    r_i - mean (Dr. GRPO), 'rloo' subtracts the mean of the other G-1 rewards (= 'none' x G/(G-1)).
    rewards: (N,), consecutive blocks of `group_size` form one group. Returns (N,).
    """
    if rewards.dim() != 1 or rewards.numel() % group_size != 0:
        raise ValueError(f"rewards must be 1-D with a multiple of group_size={group_size} entries, "
                         f"got shape {tuple(rewards.shape)}")
    check_scale(scale)
    r = rewards.float().view(-1, group_size)  # (n_groups, G)
    # r_i - mean(r_group)
    centred = r - r.mean(dim=1, keepdim=True)  # (n_groups, G)
    if scale == "group":
        # A_i = (r_i - mean(r_group)) / (std(r_group) + eps)
        centred = centred / (r.std(dim=1, keepdim=True) + ADV_EPS)
    elif scale == "batch":
        # A_i = (r_i - mean(r_group)) / (std(r_batch) + eps)
        centred = centred / (r.std() + ADV_EPS)
    elif scale == "rloo":
        # A_i = r_i - (1 / (G-1)) sum_{j != i} r_j, the leave-one-out baseline (Ahmadian et al. 2024, RLOO)
        centred = r - (r.sum(dim=1, keepdim=True) - r) / (group_size - 1)
    return centred.reshape(-1)  # (N,)
