"""Verdict words and the small rules the claims' verdicts share (each verdict sits in its notebook's module).

A verdict function maps an evidence dict to `(verdict, ours_text)`. Accuracies, shares and fractions
are in [0, 1]; "points" are 0.01. Every training claim (G1, S1, D1-D5, P2, P4, P5, F1, F2, R2, V1, V2) is
judged by the rules of evidence of DESIGN.md (paired t-intervals) in `stats.py`; the helpers here serve the
exact checks (G2, D3, P1, P3, R1) and the verdict words.
"""
from __future__ import annotations

import math

REPRODUCED, PARTLY, NOT, NOT_RUN = "reproduced", "partly", "not reproduced", "not yet run"
EXACT_TOL = 1e-6
"""tolerance for claims that are identities (D3, P1, R1)"""
S1_SEQ_REL_TOL = 0.1
"""S1: 'the spread of log s_i does not grow' = its slope per token is at most 10% of the slope of Var[log prod rho]"""
NOISE_Z = 2.0
"""'within seed noise' = |difference of means| <= 2 standard errors of that difference"""

Verdict = tuple[str, str]


def mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


def var(xs) -> float:
    xs, m = list(xs), mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1) if len(xs) > 1 else 0.0


def seed_noise(a, b) -> float:
    """Standard error of mean(a) - mean(b) over seeds (0 with one seed each)."""
    return math.sqrt(var(a) / len(a) + var(b) / len(b))


def at_least(x: float, threshold: float) -> bool:
    """x >= threshold, forgiving float rounding (0.35 - 0.30 counts as a 5-point rise)."""
    return x >= threshold - 1e-9


def wins(a, b) -> int:
    """Seeds where a > b (paired by position)."""
    return sum(x > y for x, y in zip(a, b))


def majority(n_wins: int, n: int) -> str:
    """'>= 2 of 3 seeds': reproduced needs >= 3 seeds and wins in >= 2/3 of them."""
    if n >= 3 and 3 * n_wins >= 2 * n:
        return REPRODUCED
    return PARTLY if n_wins > 0 else NOT


def grade(conditions: list[bool]) -> str:
    """All met -> reproduced, some -> partly, none -> not reproduced."""
    return REPRODUCED if all(conditions) else PARTLY if any(conditions) else NOT


def seeds_text(xs) -> str:
    """'mean±sd (n=k)' of per-seed values."""
    return f"{mean(xs):.3f}±{math.sqrt(var(xs)):.3f} (n={len(xs)})"
