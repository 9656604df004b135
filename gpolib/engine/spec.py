"""What one sampling call asks of the engine: `SampleSpec`, passed whole, by name, down to the decode loop."""
from __future__ import annotations

from dataclasses import dataclass

from . import kernel_choice

ENGINES = ("auto", "decoder", "hf")
"""'decoder': `decoder.Decoder`, the Qwen3 / Qwen3-MoE / Qwen2 layers re-written for decoding (raises
`weights.Unsupported` on other models); 'hf': the transformers forward with a `DynamicCache` (any causal LM; the
reference); 'auto': the decoder where it supports the model, else 'hf'"""


@dataclass(frozen=True)
class SampleSpec:
    """How to sample one batch of completions (`gpolib.engine.sample`)."""

    max_new_tokens: int
    """T: tokens generated per row at most; a row ends at its first EOS"""
    eos_id: int
    """the end-of-sequence token; -1: none, every row runs max_new_tokens (the plan's calibration)"""
    pad_id: int
    """written after a row's EOS (its log-probs there are 0)"""
    temperature: float = 1.0
    """tau: tokens are drawn from, and log-probs are those of, softmax(logits / tau) (not when greedy)"""
    top_p: float = 1.0
    """nucleus: draw from the smallest set of tokens whose mass reaches top_p (1: all); the log-probs are not
    renormalised to it"""
    greedy: bool = False
    """argmax instead of a draw; log-probs at temperature 1"""
    engine: str = "auto"
    """which forward computes the logits: one of ENGINES"""
    plan: tuple | None = None
    """(row shards, torch threads) of the decoder on the CPU; None: the planner's (`plan.Planner`)"""
    weights: str | None = None
    """the decoder's projections quantized to this format of `quant.WEIGHT_FORMATS` ('int8': weights, W8A32;
    'w8a8': weights and activations; None: the model's own weights); only with engine='decoder'"""
    kernels: str | None = None
    """the decoder's C++ kernels, one of `native.KERNELS`; None: the process's setting where the environment sets
    one (`native.kernels_setting`), else the fastest measured on this machine (`kernel_choice.default`)"""

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise ValueError(f"engine={self.engine!r} is invalid; allowed: {' | '.join(ENGINES)}")
        if self.weights is not None and self.engine != "decoder":
            raise ValueError(f"weights={self.weights!r} needs engine='decoder' (the transformers forward is not "
                             f"quantized), got engine={self.engine!r}")
        object.__setattr__(self, "kernels", kernel_choice.resolve(self.kernels))
