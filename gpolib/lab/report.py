"""Claims scoreboard: one verdict per claim of DESIGN.md, from measured numbers.

A notebook's last cell calls `record(claim_id, evidence, runs, PROFILE)`, which prints the verdict and,
under it, its criterion. The claims' text (paper, evidence keys, and the criterion of claims without a
rule) is the table `claims.yaml`; each claim's verdict, a function from an evidence dict to a
`stats.Verdict` (or `(verdict, ours_text)` for the exact checks), sits beside its measurement in the
notebook's module (`VERDICTS` of grpo.py, ratio_decay.py, dapo.py, gspo.py, gspo_moe.py, gfpo.py, dr_grpo.py,
ppo_vapo.py, beyond.py, family_round2.py). The training claims are judged by the rules of evidence (`stats.py`), and their criterion is
the text of that rule (`RULES` of the module), so the scoreboard prints what the code applies. A smoke
run records "smoke: no verdict". `build(profile)` gathers the records into `claims.json` and `claims.md`.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import yaml

from .. import jsonio, paths
from ..folders import write_text
from . import beyond, dapo, dr_grpo, family_round2, gfpo, grpo, gspo, gspo_moe, history, ppo_vapo, ratio_decay, stats
from .verdicts import INCONCLUSIVE, NOT, NOT_RUN, NOT_TESTED, PARTLY, REPRODUCED  # noqa: F401  (the words, re-exported)

CLAIMS_FILE = Path(__file__).with_name("claims.yaml")


@dataclass(frozen=True)
class Claim:
    """One claim of DESIGN.md and how to judge it."""

    id: str
    """claim id used in notebooks, tests and the scoreboard"""
    paper: str
    """source paper"""
    section: str
    """section / equation / table in that paper"""
    claim: str
    """the claim in one line"""
    paper_number: str
    """the paper's own number or statement, short"""
    criterion: str
    """criterion at our scale"""
    notebook: str
    """notebook that measures it"""
    evidence: tuple[str, ...]
    """keys that `record` requires in the evidence dict"""
    judge: Callable[[dict], Any]
    """evidence -> stats.Verdict (or (verdict, ours_text)), from the notebook's module"""


_MODULES = (grpo, ratio_decay, dapo, gspo, gspo_moe, gfpo, dr_grpo, ppo_vapo, beyond, family_round2)
_WRITTEN = ("00_embedded_models", "01_grpo", "02_ratio_decay", "03_dapo", "04_gspo", "05_gfpo", "06_dr_grpo",
            "07_ppo_vapo", "08_gspo_moe", "09_beyond", "10_family_round2")
"""the notebooks that exist; a claim of another notebook is 'not yet run' until its module judges it"""


def _not_yet_run(e: dict) -> tuple:
    return NOT_RUN, "not yet run: its notebook is not written"


def _load_claims() -> dict[str, Claim]:
    verdicts = {k: v for m in _MODULES for k, v in m.VERDICTS.items()}
    rules = {k: v for m in _MODULES for k, v in getattr(m, "RULES", {}).items()}
    rows = yaml.safe_load(CLAIMS_FILE.read_text())
    verdicts.update({r["id"]: _not_yet_run for r in rows if r["notebook"] not in _WRITTEN})
    missing = sorted({r["id"] for r in rows} ^ set(verdicts))
    if missing:
        raise RuntimeError(f"claims without a verdict or verdicts without a claim: {missing}")
    twice = sorted(r["id"] for r in rows if ("criterion" in r) == (r["id"] in rules))
    if twice:
        raise RuntimeError(f"claims whose criterion is in both claims.yaml and a rule, or in neither: {twice}")
    return {r["id"]: Claim(**{**r, "section": str(r["section"]), "evidence": tuple(r["evidence"]),
                              "criterion": rules[r["id"]].criterion if r["id"] in rules else r["criterion"]},
                           judge=verdicts[r["id"]]) for r in rows}


CLAIMS: dict[str, Claim] = _load_claims()
"""claim id -> Claim, in scoreboard order"""


# ---------------------------------------------------------------- record and build

def _relative(run: str | Path, root: Path | str | None) -> str:
    """Run paths are stored relative to the repository root when they lie inside it."""
    if not Path(run).is_absolute():
        return str(run)
    base = Path(root) if root is not None else paths.repo_root()
    try:
        return str(Path(run).resolve().relative_to(base.resolve()))
    except ValueError:
        return str(run)


def judge(claim_id: str, evidence: dict) -> stats.Verdict:
    """Validate the id and evidence keys, then apply the claim's criterion; always a `stats.Verdict`."""
    if claim_id not in CLAIMS:
        raise ValueError(f"unknown claim id {claim_id!r}; known: {', '.join(CLAIMS)}")
    claim = CLAIMS[claim_id]
    missing = [k for k in claim.evidence if k not in evidence]
    if missing:
        raise ValueError(f"claim {claim_id}: evidence is missing {', '.join(missing)} (needs {', '.join(claim.evidence)})")
    plain = json.loads(jsonio.dumps(evidence))
    v = claim.judge(plain)
    if not isinstance(v, stats.Verdict):
        return stats.Verdict(v[0], v[1], claim.criterion)
    return v if v.criterion else replace(v, criterion=claim.criterion)


def record(claim_id: str, evidence: dict, runs: list[str], profile: str, root: Path | str | None = None,
           why: Optional[Mapping[str, str]] = None) -> dict:
    """Judge a claim, write `claims_dir(profile)/<id>.json`, print the verdict with its criterion under it,
    return the record. A smoke run records "smoke: no verdict" (`stats.for_profile`). `why`: reasons for
    evidence values that are NaN/inf (written as null, `jsonio`)."""
    v = stats.for_profile(judge(claim_id, evidence), profile)
    claim = CLAIMS[claim_id]
    numbers = {k: x for k, x in v.to_dict().items() if k not in ("word", "text", "criterion")}
    changes = history.of(claim_id)
    ours = f"{v.text}. {history.sentence(changes)}" if changes else v.text
    rec = {"id": claim_id, "verdict": v.word, "ours": ours, "paper": claim.paper_number,
           "paper_name": f"{claim.paper} {claim.section}", "claim": claim.claim,
           "criterion": v.criterion, "criterion_history": changes, "notebook": claim.notebook,
           "runs": [_relative(r, root) for r in runs],
           "evidence": evidence, **({"judgement": numbers} if numbers else {}), "profile": profile,
           "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    out = paths.claims_dir(profile, root) / f"{claim_id}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    text = jsonio.dumps(rec, indent=2, why=why) + "\n"
    if not _same_but_time(out, text):  # a rerun that changes nothing leaves the record (and its time) alone
        write_text(out, text)
    print(f"{claim_id} [{profile}]: {v.show()}")
    return json.loads(out.read_text())


def _same_but_time(path: Path, text: str) -> bool:
    """True if the record at `path` equals the record `text` in everything but its timestamp."""
    if not path.exists():
        return False
    try:
        old, new = jsonio.loads(path.read_text()), json.loads(text)
    except (ValueError, UnicodeDecodeError):  # a record cut short by a kill before writes were atomic: rewrite it
        return False
    old.pop("timestamp", None), new.pop("timestamp", None)
    return old == new


def _record(f: Path, claim) -> dict:
    """A claim's record, strictly parsed; one that does not parse is named with what rewrites it (UserError)."""
    from ..errors import UserError

    try:
        rec = jsonio.loads(f.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise UserError(f"{paths.relative(f)} does not parse ({err}); rerun notebook {claim.notebook} to rewrite "
                        "it, or restore it from git") from None
    if not isinstance(rec, dict):
        raise UserError(f"{paths.relative(f)} is not a claim record (a JSON {type(rec).__name__}); rerun notebook "
                        f"{claim.notebook} to rewrite it, or restore it from git")
    return rec


def collect(profile: str = "full", root: Path | str | None = None) -> list[dict]:
    """One entry per registry claim, in order; claims without a record are 'not yet run'."""
    folder, rows = paths.claims_dir(profile, root), []
    for cid, claim in CLAIMS.items():
        f = folder / f"{cid}.json"
        rec = _record(f, claim) if f.exists() else {
            "id": cid, "verdict": NOT_RUN, "ours": "", "paper": claim.paper_number,
            "criterion": claim.criterion, "notebook": claim.notebook, "runs": []}
        rec["criterion_history"] = history.of(cid)  # the one source, also for records written before it existed
        rows.append({**rec, "paper_name": f"{claim.paper} {claim.section}", "claim": claim.claim})
    return rows


def judged_parts(p: dict) -> list:
    """The judged parts of a judgement, depth first (the judgement itself first)."""
    return [p] + [q for sub in p.get("parts", []) for q in judged_parts(sub)]


def _decimals(lo: float, hi: float) -> int:
    """Decimals that show an interval's width to two digits (at least one)."""
    return max(1, 1 - math.floor(math.log10(hi - lo))) if hi > lo else 3


_AS_WRITTEN = re.compile(r": mean (\S+), 95% CI \[(\S+), (\S+)\]")
"""a judged part's mean and interval as its text writes them (in the measure's own unit: '+99.6%', '+0.107')"""


def headline(rec: dict) -> str:
    """Our headline number, short: the first judged mean (or slope) with its interval, number first
    ('+0.107 [+0.091, +0.123] held-out accuracy (T = 1), GRPO - base'), the numbers as the part's text writes
    them (so in the measure's unit: ELR in percent) or, where the text does not, to two digits of the interval's
    width; else the first judged part's text (a premise or condition is never the headline) with its per-seed
    numbers first; else the record's `ours`. A check's number is never the headline, and a claim not yet run has
    none ('')."""
    if rec.get("verdict") == NOT_RUN:  # a not-yet-run claim's numbers are checks or reported beside: no headline
        return ""
    parts = judged_parts({**(rec.get("judgement") or {}), "text": str(rec.get("ours", ""))})
    for p in parts:
        centre = p.get("mean", p.get("slope"))
        if p.get("role") == "check":  # a check's number is printed, never a headline
            continue
        if centre is not None and p.get("interval") and None not in p["interval"]:
            what = p["text"].split(": mean ")[0].split(": ")[0]
            written = _AS_WRITTEN.search(p["text"])
            if written:
                return f"{written[1]} [{written[2]}, {written[3]}] {what}".strip()
            lo, hi = p["interval"]
            d = _decimals(lo, hi)
            return f"{centre:+.{d}f} [{lo:+.{d}f}, {hi:+.{d}f}] {what}".strip()
    judged = [q for q in parts[1:] if q.get("role", "part") == "part"]  # a premise or condition is not the headline
    text = judged[0]["text"] if judged else parts[1]["text"] if len(parts) > 1 else parts[0]["text"]
    what, sep, numbers = text.partition(" per seed: ")
    return f"{numbers} {what}" if sep else text


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def scoreboard_markdown(profile: str = "full", root: Path | str | None = None) -> str:
    """The scoreboard as a markdown table, every field in full (reports/claims.md)."""
    head = "| id | paper | claim | paper's number | ours | criterion | verdict | notebook |"
    lines = [head, "|" + "---|" * 8]
    for r in collect(profile, root):
        cells = [r["id"], r["paper_name"], r["claim"], r["paper"], r["ours"], r["criterion"],
                 f"**{r['verdict']}**", f"{r['notebook']}.ipynb"]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _write_if_changed(path: Path, text: str) -> bool:
    """Write `text` unless the file already holds it; True if it was written."""
    if path.exists() and path.read_text() == text:
        return False
    write_text(path, text)
    return True


def build(profile: str = "full", root: Path | str | None = None) -> list:
    """Write `claims.json` and `claims.md` into `reports_dir(profile)` where their content changed; returns
    the names of the files written (empty: the scoreboard on disk was current)."""
    out = paths.reports_dir(profile, root)
    out.mkdir(parents=True, exist_ok=True)
    rows = collect(profile, root)
    note = ("\n> Smoke profile: tiny budgets that check the code runs; these numbers are "
            "not a replication.\n" if profile == "smoke" else "")
    texts = {"claims.json": jsonio.dumps(rows, indent=2) + "\n",
             "claims.md": f"# Claims scoreboard ({profile} profile)\n{note}\n" + scoreboard_markdown(profile, root)}
    return [name for name, text in texts.items() if _write_if_changed(out / name, text)]
