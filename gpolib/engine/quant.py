"""Weight-only int8 quantization of the decoder's projections (an 8-bit rollout engine, `TrainConfig.rollout_weights`).

Each projection's effective weight W (out, in), LoRA delta folded in, is quantized per output channel (per row),
symmetrically, with torch's own quantizer:
    s_o = max_i |W_oi| / 127,   q_oi = clamp(round(W_oi / s_o), -128, 127),   W~_oi = s_o q_oi
(`torch.quantize_per_channel` to qint8, zero point 0, then `.dequantize()`), so |W~_oi - W_oi| <= s_o / 2 =
max_i |W_oi| / 254. The decoder then computes with W~ in float32: the weights carry 8 bits, the matmuls, the
activations and the KV cache stay float32 (weight-only quantization, W8A32). The embedding, the LM head and an MoE
router are not quantized (as weight-only int8 schemes commonly keep them).
"""
from __future__ import annotations

import warnings

import torch

from ..validation import ROLLOUT_WEIGHTS as WEIGHT_FORMATS  # the decoder's quantized weight formats, one list


def int8_per_channel(w: torch.Tensor) -> torch.Tensor:
    """W (out, in) -> W~ (out, in) in w's dtype: symmetric int8 per output channel (module docstring)."""
    wf = w.detach().float()
    scale = (wf.abs().amax(dim=1) / 127).clamp(min=torch.finfo(torch.float32).tiny).double()  # (out,) s_o
    zero = torch.zeros(wf.shape[0], dtype=torch.long, device=wf.device)
    with warnings.catch_warnings():  # torch 2.10 announces the quantized dtypes' removal; the values are exact
        warnings.simplefilter("ignore", UserWarning)
        q = torch.quantize_per_channel(wf, scale, zero, axis=0, dtype=torch.qint8)
    return q.dequantize().to(w.dtype)


def quantizer(fmt: str | None):
    """The function applied to every projection's (out, in) weight for `fmt` (None: none)."""
    if fmt is None:
        return None
    if fmt == "int8":
        return int8_per_channel
    raise ValueError(f"rollout weights {fmt!r} are invalid; allowed: None | {' | '.join(WEIGHT_FORMATS)}")


def stacked(q, w: torch.Tensor) -> torch.Tensor:
    """`q` on a stack of matrices (E, out, in), each expert's rows quantized on their own."""
    E, o, i = w.shape
    return q(w.reshape(E * o, i)).reshape(E, o, i)
