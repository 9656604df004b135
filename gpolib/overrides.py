"""`--set FIELD=VALUE` overrides, read the same way by the CLI (`python -m gpolib train`) and `scale/`.

A VALUE is a Python literal (`3` -> int, `1e-3` -> float, `True` / `None`, `'quoted'` -> str), else the
bare string itself (`bfloat16`); `nan` / `inf` are floats, so that the field's own check can say "a finite
number". For a field typed bool, `true` / `false` / `1` / `0` in any case are booleans, as other command lines
read them. Literals only: nothing typed is executed. FIELD names a TrainConfig field, or `loss_<field>` for a
LossConfig field; the config (`presets.get` -> `TrainConfig.replace`) checks the name and the value.
"""
from __future__ import annotations

import ast
import dataclasses

NON_FINITE = ("nan", "inf", "infinity")
"""VALUE spellings (after a sign, any case) read as float: nan, inf, infinity"""
BOOLEANS = {"true": True, "false": False, "1": True, "0": False}
"""VALUE spellings (any case) read as a boolean for a field typed bool"""


def parse_value(raw: str):
    """One VALUE -> its Python value, by the rules of the module docstring."""
    if raw.strip().lower().lstrip("+-") in NON_FINITE:
        return float(raw)
    try:
        return ast.literal_eval(raw)  # literals only: never executes code
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return raw


def bool_fields() -> set:
    """The `--set` names of the fields typed bool (or Optional[bool]): TrainConfig's, and loss_<field> for
    LossConfig's."""
    from .config import LossConfig, TrainConfig

    def names(cls, prefix):
        return {prefix + f.name for f in dataclasses.fields(cls) if str(f.type) in ("bool", "Optional[bool]")}
    return names(TrainConfig, "") | names(LossConfig, "loss_")


def parse_overrides(items: list) -> dict:
    """`FIELD=VALUE` strings -> {field: value} (`parse_value`, or BOOLEANS for a bool field); a later FIELD wins.
    ValueError naming the item when it has no `=`, its FIELD is not a name (letters, digits, `_`) or its VALUE is
    empty."""
    out, booleans = {}, bool_fields()
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--set {item!r} is invalid; expected FIELD=VALUE with FIELD a config field name")
        if not raw:
            raise ValueError(f"--set {item!r} is invalid: {key} has no value; expected FIELD=VALUE")
        word = raw.strip().lower()
        out[key] = BOOLEANS[word] if key in booleans and word in BOOLEANS else parse_value(raw)
    return out
