"""Mixture-of-experts routing: record the experts each token is sent to, and replay them (GSPO Sec. 5.3).

Routing Replay: the experts chosen by pi_old are cached and reused in the forward passes of pi_theta,
so the token ratio compares the same sub-networks. In transformers' Qwen3-MoE each sparse block calls
`self.gate(hidden)` -> (router_logits, routing_weights, selected_experts); a forward hook on the gate
records `selected_experts`, or replaces them with the recorded ones and recomputes their weights from
the new router logits.
"""
from __future__ import annotations

import contextlib

import torch


def routers(model) -> list:
    """The router (gate) modules of every sparse MoE layer, in layer order."""
    return [m for name, m in model.named_modules()
            if type(m).__name__.endswith("TopKRouter") or (name.endswith("mlp.gate") and hasattr(m, "top_k"))]


def is_moe(model) -> bool:
    return len(routers(model)) > 0


@contextlib.contextmanager
def record_routing(model, store: list):
    """Append each layer's selected experts (B*L, k) to `store` during the forward passes inside."""
    def hook(module, args, output):
        store.append(output[2].detach().clone())

    handles = [r.register_forward_hook(hook) for r in routers(model)]
    try:
        yield store
    finally:
        for h in handles:
            h.remove()


def stack_by_layer(store: list, n_layers: int) -> list:
    """Records of several forward calls (call-major: layer 0..n-1 per call) -> one (N_total, k) per layer."""
    if len(store) % n_layers:
        raise ValueError(f"{len(store)} router records do not divide into {n_layers} layers")
    return [torch.cat(store[layer::n_layers]) for layer in range(n_layers)]


def _replayed(module, output, experts: torch.Tensor):
    """Router output with forced experts; weights = softmax(new logits) at those experts (renormalised)."""
    logits = output[0]  # (N, E)
    probs = torch.softmax(logits, dim=-1, dtype=torch.float)
    weights = probs.gather(1, experts)  # (N, k)
    if getattr(module, "norm_topk_prob", False):
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return logits, weights.to(logits.dtype), experts


@contextlib.contextmanager
def replay_routing(model, experts_per_layer: list):
    """Force each layer's router to the given experts (list of (N, k) long tensors, N = B*L of the batch)."""
    layers = routers(model)
    if len(experts_per_layer) != len(layers):
        raise ValueError(f"expected experts for {len(layers)} MoE layers, got {len(experts_per_layer)}")
    handles = [r.register_forward_hook(lambda m, a, out, e=e: _replayed(m, out, e))
               for r, e in zip(layers, experts_per_layer)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def routing_change(before: list, after: list) -> torch.Tensor:
    """Share of tokens whose top-k expert set changed, per layer. Lists of (N, k) -> (n_layers,)."""
    out = []
    for b, a in zip(before, after):
        changed = (b.sort(dim=-1).values != a.sort(dim=-1).values).any(dim=-1)  # (N,)
        out.append(changed.float().mean())
    return torch.stack(out)
