"""Strict JSON: the one writer for every JSON file the project writes (runs, summaries, claims).

Python's `json` writes NaN and Infinity, which are not JSON (RFC 8259); other readers reject them.
The rule here:

- A non-finite float (NaN, +inf, -inf) is written as `null`.
- Inside an object, its key `k` gets a sibling `"k_why"` that says why the value is missing:
  the caller's `why[k]` where it knows the reason (e.g. "GRPO did not lengthen answers: no excess
  length"), else what the value was ("was NaN", "was +Infinity"). `why[k]` also covers everything
  nested under `k`. A `k_why` already present is kept.
- Inside a list, the nulls' positions go into the enclosing key's `k_why` ("null at [0, 2]: was NaN").
- numpy scalars/arrays and 0-d tensors become numbers/lists; tuples become lists.
- The text is produced with `allow_nan=False`, so anything that slipped through raises instead
  of being written.

`loads` is the matching strict reader: it refuses NaN/Infinity tokens.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Optional

WHY_SUFFIX = "_why"


def _plain(x: Any) -> Any:
    """numpy / torch values -> Python numbers and lists; anything else unknown raises."""
    if hasattr(x, "tolist"):
        return x.tolist()
    if hasattr(x, "item"):
        return x.item()
    raise TypeError(f"value of type {type(x).__name__} is not JSON serialisable")


def _what(x: float) -> str:
    return "was NaN" if math.isnan(x) else f"was {'+' if x > 0 else '-'}Infinity"


def _clean(x: Any, why: Mapping[str, str], reasons: list, inherited: Optional[str] = None) -> Any:
    """Replace non-finite floats by None, appending (list position, reason) pairs to `reasons`."""
    if isinstance(x, dict):
        out = {}
        for k, v in x.items():
            sub: list = []
            out[k] = _clean(v, why, sub, why.get(k, inherited))
            if sub and f"{k}{WHY_SUFFIX}" not in x:
                out[f"{k}{WHY_SUFFIX}"] = _reason(sub)
        return out
    if isinstance(x, (list, tuple)):
        out_list = []
        for i, v in enumerate(x):
            sub = []
            out_list.append(_clean(v, why, sub, inherited))
            reasons.extend((i, r) for _, r in sub)
        return out_list
    if isinstance(x, float):
        if math.isfinite(x):
            return x
        reasons.append((None, inherited or _what(x)))
        return None
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    return _clean(_plain(x), why, reasons, inherited)


def _reason(sub: list) -> str:
    """The `<key>_why` text: the reason itself for a scalar, positions and reasons for a list."""
    if sub[0][0] is None:
        return sub[0][1]
    kinds = sorted({r for _, r in sub})
    return f"null at {[i for i, _ in sub]}: {'; '.join(kinds)}"


def strict(obj: Any, why: Optional[Mapping[str, str]] = None) -> Any:
    """`obj` with every non-finite float replaced by None and a `<key>_why` beside it (see module doc)."""
    return _clean(obj, why or {}, [])


def dumps(obj: Any, *, indent: Optional[int] = None, sort_keys: bool = False,
          why: Optional[Mapping[str, str]] = None) -> str:
    """Strict JSON text of `obj` (one line when `indent` is None)."""
    return json.dumps(strict(obj, why), indent=indent, sort_keys=sort_keys, allow_nan=False)


def dumps_lines(rows, why: Optional[Mapping[str, str]] = None) -> str:
    """JSON Lines: one strict object per line, each ending in a newline."""
    return "".join(dumps(r, why=why) + "\n" for r in rows)


def write(path: str | Path, obj: Any, *, indent: Optional[int] = 1, why: Optional[Mapping[str, str]] = None) -> Path:
    """Write `obj` as strict JSON (plus a final newline), atomically (`folders.write_text`: temporary, fsync, rename)."""
    from .folders import write_text

    return write_text(path, dumps(obj, indent=indent, why=why) + "\n")


def _refuse(token: str) -> Any:
    raise ValueError(f"not strict JSON: {token}")


def loads(text: str) -> Any:
    """Parse JSON, refusing NaN / Infinity / -Infinity."""
    return json.loads(text, parse_constant=_refuse)


def read(path: str | Path) -> Any:
    """Strictly parse the JSON file at `path`."""
    return loads(Path(path).read_text())
