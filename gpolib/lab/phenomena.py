"""The four phenomena the workbook exists to show, each in one sentence in its paper's terms, from the scoreboard.

The report page (`gpolib.workbook.index`) opens with them: per phenomenon one figure (`FIGURES`, by claim id) and
one sentence that leads with the scoreboard's headline number (`report.headline`, the same number in the same unit
as the scoreboard, the README and docs/claims.md), then, where it helps, the context in the paper's terms, read from
the claim's record in `claims.json` in the unit its scoreboard text uses: nothing here is typed in.

- S1 (GSPO Sec. 2, notebook 02): how many 200-token ratio products leave [0.5, 2] as the update goes off-policy (mu).
- D2 (DAPO Sec. 3.2, Fig. 3b; notebooks 01/03): the share of all-correct groups rises as the policy improves.
- P3 (GSPO Sec. 5.3, notebook 08): the share of activated experts that change after an update.
- F1 (GFPO Eq. 4, notebook 05): the excess length reduction (ELR) of Shortest 4/24.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Optional


FIGURES = {"S1": "02_ratio_grid.png", "D2": "01_d2_panel.png", "P3": "08_p3_grid.png",
           "F1": "05_gfpo_elr.png"}
"""claim id -> the figure under reports/figures/ that shows the phenomenon: S1's and P3's are curves over the knob
that drives them (mu and lr; lr, training mode and mu: notebook 02's and notebook 08's grids); until a figure exists
the page says it is not drawn yet"""


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
    """claim record -> context in the paper's terms, after the headline; None where there is none (yet)"""


def _mean(xs) -> float:
    return sum(xs) / len(xs)


def s1_ours(rec: dict) -> Optional[str]:
    """On the mu x lr grid (DESIGN 2026-12-06): the share of 200-token prefix products outside [0.5, 2] at the
    smallest and largest mu, per lr scale, beside the length at which 0.99^L leaves that band. A record of the mu = 4
    design: per seed, the share at the longest prefix measured."""
    band = math.ceil(math.log(0.5) / math.log(0.99))
    cells = (rec.get("evidence") or {}).get("cells")
    if cells:
        by_lr: dict = {}
        for c in sorted(cells, key=lambda c: c["mu"]):
            by_lr.setdefault(c["lr x"], []).append(c)
        parts = [f"{100 * cs[0]['out@200']:.1f}% at mu = {cs[0]['mu']} -> {100 * cs[-1]['out@200']:.1f}% at mu = "
                 f"{cs[-1]['mu']} (lr x {x:g})" for x, cs in by_lr.items()]
        return (f"200-token prefix products outside [0.5, 2]: {'; '.join(parts)} (0.99^L leaves the band at "
                f"L = {band})")
    within = (rec.get("evidence") or {}).get("within")
    if not within:
        return None
    seeds = list(within.values())
    L = seeds[0]["L"][-1]
    leave = [s.get("leave", {}).get(str(L)) for s in seeds]
    if None in leave:
        return None
    return (f"prefix products outside [0.5, 2] at L = {L}: {', '.join(f'{100 * v:.1f}%' for v in leave)} per seed "
            f"(0.99^L leaves the band at L = {band})")


def d2_ours(rec: dict) -> Optional[str]:
    """The all-correct share of the fixed panel at its first and last step (seed means), a share as the scoreboard
    writes it."""
    e = rec.get("evidence") or {}
    if "panel_first" not in e or "panel_last" not in e:
        return None
    steps = e.get("panel_steps", ["first", "last"])
    return (f"all-correct share of the fixed panel {_mean(e['panel_first']):.3f} -> {_mean(e['panel_last']):.3f} "
            f"from step {steps[0]} to {steps[-1]}")


def p3_ours(rec: dict) -> Optional[str]:
    """The share of activated experts that change per update, mean over layers, and at the deepest layer."""
    layers = (rec.get("evidence") or {}).get("expert_change_per_layer")
    if not layers:
        return None
    return (f"{100 * _mean(layers):.2f}% of activated experts change per update (mean over {len(layers)} layers; "
            f"deepest layer {100 * layers[-1]:.2f}%)")


def f1_ours(rec: dict) -> Optional[str]:
    """The ELR of every arm as the scoreboard writes them (F1's headline is Shortest 4/24's, in percent)."""
    per_arm = re.search(r"ELR per arm: (.*?)(?:\. [A-Z]|\.?$)", str(rec.get("ours", "")))
    return f"ELR per arm: {per_arm[1]}" if per_arm else None


PHENOMENA = (
    Phenomenon("S1", ("S1",), "token-ratio products (0.99^200)",
               "Token-ratio products compound along a response", s1_ours),
    Phenomenon("D2", ("D2",), "zero-variance groups",
               "All-correct groups grow as the policy improves, and their gradient vanishes", d2_ours),
    Phenomenon("P3", ("P3", "P4"), "MoE routing instability",
               "MoE routing is volatile: the experts a token activates change after each update", p3_ours),
    Phenomenon("F1", ("F1", "F2"), "length reduction",
               "Filtering the group to its shortest answers cuts the length GRPO adds", f1_ours),
)
"""the page's lead, in this order"""


def sentence(ph: Phenomenon, rec: dict, headline: str) -> str:
    """'ours: <the scoreboard's headline>', then the phenomenon's context where the record holds it; where the
    record holds no number yet, says so."""
    if not headline:
        return "our number is not in the scoreboard yet"
    context = ph.ours(rec) if rec else None
    return f"ours: {headline}" + (f"; {context}" if context else "")
