"""Rules of evidence (DESIGN.md, "Rules of evidence" and "Verdict words"): verdicts built on paired t-intervals.

Each rule is a small frozen object with a `criterion` (the sentence a notebook prints beside the verdict) and a
`judge(...)` that returns a `Verdict`; the sentence is written by the object whose fields the judgement reads.
The words, one vocabulary for every claim:
- reproduced      every part holds (a comparison: its 95% interval excludes the decision line on the claimed side);
- partly          a claim of several parts, at least one reproduced and one not; the text names which. Never
                  the word of a single comparison;
- inconclusive    a comparison whose interval spans its line and is not equivalent (`equivalence`): the text
                  gives the paired sd with its degrees of freedom and the seeds of DESIGN's precision rule;
- not reproduced  the interval excludes the claimed side; or its 90% interval lies within +-delta of the line
                  (equivalent); or a premise the paper asserts failed (named);
- not tested      a conditional claim whose condition did not occur (the measured condition printed);
- smoke: no verdict, on smoke runs (`for_profile`); not yet run, a claim whose runs do not exist.
Rules: `Greater` ("A > B", paired by seed; `growth` its one-sample form), `NotWorse` (non-inferiority, margin 0.03),
`Slope` (a least-squares slope), `EverySeed` (a per-seed interval above 0 in
every seed), `AtLeast` (a plain condition), `AllOf` (typed parts: empirical parts, guards, checks, premises and
conditions).
A training rule never says "reproduced" from fewer than `min_seeds` (3) seeds: it says inconclusive, and why.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional, Sequence

from .equivalence import (DELTA, ENTROPY_FRACTION, MEASURES, Null, classify_null, delta_for,  # noqa: F401
                          seeds_for_precision)
from .intervals import LEVEL, Fit, Interval, finite, fit_line, mean_interval, paired, t_quantile  # noqa: F401
from .verdicts import (INCONCLUSIVE, NOT, NOT_RUN, NOT_TESTED, PARTLY, REPRODUCED, SMOKE, TOL, WORDS,  # noqa: F401
                       Verdict, _f, describe, seed_mean)

MIN_SEEDS = 3
"""fewer seeds than this never make a training claim 'reproduced'"""
NI_MARGIN = 0.03
"""non-inferiority margin: 3 points of accuracy / 0.03 reward"""
TOL = 1e-9
"""float slack on thresholds (0.35 - 0.30 counts as a 5-point rise) and on signs (|mean| < TOL is 0, not > 0)"""


def compare(iv: Interval, line: float, what: str, fmt: str, delta: float, *, at_least: Optional[float] = None,
            min_seeds: int = MIN_SEEDS) -> tuple[str, str, Optional[Null]]:
    """(word, text, null) of one comparison 'mean > line' (and mean >= at_least): reproduced when the 95% interval's
    lower end is above the line (and the mean reaches `at_least`); not reproduced when its upper end is below the line
    (or below `at_least`: the interval excludes the claimed size); otherwise `equivalence.classify_null` decides:
    not reproduced when the 90% interval lies within line +- delta (equivalent), else inconclusive with the paired
    sd, its degrees of freedom and the seeds of DESIGN's precision rule."""
    text = describe(iv, what, fmt)
    size = line if at_least is None else max(line, at_least)
    if iv.lo is not None and iv.lo > line + TOL and iv.mean >= size - TOL:
        if iv.n >= min_seeds:
            return REPRODUCED, text, None
        return INCONCLUSIVE, f"{text}; only {iv.n} seeds (< {min_seeds}): not enough to say reproduced", None
    if iv.hi is not None and iv.hi < size - TOL:
        return NOT, text, None
    null = classify_null(iv, line, delta)
    if null is None:
        return INCONCLUSIVE, f"{text}; one seed ({iv.n}): no interval, no decision", None
    return (NOT if null.equivalent else INCONCLUSIVE), f"{text}; {null.text(fmt)}", null


def _seeds_clause(min_seeds: int) -> str:
    return f"; fewer than {min_seeds} seeds: at most inconclusive" if min_seeds > 1 else ""


def _missing(rule, *seqs) -> Optional[Verdict]:
    """'inconclusive' naming the positions without a value (None / NaN / inf), or None when all have one.

    A missing measurement (e.g. no incorrect answer in a window) cannot support or refute a claim; it is
    reported, never skipped, so a verdict always rests on every seed it names.
    """
    bad = sorted({i for seq in seqs for i, v in enumerate(seq)
                  if v is None or not math.isfinite(float(v))})
    if not bad:
        return None
    return Verdict(INCONCLUSIVE, f"{rule.what}: no value at position(s) {bad} (seed index); cannot judge",
                   rule.criterion)


_SPANS = "inconclusive when it spans the line"
_BELOW = "not reproduced when its upper end is below it"


# ---------------------------------------------------------------- rules

@dataclass(frozen=True)
class Greater:
    """'A > B' over seeds, paired by seed; with `paired=False` the one-sample 'values > 0' (growth)."""

    what: str
    """the judged quantity, e.g. 'held-out accuracy, GRPO - base'"""
    measure: str
    """its key in `equivalence.DELTA` (or "entropy"): the smallest effect of interest that decides a null"""
    at_least: float = 0.0
    """reproduced also needs mean >= at_least (G1: 0.05 = 5 points; F1: ELR 0.46)"""
    paired: bool = True
    min_seeds: int = MIN_SEEDS
    fmt: str = "+.3f"
    delta: Optional[float] = None
    """delta when it is not the table's (entropy: 10% of the base model's; set by `with_delta`)"""

    def __post_init__(self):
        if self.delta is None:
            delta_for(self.measure, base_entropy=1.0)  # an unknown measure fails at definition

    def with_delta(self, delta: float) -> "Greater":
        return replace(self, delta=delta)

    @property
    def _delta(self) -> float:
        return self.delta if self.delta is not None else delta_for(self.measure)

    @property
    def criterion(self) -> str:
        d = "A_s - B_s, paired by seed" if self.paired else "the per-seed values"
        need = f" and the mean >= {format(self.at_least, self.fmt)}" if self.at_least > 0 else ""
        line = format(self.at_least, self.fmt) if self.at_least > 0 else "0"
        return (f"{self.what} > 0: mean of {d}, {round(100 * LEVEL)}% t-interval (n-1 df); reproduced when "
                f"the interval's lower end > 0{need}; not reproduced when its upper end < {line}, or when the 90% "
                f"interval lies within 0 +- {_delta_text(self)} (equivalent); otherwise inconclusive"
                + _seeds_clause(self.min_seeds))

    def judge(self, a: Sequence[float], b: Optional[Sequence[float]] = None) -> Verdict:
        missing = _missing(self, a, *([] if b is None else [b]))
        if missing:
            return missing
        iv = paired(a, b) if self.paired else mean_interval(a)
        word, text, null = compare(iv, 0.0, self.what, self.fmt, self._delta, at_least=self.at_least or None,
                                   min_seeds=self.min_seeds)
        return Verdict(word, text, self.criterion, iv, null=null)


def growth(what: str, **kw) -> Greater:
    """'growth > 0': the one-sample form of `Greater` (R2: incorrect-answer length growth under GRPO)."""
    return Greater(what=what, paired=False, **kw)


@dataclass(frozen=True)
class NotWorse:
    """'A not worse than B': non-inferiority of A - B with margin `margin`, paired by seed (line: -margin)."""

    what: str
    """the judged difference, e.g. 'held-out accuracy, GSPO - GRPO'"""
    measure: str = "accuracy"
    """its key in `equivalence.DELTA`; non-inferiority is DESIGN's accuracy rule, so accuracy unless named"""
    margin: float = NI_MARGIN
    min_seeds: int = MIN_SEEDS
    fmt: str = "+.3f"

    @property
    def _delta(self) -> float:
        return delta_for(self.measure)

    @property
    def criterion(self) -> str:
        return (f"{self.what} not worse than -{self.margin:g}: mean of A_s - B_s, paired by seed, "
                f"{round(100 * LEVEL)}% t-interval (n-1 df); reproduced when the interval's lower end >= "
                f"-{self.margin:g}; not reproduced when its upper end < -{self.margin:g}, or when the 90% interval "
                f"lies within -{self.margin:g} +- {self._delta:g} (equivalent: the difference sits at the margin); "
                "otherwise inconclusive" + _seeds_clause(self.min_seeds))

    def judge(self, a: Sequence[float], b: Sequence[float]) -> Verdict:
        missing = _missing(self, a, b)
        if missing:
            return missing
        iv = paired(a, b)
        word, text, null = compare(iv, -self.margin - 2 * TOL, self.what, self.fmt, self._delta,
                                   min_seeds=self.min_seeds)
        return Verdict(word, text, self.criterion, iv, null=null)


def _delta_text(rule) -> str:
    """A comparison's delta as its criterion writes it (entropy's: a share of the base model's entropy)."""
    share = f"{ENTROPY_FRACTION:.0%} of the base model's"
    if rule.delta is not None:
        return format(rule.delta, rule.fmt.lstrip("+")) + (f" ({share} entropy)" if rule.measure == "entropy" else "")
    if rule.measure == "entropy":
        return f"delta ({share} mean per-token entropy on held-out prompts)"
    return format(delta_for(rule.measure), rule.fmt.lstrip("+"))


@dataclass(frozen=True)
class Slope:
    """'y grows with x': the slope's interval above 0, with R^2 and enough points for 'reproduced'."""

    what: str
    """e.g. 'slope of V(L) per token of prefix'"""
    min_r2: float = 0.5
    min_points: int = 6
    fmt: str = ".2e"

    @property
    def criterion(self) -> str:
        return (f"{self.what} > 0: least-squares slope with its {round(100 * LEVEL)}% t-interval (k-2 df); "
                f"reproduced when the interval's lower end > 0, R^2 >= {self.min_r2:g} and k >= {self.min_points} "
                "points; not reproduced when its upper end < 0; otherwise inconclusive")

    def judge(self, x: Sequence[float], y: Sequence[float]) -> Verdict:
        missing = _missing(self, x, y)
        if missing:
            return missing
        f = fit_line(x, y)
        enough = f.r2 >= self.min_r2 - TOL and f.k >= self.min_points
        ci = f"95% CI [{_f(f.lo, self.fmt)}, {_f(f.hi, self.fmt)}]" if f.lo is not None else "no interval"
        text = f"{self.what}: {format(f.slope, self.fmt)}, {ci}, R^2 {f.r2:.2f} over k={f.k}"
        if f.lo is not None and f.lo > 0 and enough:
            word = REPRODUCED
        elif f.hi is not None and f.hi < 0:
            word = NOT
        else:
            word = INCONCLUSIVE
            if f.lo is not None and f.lo > 0:
                text += f"; inconclusive: R^2 < {self.min_r2:g} or fewer than {self.min_points} points"
        return Verdict(word, text, self.criterion, fit=f)


@dataclass(frozen=True)
class AtLeast:
    """A plain condition 'value >= at_least' (each value with `every`, else their mean): a premise, a check, or the
    condition of a conditional claim (`AllOf(conditions=...)`)."""

    what: str
    at_least: float
    every: bool = False
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
        return Verdict(REPRODUCED if holds else NOT, text, self.criterion)


@dataclass(frozen=True)
class EverySeed:
    """'statistic > 0 in every seed', each seed with its own interval (S1: a bootstrap over prompts within the seed's
    run): reproduced when every seed's interval is above 0 (and there are >= min_seeds seeds); not reproduced when
    some seed's interval is below 0; otherwise inconclusive, naming the seeds whose interval spans 0."""

    what: str
    how: str = "95% bootstrap interval over prompts"
    min_seeds: int = MIN_SEEDS
    fmt: str = ".2e"

    @property
    def criterion(self) -> str:
        return (f"{self.what} > 0 in every seed: {self.how}; reproduced when the interval's lower end > 0 in every "
                f"seed; not reproduced when its upper end < 0 in some seed; otherwise inconclusive"
                + _seeds_clause(self.min_seeds))

    def judge(self, values: Sequence[float], los: Sequence[float], his: Sequence[float]) -> Verdict:
        if not (len(values) == len(los) == len(his)):
            raise ValueError(f"EverySeed: {len(values)} values, {len(los)} lower and {len(his)} upper ends")
        missing = _missing(self, values, los, his)
        if missing:
            return missing
        shown = ", ".join(f"{format(v, self.fmt)} [{format(lo, self.fmt)}, {format(hi, self.fmt)}]"
                          for v, lo, hi in zip(values, los, his))
        text = f"{self.what} per seed: {shown} (n={len(values)})"
        if any(hi < -TOL for hi in his):
            return Verdict(NOT, text, self.criterion)
        spans = [i for i, lo in enumerate(los) if not lo > TOL]
        if spans:
            return Verdict(INCONCLUSIVE, f"{text}; inconclusive: the interval spans 0 in seed index {spans}",
                           self.criterion)
        if len(values) < self.min_seeds:
            return Verdict(INCONCLUSIVE, f"{text}; only {len(values)} seeds (< {self.min_seeds}): not enough to say "
                           "reproduced", self.criterion)
        return Verdict(REPRODUCED, text, self.criterion)


# ---------------------------------------------------------------- combining

def _name(rule, v: Verdict) -> str:
    return getattr(rule, "what", v.text.split(":")[0])


@dataclass(frozen=True)
class AllOf:
    """A claim built of typed parts (DESIGN.md, "Verdict words"):
    - `parts`: empirical parts, whose outcome could have gone either way; they alone decide reproduced / partly /
      not reproduced / inconclusive ("partly" needs one reproduced and one not, so never from a single part);
    - `guards`: empirical side conditions of the claim (e.g. accuracy not worse while entropy is kept up): one
      that does not hold denies "reproduced" (partly, named), but a guard never earns "partly" on its own;
    - `checks`: what holds by construction (an identity, a filter doing what it is coded to do): printed as
      "checks passed", never a reproduced part; a failed check is a bug and the claim is not reproduced;
    - `premises`: what the paper asserts and the claim presumes (a failed one: not reproduced, named);
    - `conditions`: the situation a conditional claim is about, or a premise at our scale (e.g. a load-balanced
      MoE): one that did not occur makes the claim "not tested", the measured condition printed."""

    parts: tuple
    checks: tuple = ()
    guards: tuple = ()
    premises: tuple = ()
    conditions: tuple = ()

    @property
    def criterion(self) -> str:
        cond = "".join(f"condition: {c.criterion} (else not tested); " for c in self.conditions)
        pre = "".join(f"premise: {p.criterion} (else not reproduced); " for p in self.premises)
        body = " AND ".join(f"[{p.criterion}]" for p in self.parts)
        guards = "".join(f"; guard (denies reproduced, never earns partly): [{g.criterion}]" for g in self.guards)
        checks = "".join(f"; check (holds by construction, not a part): [{c.criterion}]" for c in self.checks)
        combine = ("; combined: reproduced when every part and guard holds; partly when at least one part is "
                   "reproduced and one part or guard is not (named); else not reproduced if a part is, otherwise "
                   "inconclusive" if len(self.parts) + len(self.guards) > 1 else "")
        return cond + pre + body + guards + checks + combine

    def _word(self, parts: Sequence[Verdict], guards: Sequence[Verdict]) -> tuple[str, str]:
        words = [p.word for p in parts]
        if all(w == REPRODUCED for w in words) and all(g.word == REPRODUCED for g in guards):
            return REPRODUCED, ""
        if any(w in (REPRODUCED, PARTLY) for w in words):
            pairs = list(zip(self.parts, parts)) + list(zip(self.guards, guards))
            held = [_name(r, v) for r, v in pairs if v.word == REPRODUCED]
            not_held = [f"{_name(r, v)} ({v.word})" for r, v in pairs if v.word != REPRODUCED]
            return PARTLY, f"holds: {'; '.join(held) or 'none in full'} — does not: {'; '.join(not_held)}. "
        return (NOT if NOT in words else INCONCLUSIVE), ""

    def judge(self, parts: Sequence[Verdict], premises: Sequence[Verdict] = (), conditions: Sequence[Verdict] = (),
              *, checks: Sequence[Verdict] = (), guards: Sequence[Verdict] = ()) -> Verdict:
        got = (len(parts), len(checks), len(guards), len(premises), len(conditions))
        want = (len(self.parts), len(self.checks), len(self.guards), len(self.premises), len(self.conditions))
        if got != want:
            raise ValueError(f"AllOf: expected (parts, checks, guards, premises, conditions) = {want}, got {got}")
        word, named = self._word(parts, guards)
        text = named + "; ".join(p.text for p in (*parts, *guards))
        broken = tuple(c.text for c in checks if c.word != REPRODUCED)
        if checks:
            text += ("; checks passed: " if not broken else "; CHECK FAILED: ") + "; ".join(
                broken or [c.text for c in checks])
        unmet = tuple(c.text for c in conditions if c.word != REPRODUCED)
        failed = tuple(p.text for p in premises if p.word == NOT)
        unsure = tuple(p.text for p in premises if p.word not in (REPRODUCED, NOT))
        shown = "".join(f"{'condition' if c in conditions else 'premise'} held: {c.text}; "
                        for c in (*conditions, *premises) if c.word == REPRODUCED)
        if unmet:
            word, text = NOT_TESTED, "not tested: condition not met: " + "; ".join(unmet) + " — " + text
        elif failed:
            word, text = NOT, "premise failed: " + "; ".join(failed) + " — " + text
        elif broken:
            word = NOT
        elif unsure and word != NOT:
            word, text = INCONCLUSIVE, "premise inconclusive: " + "; ".join(unsure) + " — " + text
        else:
            text = shown + text
        return Verdict(word, text, self.criterion,
                       parts=tuple(parts) + tuple(guards) + tuple(checks) + tuple(premises) + tuple(conditions),
                       failed=failed + unmet + broken,
                       roles=("part",) * len(parts) + ("guard",) * len(guards) + ("check",) * len(checks)
                       + ("premise",) * len(premises) + ("condition",) * len(conditions))


def no_verdict(v: Verdict) -> Verdict:
    """A smoke run's verdict: same numbers and criterion, the word 'smoke: no verdict'."""
    return replace(v, word=SMOKE, text=f"{v.text} (smoke run: checks the code runs; not evidence)")


def for_profile(v: Verdict, profile: str) -> Verdict:
    """The verdict to print and record under `profile`: smoke runs never carry a verdict word."""
    return no_verdict(v) if profile == "smoke" else v
