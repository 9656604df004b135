"""The notebooks' numbers in words: one template per sentence in `prose.yaml`, filled by name.

A lab module computes the numbers of a claim (a dict) and picks which sentences apply; the wording lives in
`prose.yaml`, keyed "<claim>.<sentence>", with `str.format` fields (`{entropy_base:.4f}`). A field the
numbers lack fails loudly (KeyError naming the template), so a template and its numbers cannot drift apart.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

PROSE = Path(__file__).with_name("prose.yaml")


@lru_cache(maxsize=1)
def templates() -> dict:
    """key -> template string, from `prose.yaml` (folded lines joined by spaces)."""
    return {k: " ".join(str(v).split()) for k, v in yaml.safe_load(PROSE.read_text()).items()}


def say(key: str, indent: bool = False, **numbers) -> str:
    """The template `key` filled with `numbers`; indented by four spaces when it continues a paragraph."""
    try:
        text = templates()[key].format_map(numbers)
    except KeyError as err:
        raise KeyError(f"prose template {key!r} needs {err}") from None
    return ("    " if indent else "") + text
