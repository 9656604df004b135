"""Verdicts that claim no more than the runs decide (issue 48, DESIGN "Verdict words"): the committed records follow the
vocabulary for typed parts, equivalence and inconclusive words are computed in one place, criterion histories are kept
for good."""
import ast
import json
from pathlib import Path

import pytest

from gpolib.lab import history, report, stats

ROOT = Path(__file__).resolve().parents[1]
DECIDERS = {"stats.py", "equivalence.py", "verdicts.py"}
"""the only lab modules that may decide 'inconclusive' or 'equivalent'"""


def _word_from_roles(rec: dict) -> set:
    """The words DESIGN's vocabulary allows for a combined judgement, from its parts' words and roles."""
    parts = rec["judgement"].get("parts", [])
    emp = [p["word"] for p in parts if p.get("role") in ("part", "guard")]
    main = [p["word"] for p in parts if p.get("role") == "part"]
    checks = [p["word"] for p in parts if p.get("role") == "check"]
    gated = [p["word"] for p in parts if p.get("role") in ("premise", "condition")]
    if any(w != stats.REPRODUCED for w in gated):
        return {stats.NOT_TESTED, stats.NOT, stats.INCONCLUSIVE}
    if any(w != stats.REPRODUCED for w in checks):
        return {stats.NOT}
    if all(w == stats.REPRODUCED for w in emp):
        return {stats.REPRODUCED}
    if any(w == stats.REPRODUCED for w in main) and len(emp) > 1:
        return {stats.PARTLY}
    return {stats.NOT if stats.NOT in main else stats.INCONCLUSIVE}


RECORDS = sorted((ROOT / "reports" / "claims").glob("*.json"))


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem for p in RECORDS])
def test_committed_words_follow_the_typed_parts(path):
    rec = json.loads(path.read_text())
    assert rec["verdict"] in stats.WORDS
    parts = rec.get("judgement", {}).get("parts", [])
    if not parts or not all("role" in p for p in parts) or rec["verdict"] == stats.NOT_RUN:
        return
    assert rec["verdict"] in _word_from_roles(rec), (rec["id"], [(p["role"], p["word"]) for p in parts])


def test_the_rule_catches_partly_from_a_check_alone():
    """The test above fails for a record whose 'partly' rests on a check (the review's D2, D4, P5)."""
    rec = {"verdict": stats.PARTLY, "judgement": {"parts": [{"word": stats.INCONCLUSIVE, "role": "part"},
                                                           {"word": stats.REPRODUCED, "role": "check"}]}}
    assert rec["verdict"] not in _word_from_roles(rec)
    guard = {"verdict": stats.PARTLY, "judgement": {"parts": [{"word": stats.NOT, "role": "part"},
                                                             {"word": stats.REPRODUCED, "role": "guard"}]}}
    assert guard["verdict"] not in _word_from_roles(guard)


def _hand_made_nulls(tree: ast.AST) -> list:
    """String constants that write an equivalence or inconclusive decision, and Verdict(...) calls whose word is
    INCONCLUSIVE: a decision made outside the rules."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if "equivalent within" in node.value or node.value.strip() == "inconclusive":
                found.append((node.lineno, node.value[:40]))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "Verdict":
            first = node.args[0] if node.args else None
            if first is not None and getattr(first, "attr", getattr(first, "id", None)) == "INCONCLUSIVE":
                found.append((node.lineno, "Verdict(INCONCLUSIVE, ...)"))
    return found


def test_nulls_are_decided_only_by_the_rules():
    lab = ROOT / "gpolib" / "lab"
    offenders = {f.name: _hand_made_nulls(ast.parse(f.read_text())) for f in lab.glob("*.py")
                 if f.name not in DECIDERS}
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        cells = json.loads(nb.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        offenders[nb.name] = _hand_made_nulls(ast.parse("\n".join(
            line for line in code.splitlines() if not line.lstrip().startswith(("%", "!")))))
    assert {k: v for k, v in offenders.items() if v} == {}
    # the check itself can fail
    assert _hand_made_nulls(ast.parse("v = Verdict(INCONCLUSIVE, 'x', '')\nw = 'equivalent within +-0.03'"))


def test_criterion_history_is_complete_and_single():
    for cid in ("S1", "D2", "P3", "P4", "F1", "F2"):  # DESIGN: changed 2026-12-02
        assert history.of(cid) and history.of(cid)[0]["until"] == "2026-12-02"
    rows = {r["id"]: r for r in json.loads((ROOT / "reports" / "claims.json").read_text())}
    for cid, entries in history.HISTORY.items():
        assert rows[cid]["criterion_history"] == entries
        if rows[cid]["verdict"] != stats.NOT_RUN or rows[cid]["ours"]:
            assert rows[cid]["ours"].endswith("each with the verdict it gave in criterion_history)."), cid
    assert all(set(e) == set(history.FIELDS) for v in history.HISTORY.values() for e in v)


def test_a_repeated_claim_id_in_the_history_is_refused(tmp_path):
    f = tmp_path / "h.yaml"
    entry = '  - {criterion: a, until: "2026-12-02", commit: x, verdict: y, why: z}\n'
    f.write_text("D1:\n" + entry + "D1:\n" + entry)
    with pytest.raises(ValueError, match="listed twice"):
        history.load(f)


def test_precision_seeds_are_committed_as_the_records_ask():
    """DESIGN's precision rule: the seeds each inconclusive comparison asks are written into full.yaml (section
    `precision`, `python -m gpolib.lab.precision --write`) before its seeds run, and kept there once written."""
    from gpolib.lab import precision
    from gpolib.workbook.workbook import load_params_file

    committed = load_params_file(ROOT / "notebooks" / "params" / "full.yaml").get(precision.SECTION)
    now = precision.table(ROOT / "reports" / "claims")
    listed = {(r["claim"], r["comparison"]) for v in committed.values() for r in v}
    assert {(r["claim"], r["comparison"]) for v in now.values() for r in v} <= listed  # every open one committed
    assert precision.merged(committed, now) == committed  # so `--write` would change nothing
    rows = [r for v in committed.values() for r in v]
    assert rows and all(r["seeds"] is None or r["seeds"] >= 3 for r in rows)
    assert all(r["at_most_8"] == (r["seeds"] is not None and r["seeds"] <= 8) for r in rows)


def test_precision_reads_a_claim_judged_by_one_comparison(tmp_path):
    """A record whose judgement is one comparison (no parts, no word or text of its own, as C7's) is listed under its
    claim's verdict and result: n = 17 for sd 0.0283 at delta 0.03 (t(0.975, 16) 0.0283 / sqrt(17) = 0.01456 <= 0.015;
    at n = 16, 2.131 x 0.0283 / 4 = 0.01508 > 0.015)."""
    import json
    from gpolib.lab import precision
    eq = {"delta": 0.03, "line": -0.03, "interval90": [-0.039, 0.056], "equivalent": False, "sd": 0.0283, "df": 2,
          "precision_seeds": 17}
    rec = {"id": "C7", "notebook": "10_family_round2", "verdict": "inconclusive",
           "ours": "held-out accuracy, top 20% - all: mean +0.008", "judgement": {"mean": 0.008, "equivalence": eq}}
    (tmp_path / "C7.json").write_text(json.dumps(rec))
    assert precision.table(tmp_path) == {"10": [{"claim": "C7", "comparison": "held-out accuracy, top 20% - all",
                                                 "sd": 0.0283, "df": 2, "delta": 0.03, "seeds": 17,
                                                 "at_most_8": False}]}
    (tmp_path / "C7.json").write_text(json.dumps({**rec, "verdict": "reproduced"}))
    assert precision.table(tmp_path) == {}
