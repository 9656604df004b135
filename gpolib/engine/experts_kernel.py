"""An MoE layer's routed experts in one C++ call, forward only: `kernels/moe_experts.cpp`, through ctypes (issue 50).

On the CPU, torch's grouped matmul (`torch.nn.functional.grouped_mm`) is one matmul call per expert: for the
fine-grained embedded MoE (64 experts of width 16, top-8) a layer is 128 small matmuls, with a gather, a stable sort
and a scatter-add around them, each a pass over an (N k, H) tensor. The kernel groups the (token, slot) pairs by
expert itself and runs each expert's rows through the step kernel's register-blocked matmul (`kernels/gemm.h`), the
SwiGLU and the routing weight in between, summing each token's slots in expert order: the equations and the order of
`qwen_ops.experts_forward`, with another order of the sums inside each matmul and a polynomial exp in SiLU (float32
rounding: tests/test_experts_kernel.py).

`grouped_swiglu` serves float32 CPU tensors where the library is built; the trainer's no-grad passes reach it through
`gpolib.engine.no_grad_experts` (only where the machine's kernel choice is not 'none': on a CPU where the C++ kernels
run slower than torch, torch stays) and `qwen_ops.fused(experts=...)` (`Policy.logps`), the float32 decoder with
kernels='all' through `pack_right` in its layer weights. No gradient: a caller that needs one keeps the torch path.
"""
from __future__ import annotations

import ctypes
import functools

import torch

from . import native
from .step_kernel import NR, padded


@functools.lru_cache(maxsize=1)
def _function():
    """gpolib_moe_experts_f32 of the built library, or None."""
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    return native.function("gpolib_moe_experts_f32", [ptr, i64, i64, ptr, ptr, i64, i64, i64, ptr, i64, ptr, i64,
                                                     ptr, i64])


def available() -> bool:
    """The kernel is built for this machine."""
    return _function() is not None


def pack(gate_up: torch.Tensor, down: torch.Tensor) -> tuple:
    """Stacked experts in transformers' layout, gate_up (E, 2I, H) [gate rows | up rows] and down (E, H, I) -> the
    kernel's (`pack_right`)."""
    return pack_right(gate_up.transpose(1, 2), down.transpose(1, 2))


def pack_right(gate_up: torch.Tensor, down: torch.Tensor) -> tuple:
    """Stacked experts that multiply from the right (the decoder's layout), gate_up (E, H, 2I) [gate | up columns]
    and down (E, I, H) -> the kernel's: gate_up (E, gu_p / NR, H, NR) and down (E, h_p / NR, I, NR), panels of NR
    columns zero-padded to multiples of NR."""
    E, H, I2 = gate_up.shape
    I = down.shape[1]
    gu = torch.zeros(E, H, padded(I2), dtype=torch.float32)
    gu[:, :, :I2] = gate_up
    dn = torch.zeros(E, I, padded(H), dtype=torch.float32)
    dn[:, :, :H] = down
    return (gu.view(E, H, -1, NR).transpose(1, 2).contiguous(),
            dn.view(E, I, -1, NR).transpose(1, 2).contiguous())


def packed_swiglu(x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, packed: tuple,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """[out +] sum_j w_nj down_e(silu(gate_e x_n) * up_e x_n), e = idx[n, j], for experts packed by `pack`.

    x (N, H), idx (N, k) int64, w (N, k) float32 CPU tensors; out (N, H) contiguous float32, added to in place
    (None: a new tensor). Raises where the kernel is unavailable or refuses the sizes."""
    gu, dn = packed
    E, n_gu, H, _ = gu.shape
    I, n_h = dn.shape[2], dn.shape[1]
    N, k = idx.shape
    if x.shape != (N, H) or w.shape != (N, k) or dn.shape[0] != E:
        raise ValueError(f"x {tuple(x.shape)}, idx {tuple(idx.shape)}, w {tuple(w.shape)} do not match experts "
                         f"{tuple(gu.shape)}, {tuple(dn.shape)}")
    if x.dtype != torch.float32 or w.dtype != torch.float32 or x.device.type != "cpu":
        raise ValueError("the experts kernel takes float32 CPU tensors")
    fn = _function()
    if fn is None:
        raise RuntimeError("gpolib's C++ kernels are unavailable on this machine")
    x, idx, w = x.contiguous(), idx.to(torch.int64).contiguous(), w.contiguous()
    accumulate = out is not None
    if out is None:
        out = torch.empty(N, H)
    elif out.shape != (N, H) or not out.is_contiguous() or out.dtype != torch.float32:
        raise ValueError(f"out must be a contiguous float32 ({N}, {H})")
    code = fn(x.data_ptr(), N, H, idx.data_ptr(), w.data_ptr(), k, E, I, gu.data_ptr(), n_gu * NR, dn.data_ptr(),
              n_h * NR, out.data_ptr(), int(accumulate))
    if code == 2:
        raise ValueError(f"an expert index outside [0, {E})")
    if code:
        raise ValueError(f"experts kernel refused sizes N={N} H={H} k={k} E={E} I={I}")
    return out


def grouped_swiglu(hidden: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, gate_up: torch.Tensor,
                   down: torch.Tensor):
    """`qwen_ops.experts_forward`'s result by the kernel, hidden (N, H), idx (N, k), w (N, k), gate_up (E, 2I, H),
    down (E, H, I) -> (N, H); None where the kernel cannot serve (not `usable`, another dtype or device, a gradient
    asked for): the caller then computes it itself."""
    ts = (hidden, w, gate_up, down)
    if (torch.is_grad_enabled() and any(t.requires_grad for t in ts)) or not available() \
            or any(t.dtype != torch.float32 or t.device.type != "cpu" for t in ts):
        return None
    return packed_swiglu(hidden, idx, w, pack(gate_up.detach(), down.detach()))
