"""Notebook parameters, checked in the first cell after `parameters` with the CLI's messages.

papermill injects values as typed by the user (`-p SEEDS 0`); without a check a bad one fails many cells
later (`KeyError: 'grpo/seed0'`). `check(**params)` refuses it at once, naming the parameter and what is
allowed, in the "... is invalid; allowed: ..." form the workbook runner reports as rejected input (exit 2).
"""
from __future__ import annotations

import math

from ..errors import UserError
from ..paths import PROFILES
from ..validation import ADV_SCALES, AGGREGATIONS, RATIO_LEVELS


class ParameterError(UserError, ValueError):
    """A notebook parameter outside its allowed values."""


def _int_at_least(low: int):
    return (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low), f"an int >= {low}"


def _choice(*allowed):
    return (lambda v: any(v is a or (type(v) is type(a) and v == a) for a in allowed)), \
        " | ".join(repr(a) for a in allowed)


def _number_in(low: float, high: float):
    """A finite int or float with low < v <= high (bool is not a number here)."""
    test = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and low < v <= high)
    return test, f"a number in ({low}, {high}]"


def _list_of(rule):
    """A non-empty list whose every item passes `rule` (a (test, words) pair; the grids' values, notebooks 02 and 08)."""
    test, words = rule
    return (lambda v: isinstance(v, list) and len(v) > 0 and all(test(x) for x in v)), f"a non-empty list of {words}"


def _path_text():
    return (lambda v: isinstance(v, str) and v.strip() != ""), "a model folder or hub name (a non-empty str)"


RULES = {
    "SEEDS": (_int_at_least(1)[0], "an int >= 1 (the number of seeds per arm: seeds 0..SEEDS-1)"),
    "SEED": _int_at_least(0), "STEPS": _int_at_least(1), "PROMPTS_PER_STEP": _int_at_least(1),
    "GROUP": _int_at_least(2), "G": _int_at_least(2), "GROUP_SIZE": _int_at_least(2), "MU": _int_at_least(1),
    "EVAL_PROMPTS": _int_at_least(1), "EVAL_SAMPLES": _int_at_least(1), "VAL_PROMPTS": _int_at_least(1),
    "VAL_SAMPLES": _int_at_least(1), "N_PROMPTS": _int_at_least(1), "PANEL_PROMPTS": _int_at_least(1),
    "DEMO_PROMPTS": _int_at_least(1), "N_BUCKETS": _int_at_least(1), "MAX_NEW_TOKENS": _int_at_least(1),
    "GRPO_STEPS": _int_at_least(1), "GRPO_EVAL_EVERY": _int_at_least(1), "PREFIX_STEPS": _int_at_least(1),
    "KL_SAMPLES": _int_at_least(2), "KL_VOCAB": _int_at_least(2), "SHORT_LEN": _int_at_least(1),
    "LONG_LEN": _int_at_least(1), "MAX_LEN": _int_at_least(1), "N_CORRECT": _int_at_least(0),
    "OTHER_CORRECT": _int_at_least(0), "EPS_LOW": _number_in(0.0, 1.0), "EPS_HIGH": _number_in(0.0, 10.0),
    "LOG_RATIO_SPREAD": _number_in(0.0, 10.0), "PANEL_SAMPLES": _int_at_least(2), "PANEL_OPS": _int_at_least(1),
    "PANEL_BUDGET": _int_at_least(1), "MUS": _list_of(_int_at_least(1)), "LR_SCALES": _list_of(_number_in(0.0, 100.0)), "REBUILD": _choice(True, False),
    "PROFILE": _choice(*PROFILES), "DEVICE": _choice("cpu", "cuda", "auto"),
    "DTYPE": _choice("float32", "bfloat16", "float16"), "MODEL": _path_text(), "MOE_MODEL": _path_text(),
    "GRID_STEPS": _int_at_least(0), "GRID_EVAL_PROMPTS": _int_at_least(1),
    "GRID_LR_MULTS": _list_of(_number_in(0.0, 1000.0)), "GRID_MUS": _list_of(_int_at_least(1)),
    "GRID_MODES": _list_of(_choice("lora", "full")), "GRID_FULL_LR_SCALE": _number_in(0.0, 1000.0),
    "GRID_MODEL": _path_text(),
    "P4_CELL": ((lambda v: isinstance(v, str) and (v == "" or v.startswith("grid-"))),
                "a grid cell's name (\"grid-lora-lr3x-mu4\") or \"\" (P4's operating point not chosen yet)"),
    "P4_STEPS": _int_at_least(1),
    "GRID_PROBE": ((lambda v: isinstance(v, list) and all(isinstance(x, str) and x.startswith("grid-") for x in v)),
                   "a list of grid cells' names (\"grid-lora-lr1x-mu8\"), possibly empty"),
    "RATIO_LEVEL": _choice(*RATIO_LEVELS), "AGGREGATION": _choice(*AGGREGATIONS), "ADV_SCALE": _choice(*ADV_SCALES),
}
"""parameter name -> (test, allowed values in words): every parameter of every notebook has one (a test checks);
the runner applies them to a params file before any notebook runs, each notebook again in its first cell"""


def check(**params) -> dict:
    """Raise ParameterError for the first parameter outside its allowed values; returns `params` unchanged."""
    for name, value in params.items():
        rule = RULES.get(name)
        if rule is not None and not rule[0](value):
            raise ParameterError(f"notebook parameter {name}={value!r} is invalid; allowed: {rule[1]}")
    return params
