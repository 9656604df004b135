"""An MoE layer's routed experts in one C++ call, forward and backward: `kernels/moe_experts.cpp`, through ctypes
(issue 50).

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
kernels='all' through `pack_right` in its layer weights. `trained_swiglu` is the same forward with a gradient
(`SwigluFn`: the backward kernel, `gpolib_moe_experts_backward_f32`, gives the gradients of the tokens, the routing
weights and both stacked weights, so peft's LoRA on the experts and a trained router receive theirs through autograd),
for the training forward (`gpolib.engine.train_experts`, `qwen_ops.fused(train_experts=...)`).
"""
from __future__ import annotations

import ctypes
import functools

import torch

from . import native
from .panels import NR, padded


@functools.lru_cache(maxsize=1)
def _function():
    """gpolib_moe_experts_f32 of the built library, or None."""
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    return native.function("gpolib_moe_experts_f32", [ptr, i64, i64, ptr, ptr, i64, i64, i64, ptr, i64, ptr, i64,
                                                     ptr, i64, ptr])


@functools.lru_cache(maxsize=1)
def _backward_function():
    """gpolib_moe_experts_backward_f32 of the built library, or None."""
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    return native.function("gpolib_moe_experts_backward_f32", [ptr, ptr, i64, i64, ptr, ptr, i64, i64, i64, ptr, i64,
                                                              ptr, ptr, ptr, ptr, ptr, ptr, ptr])


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
    return panels(gate_up), panels(down)


def panels(b: torch.Tensor) -> torch.Tensor:
    """Stacked right factors (E, K, n) -> (E, n_p / NR, K, NR) float32: panels of NR columns, zero-padded to n_p."""
    E, K, n = b.shape
    if n == padded(n):  # no padding: one copy into the panels' order
        return b.to(torch.float32).reshape(E, K, n // NR, NR).transpose(1, 2).contiguous()
    out = torch.zeros(E, K, padded(n), dtype=torch.float32)
    out[:, :, :n] = b
    return out.view(E, K, -1, NR).transpose(1, 2).contiguous()


def packed_swiglu(x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, packed: tuple,
                  out: torch.Tensor | None = None, g_save: torch.Tensor | None = None) -> torch.Tensor:
    """[out +] sum_j w_nj down_e(silu(gate_e x_n) * up_e x_n), e = idx[n, j], for experts packed by `pack`.

    x (N, H), idx (N, k) int64, w (N, k) float32 CPU tensors; out (N, H) contiguous float32, added to in place
    (None: a new tensor); g_save: None, or a contiguous float32 (N k, 2I) written with each (token, slot) pair's
    [gate_e x_n | up_e x_n] in slot order (n k + j), for `swiglu_backward`'s g_saved. Raises where the kernel is
    unavailable or refuses the sizes."""
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
    _check_g(g_save, N * k, 2 * I)
    code = fn(x.data_ptr(), N, H, idx.data_ptr(), w.data_ptr(), k, E, I, gu.data_ptr(), n_gu * NR, dn.data_ptr(),
              n_h * NR, out.data_ptr(), int(accumulate), None if g_save is None else g_save.data_ptr())
    if code == 2:
        raise ValueError(f"an expert index outside [0, {E})")
    if code:
        raise ValueError(f"experts kernel refused sizes N={N} H={H} k={k} E={E} I={I}")
    return out


def _check_g(g, rows: int, width: int) -> None:
    """A saved [gate | up] product must be None or a contiguous float32 (N k, 2I)."""
    if g is not None and (g.shape != (rows, width) or not g.is_contiguous() or g.dtype != torch.float32):
        raise ValueError(f"the saved gate / up product must be a contiguous float32 ({rows}, {width})")


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


def swiglu_backward(x: torch.Tensor, dy: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, gate_up: torch.Tensor,
                    down: torch.Tensor, packed: tuple | None = None, g_saved: torch.Tensor | None = None) -> tuple:
    """The gradients of `packed_swiglu`'s output for its gradient dy (N, H) (the equations in kernels/moe_experts.cpp):
    dx (N, H), dw (N, k), d gate_up (E, 2I, H), d down (E, H, I); float32 CPU tensors, H a multiple of NR. packed:
    `pack(gate_up, down)` where the caller has it; g_saved: the forward's [gate | up] product (`packed_swiglu`'s
    g_save) where the caller kept it, else the kernel multiplies again (the same numbers, bit for bit)."""
    E, I2, H = gate_up.shape
    I, (N, k) = I2 // 2, idx.shape
    fn = _backward_function()
    if fn is None:
        raise RuntimeError("gpolib's C++ kernels are unavailable on this machine")
    if H % NR or x.shape != (N, H) or dy.shape != (N, H) or w.shape != (N, k) or down.shape != (E, H, I):
        raise ValueError(f"x {tuple(x.shape)}, dy {tuple(dy.shape)}, idx {tuple(idx.shape)}, w {tuple(w.shape)}, "
                         f"experts {tuple(gate_up.shape)}, {tuple(down.shape)} do not match (H a multiple of {NR})")
    gu = (packed or pack(gate_up, down))[0]
    gate_up, down = gate_up.float().contiguous(), down.float().contiguous()  # read as they lie (no panels)
    x, dy, idx, w = x.contiguous(), dy.contiguous(), idx.to(torch.int64).contiguous(), w.contiguous()
    dx, dw = torch.empty(N, H), torch.empty(N, k)
    dgu, ddn_t = torch.empty(E, I2, H), torch.empty(E, I, H)
    _check_g(g_saved, N * k, I2)
    code = fn(x.data_ptr(), dy.data_ptr(), N, H, idx.data_ptr(), w.data_ptr(), k, E, I, gu.data_ptr(), gu.shape[1] * NR,
              gate_up.data_ptr(), down.data_ptr(), dx.data_ptr(), dw.data_ptr(), dgu.data_ptr(), ddn_t.data_ptr(),
              None if g_saved is None else g_saved.data_ptr())
    if code == 2:
        raise ValueError(f"an expert index outside [0, {E})")
    if code:
        raise ValueError(f"experts backward kernel refused sizes N={N} H={H} k={k} E={E} I={I}")
    return dx, dw, dgu, ddn_t.transpose(1, 2)


class SwigluFn(torch.autograd.Function):
    """`packed_swiglu` with its gradients (`swiglu_backward`): hidden (N, H), idx (N, k), w (N, k), gate_up (E, 2I, H),
    down (E, H, I) -> (N, H). The forward keeps its [gate | up] product (N k, 2I) for the backward, which then does
    not multiply again (a quarter of its arithmetic at the fine MoE's widths)."""

    @staticmethod
    def forward(ctx, hidden, idx, w, gate_up, down):
        packed = pack(gate_up.detach(), down.detach())
        g = torch.empty(idx.numel(), gate_up.shape[1])  # (N k, 2I)
        out = packed_swiglu(hidden.detach(), idx, w.detach(), packed, g_save=g)
        ctx.save_for_backward(hidden, idx, w, gate_up, down, g)
        ctx.packed = packed
        return out

    @staticmethod
    def backward(ctx, dy):
        hidden, idx, w, gate_up, down, g = ctx.saved_tensors
        dx, dw, dgu, ddn = swiglu_backward(hidden.detach(), dy, idx, w.detach(), gate_up.detach(), down.detach(),
                                           ctx.packed, g_saved=g)
        return dx, None, dw, dgu, ddn


def trained_swiglu(hidden: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, gate_up: torch.Tensor,
                   down: torch.Tensor):
    """`qwen_ops.experts_forward`'s result with its gradient by the kernels (`SwigluFn`), hidden (N, H), idx (N, k),
    w (N, k), gate_up (E, 2I, H), down (E, H, I) -> (N, H); None where they cannot serve (not built, another dtype
    or device, H not a multiple of NR): the caller then computes it itself."""
    ts = (hidden, w, gate_up, down)
    if not available() or _backward_function() is None or hidden.shape[-1] % NR \
            or any(t.dtype != torch.float32 or t.device.type != "cpu" for t in ts):
        return None
    return SwigluFn.apply(hidden, idx, w, gate_up, down)
