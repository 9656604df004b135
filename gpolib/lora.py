"""LoRA while sampling: fold the adapters into the base weights for the block, then restore them exactly."""
from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def merged_lora(model):
    """Fold LoRA deltas into the base Linear weights while sampling (one matmul per projection instead of
    three), then restore the exact base weights. Models with other adapter kinds are left unchanged."""
    try:
        from peft.tuners.lora import LoraLayer
        from peft.tuners.lora.layer import Linear as LoraLinear
    except ImportError:  # peft absent: nothing to merge
        yield
        return
    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    if not layers or any(type(m) is not LoraLinear or m.merged for m in layers):
        yield
        return
    saved = [m.get_base_layer().weight.detach().clone() for m in layers]
    with torch.no_grad():
        for m in layers:
            m.merge()
    try:
        yield
    finally:
        with torch.no_grad():
            for m, w in zip(layers, saved):
                m.unmerge()
                m.get_base_layer().weight.copy_(w)  # exact, no floating-point drift
