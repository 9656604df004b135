"""An MoE router's top-k choice in one C++ call (`kernels/router_topk.cpp`, through ctypes; issue 50).

Qwen3-MoE's router takes the k largest of each token's E router probabilities (`torch.topk(p, k)`); on the CPU
torch's topk costs ~0.7 us per token at E = 64, k = 8, about the cost of the router's own matmul, at every layer of
every pass. `top_k_indices` gives the same indices (in descending order of probability; ties, which torch leaves in
an unspecified order, the lower index first) by one pass per row; the router's forward in `qwen_ops` then reads the
values with `gather`, whose gradient is topk's (a scatter of the values' gradients into the chosen entries).
"""
from __future__ import annotations

import ctypes
import functools

import torch

from . import native


@functools.lru_cache(maxsize=1)
def _function():
    """gpolib_router_topk_f32 of the built library, or None."""
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    return native.function("gpolib_router_topk_f32", [ptr, i64, i64, i64, ptr])


def available() -> bool:
    """The kernel is built for this machine."""
    return _function() is not None


def top_k_indices(p: torch.Tensor, k: int) -> torch.Tensor | None:
    """`torch.topk(p, k, dim=-1).indices` of router probabilities p (N, E) float32 on the CPU -> (N, k) int64, or
    None where the kernel cannot serve (not built, another dtype, device or rank, a NaN in p): the caller then uses
    torch. p's gradient is not followed (the caller gathers the values from p)."""
    fn = _function()
    if fn is None or p.dim() != 2 or p.dtype != torch.float32 or p.device.type != "cpu":
        return None
    N, E = p.shape
    if not 0 < k <= E:
        raise ValueError(f"k={k} must be in [1, {E}]")
    p = p.detach().contiguous()
    idx = torch.empty(N, k, dtype=torch.int64)
    code = fn(p.data_ptr(), N, E, k, idx.data_ptr())
    if code == 3:
        return None
    if code:
        raise ValueError(f"router top-k kernel refused sizes N={N} E={E} k={k}")
    return idx
