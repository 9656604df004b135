"""Criterion history (DESIGN.md, "Criterion history"): every criterion changed after its data were seen, kept for good.

The one place it is read from is `criterion_history.yaml` beside this module: claim id -> the earlier criteria, oldest
first, each with the date and commit that replaced it, the verdict it gave and why it changed. `report.record` attaches
a claim's list to its record as `criterion_history` and ends the verdict text with `sentence`; the report page shows
it under the claim's row.
"""
from __future__ import annotations

from pathlib import Path

import yaml

HISTORY_FILE = Path(__file__).with_name("criterion_history.yaml")
FIELDS = ("criterion", "until", "commit", "verdict", "why")
"""what every entry records"""


def load(path: Path = HISTORY_FILE) -> dict[str, list[dict]]:
    """claim id -> its earlier criteria, oldest first; each entry has exactly `FIELDS` (else ValueError)."""
    text = path.read_text()
    keys = [line.split(":")[0] for line in text.splitlines() if line[:1].isalnum()]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:  # YAML would keep only the last list of a repeated key: an earlier history would vanish
        raise ValueError(f"{path.name}: claim ids listed twice: {twice}")
    table = yaml.safe_load(text) or {}
    for cid, entries in table.items():
        for i, entry in enumerate(entries):
            if set(entry) != set(FIELDS):
                raise ValueError(f"{path.name}: {cid} entry {i} has fields {sorted(entry)}; needs {list(FIELDS)}")
    return {cid: [{k: str(e[k]) for k in FIELDS} for e in entries] for cid, entries in table.items()}


HISTORY = load()


def of(claim_id: str) -> list[dict]:
    """The criterion history of `claim_id` ([] when its criterion never changed after its data were seen)."""
    return list(HISTORY.get(claim_id, []))


def sentence(entries: list[dict]) -> str:
    """The one sentence a verdict ends with when its criterion changed after its data were seen ('' otherwise)."""
    if not entries:
        return ""
    n = len(entries)
    dates = ", ".join(e["until"] for e in entries)
    return (f"Its criterion changed after its data were seen ({n} earlier criteri{'on' if n == 1 else 'a'}, "
            f"replaced {dates}; each with the verdict it gave in criterion_history).")
