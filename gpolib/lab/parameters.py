"""Notebook parameters, checked in the first cell after `parameters` with the CLI's messages.

papermill injects values as typed by the user (`-p SEEDS 0`); without a check a bad one fails many cells
later (`KeyError: 'grpo/seed0'`). `check(**params)` refuses it at once, naming the parameter and what is
allowed, in the "... is invalid; allowed: ..." form the workbook runner reports as rejected input (exit 2).
"""
from __future__ import annotations

from ..paths import PROFILES


class ParameterError(ValueError):
    """A notebook parameter outside its allowed values."""


def _int_at_least(low: int):
    return (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low), f"an int >= {low}"


def _choice(*allowed):
    return (lambda v: v in allowed), " | ".join(repr(a) for a in allowed)


RULES = {
    "SEEDS": (_int_at_least(1)[0], "an int >= 1 (the number of seeds per arm: seeds 0..SEEDS-1)"),
    "SEED": _int_at_least(0), "STEPS": _int_at_least(1), "PROMPTS_PER_STEP": _int_at_least(1),
    "GROUP": _int_at_least(2), "G": _int_at_least(2), "MU": _int_at_least(1), "EVAL_PROMPTS": _int_at_least(1),
    "EVAL_SAMPLES": _int_at_least(1), "VAL_PROMPTS": _int_at_least(1), "N_PROMPTS": _int_at_least(1),
    "PANEL_PROMPTS": _int_at_least(1),
    "N_BUCKETS": _int_at_least(1), "MAX_NEW_TOKENS": _int_at_least(1),
    "PROFILE": _choice(*PROFILES), "DEVICE": _choice("cpu", "cuda", "auto"),
    "DTYPE": _choice("float32", "bfloat16", "float16"),
}
"""parameter name -> (test, allowed values in words); names not listed here are not checked"""


def check(**params) -> dict:
    """Raise ParameterError for the first parameter outside its allowed values; returns `params` unchanged."""
    for name, value in params.items():
        rule = RULES.get(name)
        if rule is not None and not rule[0](value):
            raise ParameterError(f"notebook parameter {name}={value!r} is invalid; allowed: {rule[1]}")
    return params
