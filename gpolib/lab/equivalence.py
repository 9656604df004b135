"""The equivalence bound and the precision rule (DESIGN.md, "Verdict words"): what turns a null into a decision.

A comparison whose 95% interval spans its decision line is either *equivalent* (its 90% interval, the two one-sided
tests at 5%, lies within +-delta of the line: "not reproduced: equivalent within +-delta") or *inconclusive*; an
inconclusive one names the paired sd with its n - 1 degrees of freedom and the seeds DESIGN's precision rule asks:
the smallest n >= 3 with t(0.975, n - 1) * sd / sqrt(n) <= delta / 2, so that the interval is at most delta wide.
`classify` is the one function that makes this decision (every rule in `stats` calls it); `DELTA` is the one table of
smallest effects of interest, mirroring DESIGN's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from .intervals import Interval, mean_interval, t_quantile

EQUIVALENCE_LEVEL = 0.90
"""the interval of the two one-sided tests at 5% each"""
MAX_SEEDS = 8
"""seeds are added only up to this many per arm (DESIGN: precision rule)"""

DELTA = {
    "accuracy": 0.03,
    "share": 0.03,
    "length": 5.0,
    "elr": 0.20,
    "log_ratio_range": 0.02,
}
"""smallest effect of interest per measure, fixed 2026-12-06 before any run it judges (DESIGN's table): held-out
accuracy (any accuracy difference; the non-inferiority margin), a share of groups / responses / tokens, a response
length in tokens, excess length reduction, a range or spread of log ratios"""
ENTROPY_FRACTION = 0.10
"""policy entropy's delta: this fraction of the base model's mean per-token entropy on held-out prompts (its card)"""
MEASURES = (*DELTA, "entropy")
"""every measure a comparison may name"""


def delta_for(measure: str, base_entropy: Optional[float] = None) -> float:
    """delta of `measure` (a `MEASURES` key); "entropy" needs the base model's mean per-token entropy."""
    if measure == "entropy":
        if base_entropy is None or not base_entropy > 0:
            raise ValueError(f"delta for entropy needs the base model's mean per-token entropy > 0, got {base_entropy}")
        return ENTROPY_FRACTION * base_entropy
    if measure not in DELTA:
        raise ValueError(f"measure {measure!r} has no delta; known: {', '.join(MEASURES)}")
    return DELTA[measure]


def seeds_for_precision(sd: float, delta: float, most: int = 10_000) -> Optional[int]:
    """The smallest n >= 3 with t(0.975, n-1) * sd / sqrt(n) <= delta / 2 (None when more than `most`)."""
    if not delta > 0:
        raise ValueError(f"seeds_for_precision needs delta > 0, got {delta}")
    for n in range(3, most + 1):
        if t_quantile(0.975, n - 1) * sd / math.sqrt(n) <= delta / 2:
            return n
    return None


@dataclass(frozen=True)
class Null:
    """How a comparison whose 95% interval spans its line is decided: equivalent or inconclusive."""

    equivalent: bool
    delta: float
    line: float
    lo90: float
    hi90: float
    sd: float
    df: int
    seeds: Optional[int]
    """the precision rule's n (None: more than 10,000)"""

    def text(self, fmt: str) -> str:
        f = fmt.lstrip("+")
        band = (f"90% CI [{format(self.lo90, fmt)}, {format(self.hi90, fmt)}] "
                f"{'within' if self.equivalent else 'not within'} {format(self.line, fmt)} +- {format(self.delta, f)}")
        if self.equivalent:
            return f"equivalent within +-{format(self.delta, f)}: {band}"
        if self.seeds is None or self.seeds > MAX_SEEDS:
            need = (f"the precision rule asks {self.seeds if self.seeds else 'more than 10,000'} seeds per arm, more "
                    f"than {MAX_SEEDS}: it stays inconclusive")
        elif self.seeds <= self.df + 1:
            need = "the precision rule's seeds are already run"
        else:
            need = f"the precision rule asks {self.seeds} seeds per arm"
        return (f"inconclusive: {band}; paired sd {format(self.sd, f)} ({self.df} df); {need} "
                f"(smallest n >= 3 with t(0.975, n-1) sd / sqrt(n) <= delta / 2)")


def classify_null(iv: Interval, line: float, delta: float) -> Optional[Null]:
    """The equivalence test of `iv`'s values against `line` +- `delta`, with the precision rule's seeds; None when
    there is no spread to judge (one value)."""
    if iv.sd is None:
        return None
    iv90 = mean_interval(iv.values, level=EQUIVALENCE_LEVEL)
    inside = iv90.lo >= line - delta and iv90.hi <= line + delta
    return Null(inside, delta, line, iv90.lo, iv90.hi, iv.sd, iv.n - 1, seeds_for_precision(iv.sd, delta))
