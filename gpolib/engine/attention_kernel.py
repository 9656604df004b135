"""The fused decode-attention kernel: `kernels/decode_attention.cpp`, built once per machine, called through ctypes.

A decode step's attention on the CPU is, per layer, one small product per (row, KV head): 2 query rows against
the cached positions (`benchmarks/decode_attention.py`). As batched matmuls (`bmm`, softmax, `bmm`) each product
costs a fixed overhead that exceeds its arithmetic; the kernel does scores, padding bias, softmax and the sum of
values in one pass per product, reading the cache once, straight from its strided views.

`attend` is what `decoder.Decoder.step` calls for a float32 cache on the CPU when `available()` and the whole step
is not fused (`step_kernel`: MoE models, or kernels='attention'); otherwise (no C++ compiler, another dtype or
device, kernels='none') the decoder keeps its torch path. `native` builds and loads the library. Tested against the
torch path and the transformers forward (tests/test_attention_kernel.py, tests/test_sampler.py).
"""
from __future__ import annotations

import ctypes
import functools

import torch

from . import native


@functools.lru_cache(maxsize=1)
def _function():
    """gpolib_decode_attention_f32 of the built library, or None."""
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    return native.function("gpolib_decode_attention_f32", [ptr, ptr, i64, i64, ptr, i64, i64, ptr, i64, ptr, i64, i64,
                                                           i64, i64, i64])


def available() -> bool:
    """The kernel is built for this machine."""
    return _function() is not None


def usable(cache: torch.Tensor) -> bool:
    """The kernel can serve a decoder with this KV cache: float32 on the CPU, and available."""
    return cache.dtype == torch.float32 and cache.device.type == "cpu" and available()


def attend(q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor, bias: torch.Tensor | None,
           threads: int = 1) -> torch.Tensor:
    """softmax(q K + bias) V for each of bn products; float32 CPU tensors.

    q (bn, r, d), scale folded in; keys (bn, d, end) and vals (bn, end, d), views whose last dim has stride 1
    (the decoder's cache); bias (bn, 1, P) with P <= end, added to the first P columns (left padding), or None.
    Returns out (bn, r, d).
    """
    bn, r, d = q.shape
    end = keys.shape[-1]
    if keys.shape != (bn, d, end) or vals.shape != (bn, end, d):
        raise ValueError(f"shapes q {tuple(q.shape)}, keys {tuple(keys.shape)}, vals {tuple(vals.shape)} do not "
                         "match: expected keys (bn, d, end), vals (bn, end, d)")
    if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in (q, keys, vals)):
        raise ValueError("attend takes float32 CPU tensors")
    if keys.stride(-1) != 1 or vals.stride(-1) != 1:
        raise ValueError("keys and vals need a unit stride in their last dim")
    q = q.contiguous()
    P = 0
    if bias is not None:
        bias = bias.reshape(bn, -1).contiguous()
        P = bias.shape[1]
    out = torch.empty(bn, r, d)
    fn = _function()
    if fn is None:
        raise RuntimeError("the decode-attention kernel is unavailable on this machine")
    code = fn(q.data_ptr(), keys.data_ptr(), keys.stride(0), keys.stride(1), vals.data_ptr(), vals.stride(0),
              vals.stride(1), None if bias is None else bias.data_ptr(), P, out.data_ptr(), bn, r, d, end, threads)
    if code:
        raise ValueError(f"decode-attention kernel refused sizes bn={bn} r={r} d={d} end={end} P={P}")
    return out
