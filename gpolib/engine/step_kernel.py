"""A whole decode step of a dense or MoE model in one C++ call: `kernels/decode_step.cpp`, through ctypes.

With the attention fused (`attention_kernel`), a float32 decode step of the embedded model was still ~30 torch
calls per layer: small matmuls at half the CPU's peak and ~100 elementwise ops per step (norms, head norms,
RoPE, cache writes, SiLU), each paying a fixed dispatch cost, under the GIL that the sampler's row shards share.
`FusedStep` runs embedding, every layer and the LM head for all rows in one call (the GIL released): its own
register-blocked matmuls on weights packed here once per read (`pack`), the same equations as `decoder.Decoder`'s
torch path (see the source's header), the rows split over `threads` with no barrier between layers.

Served: dense Qwen3 / Qwen2 and Qwen3-MoE weights (`weights.read`) in float32 on the CPU, where `native` built the
library, unless the decoder's kernels are 'attention' or 'none'; an MoE layer routes each row (softmax, top-k) and
adds its experts as the per-layer experts kernel does (issue 50; `MOE`); other dtypes and devices and 8-bit
activations keep the per-layer path.
Tested against that path, the float64 decoder and the transformers forward (tests/test_step_kernel.py,
tests/test_sampler.py).
"""
from __future__ import annotations

import ctypes
import functools
import threading

import torch

from . import experts_kernel, native
from .panels import NR, padded
_PACKING = threading.Lock()


def pack(w: torch.Tensor) -> torch.Tensor:
    """(k, n) -> the kernel's layout: panels of NR columns, (n_p / NR, k, NR), zero-padded to n_p = padded(n)."""
    k, n = w.shape
    out = torch.zeros(k, padded(n), dtype=torch.float32)
    out[:, :n] = w
    return out.view(k, -1, NR).transpose(0, 1).contiguous()


def _pack_gate_up(w_gu: torch.Tensor) -> torch.Tensor:
    """[gate | up] (H, 2I) -> packed (H, 2 Ip) with gate in columns [0, I) and up in [Ip, Ip + I)."""
    I = w_gu.shape[1] // 2
    Ip = padded(I)
    both = torch.zeros(w_gu.shape[0], 2 * Ip, dtype=torch.float32)
    both[:, :I], both[:, Ip:Ip + I] = w_gu[:, :I], w_gu[:, I:]
    return pack(both)


@functools.lru_cache(maxsize=1)
def _function():
    """gpolib_decode_step_f32 of the built library, or None."""
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    return native.function("gpolib_decode_step_f32", [ptr, ctypes.c_float, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, i64,
                                                      i64, ptr, ptr, ptr, ptr, ptr, i64, ptr, i64])


GEMM_ARGTYPES = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                 ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
"""gpolib_gemm_f32(a, lda, m, k, packed, n_p, c, ldc, accumulate)"""


@functools.lru_cache(maxsize=1)
def _gemm():
    return native.function("gpolib_gemm_f32", GEMM_ARGTYPES)


def gemm(a: torch.Tensor, packed: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """The kernel's matmul alone: a (m, k) @ W for W packed by `pack` -> (m, n_p) (columns past n are 0 + ...);
    with `out` (m, n_p), out += a @ W in place. Float32 CPU tensors, a and out contiguous."""
    n_panels, k, nr = packed.shape
    if nr != NR or a.dim() != 2 or a.shape[1] != k:
        raise ValueError(f"a {tuple(a.shape)} does not match the packed matrix {tuple(packed.shape)}")
    if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in (a, packed)):
        raise ValueError("gemm takes float32 CPU tensors")
    a, packed = a.contiguous(), packed.contiguous()
    accumulate = out is not None
    if out is None:
        out = torch.empty(a.shape[0], n_panels * NR)
    elif out.shape != (a.shape[0], n_panels * NR) or not out.is_contiguous() or out.dtype != torch.float32:
        raise ValueError(f"out must be a contiguous float32 ({a.shape[0]}, {n_panels * NR})")
    fn = _gemm()
    if fn is None:
        raise RuntimeError("gpolib's C++ kernels are unavailable on this machine")
    if fn(a.data_ptr(), k, a.shape[0], k, packed.data_ptr(), n_panels * NR, out.data_ptr(), n_panels * NR,
          int(accumulate)):
        raise ValueError(f"gemm refused a {tuple(a.shape)}, packed {tuple(packed.shape)}")
    return out


def available() -> bool:
    """The kernel is built for this machine."""
    return _function() is not None


MOE = True
"""MoE layers in the whole step (issue 50); False: an MoE model's step runs per layer (for comparisons)"""
MLP = {"dense": ("w_gu", "w_down"), "moe": ("router", "e_gu", "e_down")}
"""a layer's MLP matrices by kind"""


def _kind(lw: dict) -> str:
    return "dense" if "w_gu" in lw else "moe"


def supports(weights: dict) -> bool:
    """The weights are a dense model's, or a Qwen3-MoE's (where `MOE`), in float32 on the CPU, without quantized
    activations ('w8a8', `quant`), and the kernel is available."""
    layers = weights["layers"]
    mats = [weights["embed"], weights["head"]] + [lw.get(k) for lw in layers for k in ("w_qkv", "w_o", *MLP[_kind(lw)])]
    return (all(t is not None and t.dtype == torch.float32 and t.device.type == "cpu" for t in mats)
            and weights["d"] % 2 == 0
            and all(lw.get("act_q") is None for lw in layers) and (MOE or all(_kind(lw) == "dense" for lw in layers))
            and available())


def for_weights(weights: dict) -> "FusedStep":
    """The FusedStep of these weights, packed once and kept in the dict (row shards share one read)."""
    with _PACKING:
        if "fused_step" not in weights:
            weights["fused_step"] = FusedStep(weights)
        return weights["fused_step"]


def _packed_experts(lw: dict) -> tuple:
    """An MoE layer's experts packed for the experts kernel (`experts_kernel.pack_right`; the decoder's if packed)."""
    return lw["experts_packed"] if "experts_packed" in lw else experts_kernel.pack_right(lw["e_gu"], lw["e_down"])


class FusedStep:
    """Float32 weights (dense or MoE) packed for `kernels/decode_step.cpp`, and the call of one decode step."""

    def __init__(self, weights: dict):
        if not supports(weights):
            raise ValueError("the fused step takes a supported model's float32 CPU weights, with the kernel built")
        layers = weights["layers"]
        H, V = weights["head"].shape
        nq, nkv, d = weights["n_q"], weights["n_kv"], weights["d"]
        dense = [lw for lw in layers if _kind(lw) == "dense"]
        moe = [lw for lw in layers if _kind(lw) == "moe"]
        I = dense[0]["w_down"].shape[0] if dense else 0
        E, Ie = moe[0]["e_gu"].shape[0] if moe else 0, moe[0]["e_down"].shape[1] if moe else 0
        self.V = V
        self.dims = torch.tensor([len(layers), H, padded(H), nq, nkv, d, I, padded(I), V, padded(V),
                                  padded((nq + 2 * nkv) * d), weights["embed"].shape[0], weights["cos"].shape[0],
                                  E, padded(E), moe[0]["top_k"] if moe else 0, Ie, padded(2 * Ie),
                                  int(bool(moe[0]["norm_topk"])) if moe else 0], dtype=torch.int64)
        if any((lw["e_gu"].shape[0], lw["e_down"].shape[1], lw["top_k"], bool(lw["norm_topk"]))
               != (E, Ie, int(self.dims[15]), bool(self.dims[18])) for lw in moe):
            raise ValueError("the fused step takes MoE layers of one shape and routing")
        self.eps = float(weights["eps"])
        self.embed, self.cos, self.sin = (weights[k].contiguous() for k in ("embed", "cos", "sin"))
        self.head = pack(weights["head"])
        self.keep = []  # every tensor whose address the kernel reads
        addresses = []
        for lw in layers:
            mlp = ([_pack_gate_up(lw["w_gu"]), pack(lw["w_down"]), None, None, None] if _kind(lw) == "dense"
                   else [None, None, pack(lw["router"]), *_packed_experts(lw)])
            ts = [pack(lw["w_qkv"]), lw["b_qkv"], lw["qk_norm"], pack(lw["w_o"]), lw["b_o"], *mlp]
            ts = [None if t is None else t.contiguous() for t in ts]
            self.keep += [t for t in ts if t is not None]
            addresses += [0 if t is None else t.data_ptr() for t in ts]
        self.addresses = torch.tensor(addresses, dtype=torch.int64)  # (layers x 10)
        self.qk_eps = torch.tensor([lw["qk_eps"] or 0.0 for lw in layers], dtype=torch.float32)

    def __call__(self, tok: torch.Tensor, pos: torch.Tensor, col: int, k: torch.Tensor, v: torch.Tensor,
                 bias: torch.Tensor | None, threads: int = 1) -> torch.Tensor:
        """Tokens (b,) at positions pos (b,), written to cache column col of the first b rows of the caches
        k (L, B, nkv, d, S) and v (L, B, nkv, S, d); bias (B nkv, 1, P) or None -> next-token logits (b, V)."""
        b = tok.shape[0]
        if k.stride(-1) != 1 or v.stride(-1) != 1 or k.dtype != torch.float32 or v.dtype != torch.float32:
            raise ValueError("the caches must be float32 with unit stride in their last dim")
        if not 0 <= col < k.shape[-1] or b > k.shape[1]:
            raise ValueError(f"column {col} or {b} rows outside the cache {tuple(k.shape)}")
        tok, pos = tok.contiguous(), pos.contiguous()
        out = torch.empty(b, int(self.dims[9]))
        ks, vs = torch.tensor([*k.stride()[:4], k.shape[-1]]), torch.tensor(v.stride()[:4])
        P = 0 if bias is None else bias.shape[-1]
        code = _function()(self.dims.data_ptr(), self.eps, self.embed.data_ptr(), self.cos.data_ptr(),
                           self.sin.data_ptr(), self.head.data_ptr(), self.addresses.data_ptr(),
                           self.qk_eps.data_ptr(), tok.data_ptr(), pos.data_ptr(), b, col, k.data_ptr(), ks.data_ptr(),
                           v.data_ptr(), vs.data_ptr(), None if bias is None else bias.data_ptr(), P, out.data_ptr(),
                           threads)
        if code == 2:
            raise ValueError(f"a token outside the vocabulary ({int(self.dims[11])}) or a position outside the RoPE "
                             f"table ({int(self.dims[12])}): tok {tok.tolist()}, pos {pos.tolist()}")
        if code:
            raise ValueError(f"decode-step kernel refused sizes b={b} col={col} P={P} dims={self.dims.tolist()}")
        return out[:, :self.V]
