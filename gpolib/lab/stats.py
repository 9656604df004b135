"""Rules of evidence (DESIGN.md, "Rules of evidence"): the verdicts built on paired t-intervals.

Each rule is a small frozen object with a `criterion` (the sentence a notebook prints beside the
verdict) and a `judge(...)` that returns a `Verdict`; the sentence is written by the same object
whose fields the judgement reads, so the two cannot disagree.

- `Greater`   "A > B": mean of the per-seed differences A_s - B_s and its 95% t-interval (n-1 df);
  reproduced when the interval excludes 0 in the claimed direction, partly when only the mean has
  the claimed sign, not reproduced otherwise. `growth(...)` is its one-sample form (values > 0).
- `NotWorse`  "A not worse than B": reproduced when the interval's lower end of A - B is >= -0.03,
  partly when only the mean is.
- `Slope`     a least-squares slope with its t-interval (k-2 df) and R^2 (S1).
- `AtLeast`   a plain condition: a premise, or a check such as "clip ratio >= 10 in every seed".
- `AllOf`     combines parts (the weakest word, or DESIGN's "partly if only one half holds") and
  turns a failed premise into "not reproduced", naming it in the text.
- `for_profile` / `no_verdict`: a smoke run prints "smoke: no verdict" instead of a word.

A training rule never says "reproduced" from fewer than `min_seeds` (3) seeds, and its text says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional, Sequence

from .intervals import LEVEL, Fit, Interval, finite, fit_line, mean_interval, paired, t_quantile  # noqa: F401

REPRODUCED, PARTLY, NOT, NOT_RUN = "reproduced", "partly", "not reproduced", "not yet run"
SMOKE = "smoke: no verdict"
"""what a smoke run prints and records instead of a verdict word"""
MIN_SEEDS = 3
"""fewer seeds than this never make a training claim 'reproduced'"""
NI_MARGIN = 0.03
"""non-inferiority margin: 3 points of accuracy / 0.03 reward"""
TOL = 1e-9
"""float slack on thresholds (0.35 - 0.30 counts as a 5-point rise) and on signs (|mean| < TOL is 0, not > 0)"""


# ---------------------------------------------------------------- the verdict record

@dataclass(frozen=True)
class Verdict:
    """A judged claim (or one half of it): word, what we measured, and the rule that judged it."""

    word: str
    """reproduced | partly | not reproduced | smoke: no verdict"""
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
    """premises that did not hold"""

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
        if self.parts:
            out["parts"] = [p.to_dict() for p in self.parts]
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


def _seed_cap(word: str, n: int, min_seeds: int, text: str) -> tuple[str, str]:
    """Fewer than `min_seeds` seeds: 'reproduced' becomes 'partly', and the text says why."""
    if n >= min_seeds:
        return word, text
    note = f"only {n} seed{'s' * (n != 1)} (< {min_seeds}): at most partly"
    return (PARTLY if word == REPRODUCED else word), f"{text}; {note}"


def _seeds_clause(min_seeds: int) -> str:
    return f"; fewer than {min_seeds} seeds: at most partly" if min_seeds > 1 else ""


def _missing(rule, *seqs) -> Optional[Verdict]:
    """'not reproduced' naming the positions without a value (None / NaN / inf), or None when all have one.

    A missing measurement (e.g. no incorrect answer in a window) cannot support a claim; it is reported,
    never skipped, so a verdict always rests on every seed it names.
    """
    bad = sorted({i for seq in seqs for i, v in enumerate(seq)
                  if v is None or not math.isfinite(float(v))})
    if not bad:
        return None
    return Verdict(NOT, f"{rule.what}: no value at position(s) {bad} (seed index); cannot judge", rule.criterion)


# ---------------------------------------------------------------- rules

@dataclass(frozen=True)
class Greater:
    """'A > B' over seeds, paired by seed; with `paired=False` the one-sample 'values > 0' (growth)."""

    what: str
    """the judged quantity, e.g. 'held-out accuracy, GRPO - base'"""
    at_least: float = 0.0
    """reproduced also needs mean >= at_least (G1: 0.05 = 5 points)"""
    partly_at_least: Optional[float] = None
    """None: partly = mean > 0. Else partly needs the interval above 0 and mean >= this (F1: 0.10)"""
    paired: bool = True
    min_seeds: int = MIN_SEEDS
    fmt: str = "+.3f"

    @property
    def criterion(self) -> str:
        d = "A_s - B_s, paired by seed" if self.paired else "the per-seed values"
        need = f" and the mean >= {format(self.at_least, self.fmt)}" if self.at_least > 0 else ""
        partly = ("partly when the mean > 0" if self.partly_at_least is None else
                  f"partly when the interval's lower end > 0 and the mean >= {format(self.partly_at_least, self.fmt)}")
        return (f"{self.what} > 0: mean of {d}, {round(100 * LEVEL)}% t-interval (n-1 df); reproduced when "
                f"the interval's lower end > 0{need}; {partly}; otherwise not reproduced"
                + _seeds_clause(self.min_seeds))

    def judge(self, a: Sequence[float], b: Optional[Sequence[float]] = None) -> Verdict:
        missing = _missing(self, a, *([] if b is None else [b]))
        if missing:
            return missing
        iv = paired(a, b) if self.paired else mean_interval(a)
        above = iv.lo is not None and iv.lo > TOL
        if above and iv.mean >= self.at_least - TOL:
            word = REPRODUCED
        elif self.partly_at_least is None:
            word = PARTLY if iv.mean > TOL else NOT
        else:
            word = PARTLY if above and iv.mean >= self.partly_at_least - TOL else NOT
        word, text = _seed_cap(word, iv.n, self.min_seeds, describe(iv, self.what, self.fmt))
        return Verdict(word, text, self.criterion, iv)


def growth(what: str, **kw) -> Greater:
    """'growth > 0': the one-sample form of `Greater` (R2: incorrect-answer length growth under GRPO)."""
    return Greater(what=what, paired=False, **kw)


@dataclass(frozen=True)
class NotWorse:
    """'A not worse than B': non-inferiority of A - B with margin `margin`, paired by seed."""

    what: str
    """the judged difference, e.g. 'held-out accuracy, GSPO - GRPO'"""
    margin: float = NI_MARGIN
    min_seeds: int = MIN_SEEDS
    fmt: str = "+.3f"

    @property
    def criterion(self) -> str:
        return (f"{self.what} not worse than -{self.margin:g}: mean of A_s - B_s, paired by seed, "
                f"{round(100 * LEVEL)}% t-interval (n-1 df); reproduced when the interval's lower end >= "
                f"-{self.margin:g}; partly when only the mean >= -{self.margin:g}; otherwise not reproduced"
                + _seeds_clause(self.min_seeds))

    def judge(self, a: Sequence[float], b: Sequence[float]) -> Verdict:
        missing = _missing(self, a, b)
        if missing:
            return missing
        iv = paired(a, b)
        if iv.lo is not None and iv.lo >= -self.margin - TOL:
            word = REPRODUCED
        else:
            word = PARTLY if iv.mean >= -self.margin - TOL else NOT
        word, text = _seed_cap(word, iv.n, self.min_seeds, describe(iv, self.what, self.fmt))
        return Verdict(word, text, self.criterion, iv)

@dataclass(frozen=True)
class Slope:
    """'y grows with x': the slope's interval above 0, with R^2 and enough points for 'reproduced' (S1)."""

    what: str
    """e.g. 'slope of Var[log prod rho] per token of length'"""
    min_r2: float = 0.5
    min_points: int = 6
    fmt: str = ".2e"

    @property
    def criterion(self) -> str:
        return (f"{self.what} > 0: least-squares slope with its {round(100 * LEVEL)}% t-interval (k-2 df); "
                f"reproduced when the interval's lower end > 0, R^2 >= {self.min_r2:g} and k >= {self.min_points} "
                "points; partly when only the lower end > 0; otherwise not reproduced")

    def judge(self, x: Sequence[float], y: Sequence[float]) -> Verdict:
        missing = _missing(self, x, y)
        if missing:
            return missing
        f = fit_line(x, y)
        above = f.lo is not None and f.lo > 0
        enough = f.r2 >= self.min_r2 - TOL and f.k >= self.min_points
        word = REPRODUCED if above and enough else PARTLY if above else NOT
        ci = f"95% CI [{_f(f.lo, self.fmt)}, {_f(f.hi, self.fmt)}]" if f.lo is not None else "no interval"
        text = f"{self.what}: {format(f.slope, self.fmt)}, {ci}, R^2 {f.r2:.2f} over k={f.k}"
        return Verdict(word, text, self.criterion, fit=f)


@dataclass(frozen=True)
class AtLeast:
    """A plain condition 'value >= at_least' (each value with `every`, else their mean): a premise or a check."""

    what: str
    at_least: float
    every: bool = False
    fail_word: str = NOT
    """word when the condition fails (S1's 'spread of log s_i does not grow' only demotes to partly)"""
    fmt: str = ".3f"

    @property
    def criterion(self) -> str:
        return f"{self.what} >= {format(self.at_least, self.fmt)}" + (" in every seed" if self.every else "")

    def judge(self, values: Optional[float] | Sequence[Optional[float]]) -> Verdict:
        seq = [values] if values is None or isinstance(values, (int, float)) else list(values)
        missing = _missing(self, seq)
        if missing:
            return missing
        vals = finite(seq, self.what)
        got = min(vals) if self.every else sum(vals) / len(vals)
        holds = got >= self.at_least - TOL
        shown = ", ".join(format(v, self.fmt) for v in vals)
        text = (f"{self.what} {format(got, self.fmt)} {'>=' if holds else '<'} {format(self.at_least, self.fmt)}"
                + (f" ({'lowest' if self.every else 'mean'} of {shown})" if len(vals) > 1 else ""))
        return Verdict(REPRODUCED if holds else self.fail_word, text, self.criterion)


# ---------------------------------------------------------------- combining

_RANK = {NOT: 0, PARTLY: 1, REPRODUCED: 2}
HALVES = "halves"
"""combine mode: reproduced when every part is; partly when one is, or all are at least partly (R2)"""
WORST = "worst"
"""combine mode: the weakest part's word (a claim of the form 'X and Y')"""


@dataclass(frozen=True)
class AllOf:
    """A claim built of parts, optionally resting on premises that must hold first."""

    parts: tuple
    """rules (Greater, NotWorse, Slope, AtLeast) whose verdicts are combined, in this order"""
    mode: str = WORST
    premises: tuple = ()
    """AtLeast rules; a failed one makes the claim 'not reproduced', named in the text"""

    @property
    def criterion(self) -> str:
        how = ("reproduced when every part is; partly when one part is, or every part is at least partly"
               if self.mode == HALVES else "the word of the weakest part")
        pre = "".join(f"premise: {p.criterion} (else not reproduced); " for p in self.premises)
        return pre + " AND ".join(f"[{p.criterion}]" for p in self.parts) + f"; combined: {how}"

    def judge(self, parts: Sequence[Verdict], premises: Sequence[Verdict] = ()) -> Verdict:
        if len(parts) != len(self.parts) or len(premises) != len(self.premises):
            raise ValueError(f"AllOf: expected {len(self.parts)} parts and {len(self.premises)} premises, "
                             f"got {len(parts)} and {len(premises)}")
        ranks = [_RANK[p.word] for p in parts]
        if self.mode == HALVES:
            word = REPRODUCED if min(ranks) == 2 else PARTLY if max(ranks) == 2 or min(ranks) >= 1 else NOT
        else:
            word = {v: k for k, v in _RANK.items()}[min(ranks)]
        failed = tuple(p.text for p in premises if p.word != REPRODUCED)
        text = "; ".join(p.text for p in parts)
        if failed:
            word, text = NOT, "premise failed: " + "; ".join(failed) + " — " + text
        return Verdict(word, text, self.criterion, parts=tuple(parts) + tuple(premises), failed=failed)


def no_verdict(v: Verdict) -> Verdict:
    """A smoke run's verdict: same numbers and criterion, the word 'smoke: no verdict'."""
    return replace(v, word=SMOKE, text=f"{v.text} (smoke run: checks the code runs; not evidence)")


def for_profile(v: Verdict, profile: str) -> Verdict:
    """The verdict to print and record under `profile`: smoke runs never carry a verdict word."""
    return no_verdict(v) if profile == "smoke" else v
