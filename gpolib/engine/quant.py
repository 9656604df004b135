"""8-bit quantization of the decoder's projections (the 8-bit rollout engines, `TrainConfig.rollout_weights`).

Each projection's effective weight W (out, in), LoRA delta folded in, is quantized per output channel (per row),
symmetrically, as torch's own quantizer does it:
    s_o = max_i |W_oi| / 127,   q_oi = clamp(round(W_oi / s_o), -128, 127),   W~_oi = s_o q_oi
(`torch.quantize_per_channel` to qint8, zero point 0, then `.dequantize()`, `torch_int8_per_channel`: in float32,
W_oi times the rounded reciprocal of s_o, rounded half to even; computed here in plain tensor ops, bit-equal to it
(tested), and faster (benchmarks/README.md, "Timings that were in docstrings"), so
|W~_oi - W_oi| <= s_o / 2 = max_i |W_oi| / 254. The decoder then computes with W~ in float32: the weights carry 8
bits, the matmuls, the activations and the KV cache stay float32 (weight-only quantization, W8A32). The embedding,
the LM head and an MoE router are not quantized (as weight-only int8 schemes commonly keep them). This is format
'int8'.

Format 'w8a8' adds dynamic per-token int8 activations (as 8-bit serving engines run their linear layers): the input
rows x_t (t a token) of every quantized projection are quantized on the fly the same way, one scale per row,
    s_t = max_i |x_ti| / 127,   x~_t = s_t clamp(round(x_t / s_t), -128, 127)
(`int8_per_token`, the same torch quantizer per row). The input of a projection is the RMS-normalised residual
before the norm's weight (which `weights` folds into the matrix), the attention output, and the SwiGLU product.
The router's input, the attention scores, the KV cache and the LM head stay float32.
"""
from __future__ import annotations

import warnings

import torch

from ..validation import ROLLOUT_WEIGHTS as WEIGHT_FORMATS  # the decoder's quantized weight formats, one list


def int8_per_channel(w: torch.Tensor) -> torch.Tensor:
    """W (out, in) -> W~ (out, in) in w's dtype: symmetric int8 per output channel (module docstring)."""
    wf = w.detach().float()
    scale = (wf.abs().amax(dim=1, keepdim=True) / 127).clamp_(min=torch.finfo(torch.float32).tiny)  # (out, 1) s_o
    q = torch.round(wf * scale.reciprocal()).clamp_(-128, 127)  # (out, in) q_oi, half to even as torch's quantizer
    return q.mul_(scale).to(w.dtype)


def torch_int8_per_channel(w: torch.Tensor) -> torch.Tensor:
    """`int8_per_channel` by torch's own quantizer (`quantize_per_channel` to qint8, zero point 0, `dequantize`): the
    definition it equals bit for bit (tests/test_quant_engine.py), slower (benchmarks/int8_quantizer.py)."""
    wf = w.detach().float()
    scale = (wf.abs().amax(dim=1) / 127).clamp(min=torch.finfo(torch.float32).tiny).double()  # (out,) s_o
    zero = torch.zeros(wf.shape[0], dtype=torch.long, device=wf.device)
    with warnings.catch_warnings():  # torch 2.10 announces the quantized dtypes' removal; the values are exact
        warnings.simplefilter("ignore", UserWarning)
        return torch.quantize_per_channel(wf, scale, zero, axis=0, dtype=torch.qint8).dequantize().to(w.dtype)


def int8_per_token(x: torch.Tensor) -> torch.Tensor:
    """Activations x (..., in) -> x~ in x's dtype: symmetric int8 with one scale per row (module docstring, 'w8a8')."""
    return int8_per_channel(x.reshape(-1, x.shape[-1])).view(x.shape)


def _check(fmt: str | None) -> None:
    if fmt is not None and fmt not in WEIGHT_FORMATS:
        raise ValueError(f"rollout weights {fmt!r} are invalid; allowed: None | {' | '.join(WEIGHT_FORMATS)}")


def quantizer(fmt: str | None):
    """The function applied to every projection's (out, in) weight for `fmt` (None: none)."""
    _check(fmt)
    return None if fmt is None else int8_per_channel


def activation_quantizer(fmt: str | None):
    """The function applied to every quantized projection's input rows for `fmt`: None for None and 'int8' (W8A32)."""
    _check(fmt)
    return int8_per_token if fmt == "w8a8" else None


def stacked(q, w: torch.Tensor) -> torch.Tensor:
    """`q` on a stack of matrices (E, out, in), each expert's rows quantized on their own."""
    E, o, i = w.shape
    return q(w.reshape(E * o, i)).reshape(E, o, i)
