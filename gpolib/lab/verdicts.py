"""The verdict words (DESIGN.md, "Verdict words": one vocabulary for every claim) and the verdict record.

`Verdict` is what every claim's verdict function returns (the training claims through the rules of `stats.py`;
the exact checks G2, D3, P1, R1 through `exact`); `describe` writes an interval in words, `seed_mean` a reported
number. Accuracies, shares and fractions are in [0, 1]; "points" are 0.01.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Optional, Sequence

from .intervals import Fit, Interval

if TYPE_CHECKING:
    from .equivalence import Null

REPRODUCED, PARTLY, NOT, NOT_RUN = "reproduced", "partly", "not reproduced", "not yet run"
INCONCLUSIVE, NOT_TESTED = "inconclusive", "not tested"
SMOKE = "smoke: no verdict"
"""what a smoke run prints and records instead of a verdict word"""
WORDS = (REPRODUCED, PARTLY, INCONCLUSIVE, NOT, NOT_TESTED, NOT_RUN, SMOKE)
"""every verdict word (DESIGN.md, "Verdict words")"""
EXACT_TOL = 1e-6
"""tolerance for claims that are identities (D3, P1, R1)"""
TOL = 1e-9
"""float slack on thresholds (0.35 - 0.30 counts as a 5-point rise) and on signs (|mean| < TOL is 0, not > 0)"""
Exact = tuple[str, str]
"""(word, ours_text): what the exact checks' verdict functions return (`report.judge` wraps it in a `Verdict`)"""


def exact(conditions: Sequence[bool]) -> str:
    """An exact check of one or several parts: all hold -> reproduced; some (of several) -> partly; none -> not."""
    if all(conditions):
        return REPRODUCED
    return PARTLY if len(conditions) > 1 and any(conditions) else NOT


# ---------------------------------------------------------------- the verdict record

@dataclass(frozen=True)
class Verdict:
    """A judged claim (or one half of it): word, what we measured, and the rule that judged it."""

    word: str
    """one of `WORDS`"""
    text: str
    """our numbers in one line, with every reason the word is not better (seeds, premises)"""
    criterion: str
    """the rule, written by the object that applied it"""
    interval: Optional[Interval] = None
    """the interval of a mean the word rests on (Greater, NotWorse)"""
    fit: Optional[Fit] = None
    """the fitted line the word rests on (Slope)"""
    parts: tuple["Verdict", ...] = ()
    """the halves a combined verdict was built from"""
    failed: tuple[str, ...] = ()
    """premises, conditions or checks that did not hold"""
    null: Optional["Null"] = None
    """how a comparison whose 95% interval spans its line was decided (`equivalence.classify_null`)"""
    roles: tuple[str, ...] = ()
    """the role of each of `parts` (part, guard, check, premise, condition; `stats.AllOf`)"""

    def with_note(self, note: str) -> "Verdict":
        """The same verdict with `note` appended to its text (numbers reported beside the judged ones)."""
        return replace(self, text=f"{self.text}; {note}")

    def line(self) -> str:
        """'WORD — text' (a smoke verdict keeps its lower-case 'smoke: no verdict')."""
        word = self.word if self.word == SMOKE else self.word.upper()
        return f"{word} — {self.text}"

    def show(self) -> str:
        """The verdict and, under it, its criterion: what a notebook's claim cell prints."""
        return f"{self.line()}\n  criterion: {self.criterion}"

    def to_dict(self) -> dict:
        """Plain JSON-ready record (None for missing interval ends, with the reason beside them)."""
        out = {"word": self.word, "text": self.text, "criterion": self.criterion}
        if self.interval is not None:
            iv = self.interval
            out.update(mean=iv.mean, sd=iv.sd, interval=[iv.lo, iv.hi], level=iv.level, n=iv.n, values=list(iv.values))
            if iv.lo is None:
                out.update(sd_why="one value: no spread", interval_why="one value: no interval")
        if self.fit is not None:
            f = self.fit
            out.update(slope=f.slope, intercept=f.intercept, slope_se=f.se, interval=[f.lo, f.hi], r2=f.r2, k=f.k)
            if f.lo is None:
                out.update(slope_se_why="fewer than 3 points", interval_why="fewer than 3 points: no interval")
        if self.null is not None:
            n = self.null
            out["equivalence"] = {"delta": n.delta, "line": n.line, "interval90": [n.lo90, n.hi90],
                                  "equivalent": n.equivalent, "sd": n.sd, "df": n.df, "precision_seeds": n.seeds}
        if self.parts:
            out["parts"] = [{**p.to_dict(), **({"role": r} if r else {})}
                            for p, r in zip(self.parts, self.roles or ("",) * len(self.parts))]
        if self.failed:
            out["failed_premises"] = list(self.failed)
        return out


def _f(x: Optional[float], fmt: str) -> str:
    return "n/a" if x is None else format(x, fmt)


def describe(iv: Interval, what: str, fmt: str = "+.3f") -> str:
    """'what: mean +0.033, 95% CI [-0.005, +0.071] over n=3 (per seed +0.020, +0.050, +0.030)'."""
    ci = f"{round(100 * iv.level)}% CI [{_f(iv.lo, fmt)}, {_f(iv.hi, fmt)}]" if iv.lo is not None else "no interval"
    seeds = ", ".join(format(v, fmt) for v in iv.values)
    return f"{what}: mean {format(iv.mean, fmt)}, {ci} over n={iv.n} (per seed {seeds})"


def seed_mean(values: Sequence[Optional[float]], fmt: str = ".3f") -> str:
    """The mean over seeds of a reported (not judged) number, formatted; 'n/a' if a seed has no value."""
    vals = [v for v in values if v is not None and math.isfinite(float(v))]
    return format(sum(vals) / len(vals), fmt) if vals and len(vals) == len(values) else "n/a"
