"""What a model card reports of an MoE's router: each layer's expert load and how close tokens are to swapping an
expert (the router margin), from the router probabilities recorded on held-out completions (`benchmarks/base_metrics.py`;
P3/P4's load-balance premise reads the load, `gpolib.lab.gspo_moe.load_balance`)."""
from __future__ import annotations

import torch

from .moe import _router_hooks

MARGIN_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
"""the quantiles of the router margin a model card reports"""


def record_router_probs(model, store: list):
    """Append each layer's router probabilities softmax(z) over all E experts, (B*L, E) float32, to `store`."""
    return _router_hooks(model, store, lambda output: torch.softmax(output[0].detach().float(), dim=-1))


def routing_stats(probs: list, mask: torch.Tensor, k: int) -> dict:
    """Expert load and router margin of the tokens of `mask` (N,), from each layer's router probabilities (N, E).

    load: each expert's share of the k x n activated (token, slot) pairs; min and max over experts, per layer
    (1/E each under a uniform load). margin: p_(k) - p_(k+1), the k-th minus the (k+1)-th largest router
    probability of a token, pooled over layers: how far a token is from swapping its k-th expert (quantiles).
    """
    keep = mask.reshape(-1).bool()  # (N,)
    share_min, share_max, margins = [], [], []
    for p in probs:
        p = p[keep.to(p.device)]  # (n, E)
        top = p.topk(k + 1, dim=-1)  # (n, k+1) each
        counts = torch.bincount(top.indices[:, :k].reshape(-1), minlength=p.shape[-1]).float()  # (E,)
        share = counts / counts.sum().clamp(min=1)
        share_min.append(round(share.min().item(), 4))
        share_max.append(round(share.max().item(), 4))
        margins.append(top.values[:, k - 1] - top.values[:, k])  # (n,)
    margin = torch.cat(margins)
    q = torch.quantile(margin, torch.tensor(MARGIN_QUANTILES, dtype=margin.dtype)).tolist()
    return {"n_tokens": int(keep.sum()), "uniform_share": round(1 / probs[0].shape[-1], 4),
            "expert_share_min": share_min, "expert_share_max": share_max,
            "router_margin_quantiles": {f"q{round(100 * a):02d}": round(v, 5) for a, v in zip(MARGIN_QUANTILES, q)}}
