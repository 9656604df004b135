"""Group-level filters: DAPO dynamic sampling and GFPO response filtering.

Rewards are (N,) with consecutive blocks of `group_size` forming one group (one prompt).
"""
from __future__ import annotations

import torch

from .objectives import ADV_EPS, check_scale
from .validation import GFPO_METRICS, choice


def informative_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """DAPO Sec. 3.2 / Eq. 11: keep groups whose rewards are not all equal (0 < #correct < G).

    Returns a bool mask over groups, (N // group_size,).
    """
    r = rewards.view(-1, group_size)  # (n_groups, G)
    return (r.max(dim=1).values - r.min(dim=1).values) > 0


def gfpo_scores(rewards: torch.Tensor, lengths: torch.Tensor, metric: str) -> torch.Tensor:
    """Ranking score of each response for GFPO Sec. 3 (higher is kept first). (N,).

    'length':     -|o_i|  (shortest responses first)
    'efficiency': r_i / |o_i|  (token efficiency, reward per token)
    """
    choice("metric", metric, GFPO_METRICS)
    lengths = lengths.float().clamp(min=1)
    if metric == "length":
        return -lengths
    return rewards.float() / lengths  # 'efficiency'


def gfpo_keep(rewards: torch.Tensor, lengths: torch.Tensor, group_size: int, k, metric: str = "length") -> torch.Tensor:
    """GFPO filter: per group, keep the top-k responses by the metric (ties: earlier index). (N,) bool.

    k is an int (same for every group) or a (n_groups,) tensor of per-group k (adaptive difficulty).
    """
    n_groups = rewards.numel() // group_size
    ks = torch.as_tensor(k).expand(n_groups) if torch.as_tensor(k).dim() == 0 else torch.as_tensor(k)
    if ks.numel() != n_groups or bool(((ks < 1) | (ks > group_size)).any()):
        raise ValueError(f"k={k!r} is invalid; allowed: 1 <= k <= group_size={group_size}, one per group")
    scores = gfpo_scores(rewards, lengths, metric).view(n_groups, group_size)  # (n_groups, G)
    # stable descending sort: rank 0 is the best response of its group
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices  # (n_groups, G)
    ranks = torch.empty_like(order)
    ranks.scatter_(1, order, torch.arange(group_size).expand(n_groups, group_size).contiguous())
    return (ranks < ks.view(-1, 1)).reshape(-1)


def gfpo_advantages(rewards: torch.Tensor, keep: torch.Tensor, group_size: int, scale: str = "group") -> torch.Tensor:
    """GFPO Eq. 3: advantages standardised over the retained set S_i only; 0 for filtered responses. (N,).

    Like `objectives.group_advantages` restricted to S (scale 'group' | 'batch' | 'none').
    """
    check_scale(scale)
    r = rewards.float().view(-1, group_size)  # (n_groups, G)
    m = keep.view(-1, group_size).float()  # (n_groups, G)
    n = m.sum(dim=1, keepdim=True)  # (n_groups, 1)
    if bool((n < 2).any()):
        raise ValueError("GFPO needs at least 2 retained responses per group")
    # mean(r_S)
    mean = (r * m).sum(dim=1, keepdim=True) / n  # (n_groups, 1)
    # r_j - mean(r_S) for j in S, 0 otherwise
    centred = (r - mean) * m  # (n_groups, G)
    if scale == "group":
        # A_j = (r_j - mean(r_S)) / (std(r_S) + eps), std unbiased over S
        std = torch.sqrt((centred ** 2).sum(dim=1, keepdim=True) / (n - 1))  # (n_groups, 1)
        centred = centred / (std + ADV_EPS)
    elif scale == "batch":
        # A_j = (r_j - mean(r_S)) / (std of every retained reward of the batch + eps)
        kept = rewards.float()[keep.bool()]
        centred = centred / (kept.std() + ADV_EPS)
    return centred.reshape(-1)  # (N,)


def adaptive_k(group_mean_rewards: torch.Tensor, k_easy: int, group_size: int,
               history: torch.Tensor | None = None) -> torch.Tensor:
    """GFPO Alg. 2 (adaptive difficulty): k per prompt from the quartile of its mean reward.

    Quartiles of mean reward (from `history`, the running record of group means, or the batch itself):
    easiest quartile keeps k_easy, the next round((k_easy + G/2) / 2), the two hardest G/2
    (with G = 16, k_easy = 4: 4 / 6 / 8 / 8, the paper's setting). Harder prompts keep more answers. Buckets:
    r <= q50 -> G/2, q50 < r <= q75 -> mid, r > q75 -> k_easy (a mean equal to a quartile goes to the harder
    side; with 0/1 rewards many groups share a mean, so a bucket can hold more or less than a quarter).
    Returns (n_groups,) long.
    """
    ref = (history if history is not None and history.numel() >= 4 else group_mean_rewards).float()
    q = torch.quantile(ref, torch.tensor([0.25, 0.5, 0.75]))  # low -> high reward
    half = max(group_size // 2, k_easy)
    mid = max(k_easy, round((k_easy + half) / 2))
    ks = torch.full_like(group_mean_rewards, half, dtype=torch.long)
    ks[group_mean_rewards.float() > q[1]] = mid
    ks[group_mean_rewards.float() > q[2]] = k_easy
    return ks
