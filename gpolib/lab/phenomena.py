"""The four phenomena the workbook exists to show, each in one sentence in its paper's terms, from the scoreboard.

The report page (`gpolib.workbook.index`) opens with them: per phenomenon one figure (`FIGURES`, by claim id) and
one sentence that puts our number beside the paper's and names the verdict. Every number is read from the claim's
record in `claims.json` (its evidence and judgement, written by the notebook's claim cell): nothing here is typed
in, and where a record does not hold the number yet the sentence says so and shows the judged headline instead.

- S1 (GSPO Sec. 2, notebook 02): the spread of a prefix's log ratio product, V(L), grows along a response.
- D2 (DAPO Sec. 3.2, Fig. 3b; notebooks 01/03): the share of all-correct groups rises as the policy improves.
- P3 (GSPO Sec. 5.3, notebook 08): the share of activated experts that change after an update.
- F1 (GFPO Eq. 4, notebook 05): the excess length reduction (ELR) of Shortest 4/24.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from . import dapo, gfpo, report

FIGURES = {"S1": "02_within_response.png", "D2": "01_d2_panel.png", "P3": "08_expert_change.png",
           "F1": "05_gfpo_elr.png"}
"""claim id -> the figure under reports/figures/ that shows the phenomenon (P3's is drawn by notebook 08's
per-update routing measure; until it exists the page says the figure is not drawn yet)"""


@dataclass(frozen=True)
class Phenomenon:
    """One of the four phenomena: the claim that judges it, its name in the paper's terms, how to read our number."""

    claim: str
    """claim id of the scoreboard whose figure and verdict lead the card"""
    claims: tuple
    """every claim of the phenomenon, in the README's table (the lead claim first)"""
    short: str
    """the phenomenon in a few words (the README table's first column)"""
    title: str
    """the phenomenon in the paper's terms, the sentence's subject"""
    ours: Callable[[dict], Optional[str]]
    """claim record -> our number in the paper's terms; None where the record does not hold it (yet)"""


def part(rec: dict, what: str) -> Optional[dict]:
    """The judgement part of a claim record whose text starts with `what` (the judging rule's quantity), or None."""
    return next((p for p in report.judged_parts(rec.get("judgement") or {}) if str(p.get("text", "")).startswith(what)),
                None)


def interval_words(p: Optional[dict], fmt: str, scale: float = 1.0, unit: str = "") -> str:
    """'+2.3 points (95% CI [-1.0, +5.7], n=3)' from a judgement part's mean and interval (times `scale`, `unit`
    after the mean); '' without them."""
    if p is None or p.get("mean") is None or not p.get("interval") or None in p["interval"]:
        return ""
    lo, hi = (scale * x for x in p["interval"])
    return (f"{format(scale * p['mean'], fmt)}{unit} ({round(100 * p.get('level', 0.95))}% CI "
            f"[{format(lo, fmt)}, {format(hi, fmt)}], n={p.get('n', '?')})")


def _mean(xs) -> float:
    return sum(xs) / len(xs)


def s1_ours(rec: dict) -> Optional[str]:
    """V(L_max) / V(20), seed mean, from the within-response evidence (V(L) per seed on L = 10..120)."""
    within = (rec.get("evidence") or {}).get("within")
    if not within:
        return None
    seeds = list(within.values())
    L = seeds[0]["L"]
    first, last = L.index(20) if 20 in L else 0, len(L) - 1
    growth = _mean([s["V"][last] / s["V"][first] for s in seeds])
    leave = [s.get("leave", {}).get(str(L[last])) for s in seeds]
    left = f"; {100 * _mean(leave):.1f}% of prefix products outside [0.5, 2] at L = {L[last]}" if None not in leave else ""
    return (f"V({L[last]})/V({L[first]}) = {growth:.1f} (mean of {len(seeds)} seeds){left}, while the prefix "
            "geometric mean's spread does not grow")


def d2_ours(rec: dict) -> Optional[str]:
    """The all-correct share of the fixed panel at its first and last step (seed means) and its judged rise."""
    e = rec.get("evidence") or {}
    if "panel_first" not in e or "panel_last" not in e:
        return None
    steps = e.get("panel_steps", ["first", "last"])
    rise = interval_words(part(rec, dapo.D2_RISE.what), "+.1f", scale=100, unit=" points")
    return (f"all-correct share of a fixed panel {100 * _mean(e['panel_first']):.1f}% -> "
            f"{100 * _mean(e['panel_last']):.1f}% from step {steps[0]} to {steps[-1]}"
            + (f", a rise of {rise}" if rise else ""))


def p3_ours(rec: dict) -> Optional[str]:
    """The share of activated experts that change per update, mean over layers, and at the deepest layer."""
    layers = (rec.get("evidence") or {}).get("expert_change_per_layer")
    if not layers:
        return None
    return (f"{100 * _mean(layers):.2f}% of activated experts change per update (mean over {len(layers)} layers; "
            f"deepest layer {100 * layers[-1]:.2f}%)")


def f1_ours(rec: dict) -> Optional[str]:
    """ELR of the arm F1 judges (Shortest 4/24), with its judged interval where the record has one."""
    values = ((rec.get("evidence") or {}).get("elr") or {}).get(gfpo.F1_ARM)
    if not values or None in values:
        return None
    judged = interval_words(part(rec, gfpo.F1_ELR.what), "+.1%")
    return f"ELR of Shortest 4/24 = {judged or f'{_mean(values):+.1%} (seed mean)'}"


PHENOMENA = (
    Phenomenon("S1", ("S1",), "token-ratio products (0.99^200)", "Token-ratio products compound along a response", s1_ours),
    Phenomenon("D2", ("D2",), "zero-variance groups", "All-correct groups grow as the policy improves, and their gradient vanishes", d2_ours),
    Phenomenon("P3", ("P3", "P4"), "MoE routing instability", "MoE routing is volatile: the experts a token activates change after each update", p3_ours),
    Phenomenon("F1", ("F1", "F2"), "length reduction", "Filtering the group to its shortest answers cuts the length GRPO adds", f1_ours),
)
"""the page's lead, in this order"""


def sentence(ph: Phenomenon, rec: dict, headline: str) -> str:
    """Our number in the paper's terms, or, where the record does not hold it, that it is missing and the judged
    headline (`report.headline`) instead."""
    ours = ph.ours(rec) if rec else None
    if ours is not None:
        return ours
    return "our number is not in the scoreboard yet" + (f" (judged so far: {headline})" if headline else "")
