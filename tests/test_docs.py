"""The README and docs/ against their sources: a number or verdict written in them equals the one in
`reports/claims.json` or `benchmarks/notebook_times.json`, no test count is written down (it changes with every
test), the README stays a front door (<= 12 KB), and every relative link resolves. Each checker is tried on a
hand-made wrong text first, so that it can fail."""
import json
import re

import pytest

from gpolib import paths
from gpolib.lab import report
from gpolib.lab.verdicts import INCONCLUSIVE, NOT, NOT_RUN, NOT_TESTED, PARTLY, REPRODUCED

ROOT = paths.repo_root()
DOCS = ["README.md", "CONTRIBUTING.md"] + sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
WORDS = sorted((REPRODUCED, PARTLY, INCONCLUSIVE, NOT, NOT_TESTED, NOT_RUN), key=len, reverse=True)
"""the verdict vocabulary, longest first ('not reproduced' before 'reproduced')"""
README_LIMIT = 12 * 1024


def claims() -> dict:
    return {c["id"]: c for c in json.loads((ROOT / "reports" / "claims.json").read_text())}


def _text(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def _prose(text: str) -> str:
    """The text without fenced code."""
    return re.sub(r"```.*?```", "", text, flags=re.S)


def _verdict_in(cell: str):
    """The verdict word a table cell states (bold, alone), or None."""
    m = re.fullmatch(r"\*\*(.+)\*\*", cell.strip())
    return m[1] if m and m[1] in WORDS else None


def table_disagreements(text: str, by_id: dict) -> list:
    """Rows of markdown tables that name a claim id in a cell of their own and state a verdict or a headline number
    other than the claim's: its verdict word, and `report.headline` (whose numbers `ours`, the scoreboard's full
    text, must also hold, in the same unit)."""
    out = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        ids = [c for c in cells if c in by_id]
        if len(ids) != 1:
            continue
        c = by_id[ids[0]]
        for cell in cells:
            word = _verdict_in(cell)
            if word is not None and word != c["verdict"]:
                out.append(f"{ids[0]}: verdict {word!r}, claims.json {c['verdict']!r}")
            if re.match(r"[+-]?\d\S* \[\S+, \S+\]", cell):  # a number with its interval
                head = report.headline(c).replace("|", "\\|")
                if cell != head:
                    out.append(f"{ids[0]}: number {cell!r}, headline {head!r}")
                if cell.split(" [")[0] not in str(c.get("ours", "")):
                    out.append(f"{ids[0]}: number {cell.split(' [')[0]!r} is not in the scoreboard's text")
    return out


def prose_disagreements(text: str, by_id: dict) -> list:
    """Sentences (outside tables and code) that name exactly one claim id and one verdict word other than its."""
    out = []
    lines = [l for l in _prose(text).splitlines() if not l.startswith("|")]
    for sentence in re.split(r"(?<=[.;])\s+", " ".join(lines)):
        ids = sorted({i for i in re.findall(r"(?<![\w-])([A-Z]\d)(?![\w-])", sentence) if i in by_id})
        rest, words = sentence.replace(f"{PARTLY} {REPRODUCED}", PARTLY), []
        for w in WORDS:  # longest first, each taken out of the sentence once found
            pattern = rf"(?<![\w-]){w}(?![\w-])"
            if re.search(pattern, rest):
                words.append(w)
                rest = re.sub(pattern, "", rest)
        wrong = [w for w in words if w != by_id[ids[0]]["verdict"]] if len(ids) == 1 else []
        out += [f"{ids[0]}: {w!r} in {sentence[:120]!r}" for w in wrong]
    return out


def time_disagreements(text: str, times: dict) -> list:
    """Sentences that speak of notebooks recomputed and give a duration that is none of notebook_times.json's (a
    notebook's minutes, their sum in minutes or hours)."""
    each = {k: v["minutes"] for k, v in times.items() if k != "all"}
    known = {f"{m:.1f}" for m in each.values()} | {f"{sum(each.values()):.1f}", f"{sum(each.values()) / 60:.1f}"}
    known |= {f"{v['minutes']:.1f}" for k, v in times.items() if k == "all"}
    out = []
    body = re.sub(r"<!-- notebook-times -->.*?<!-- /notebook-times -->", "", _prose(text), flags=re.S)
    for sentence in re.split(r"(?<=[.;])\s+", " ".join(body.splitlines())):
        if "notebook" not in sentence.lower() or not re.search(r"recomput|from nothing|summed", sentence):
            continue  # only the notebooks' recomputation times have a source (benchmarks/notebook_time.py)
        found = re.findall(r"(\d+(?:\.\d+)?)(?:\s*-\s*(\d+(?:\.\d+)?))?\s*(?:min|h)\b", sentence)
        for number in [n for pair in found for n in pair if n]:  # both ends of a range
            if f"{float(number):.1f}" not in known:
                out.append(f"{number} in {sentence[:120]!r}")
    return out


def test_checkers_find_a_wrong_verdict_number_and_time():
    by_id = {"F1": {"id": "F1", "verdict": PARTLY, "ours": "ELR: mean +99.6%, 95% CI [+92.2%, +106.9%] over n=3",
                    "judgement": {"mean": 0.996, "interval": [0.922, 1.069],
                                  "text": "ELR: mean +99.6%, 95% CI [+92.2%, +106.9%] over n=3"}}}
    assert report.headline(by_id["F1"]) == "+99.6% [+92.2%, +106.9%] ELR"
    assert table_disagreements("| F1 | x | +99.6% [+92.2%, +106.9%] ELR | **partly** |", by_id) == []
    assert len(table_disagreements("| F1 | x | +1.00 [+0.92, +1.07] ELR | **partly** |", by_id)) == 2  # unit
    assert table_disagreements("| F1 | **reproduced** |", by_id) == ["F1: verdict 'reproduced', claims.json 'partly'"]
    assert prose_disagreements("F1 is partly reproduced. F1 is reproduced.", by_id) == [
        "F1: 'reproduced' in 'F1 is reproduced.'"]
    assert prose_disagreements("F1 is not reproduced; G1 and F1 are reproduced.", by_id)[0].startswith(
        "F1: 'not reproduced'")
    times = {"01": {"minutes": 11.6}, "02": {"minutes": 13.5}}
    assert time_disagreements("Notebook 01 recomputed takes 11.6 min, all notebooks 25.1 min (0.4 h) summed.", times) == []
    assert time_disagreements("Each notebook recomputed took 1.9-24.9 min.", times) == [
        "1.9 in 'Each notebook recomputed took 1.9-24.9 min.'", "24.9 in 'Each notebook recomputed took 1.9-24.9 min.'"]
    assert time_disagreements("A notebook cell times out after 15 min.", times) == []  # not a recomputation time


@pytest.mark.parametrize("name", DOCS)
def test_numbers_and_verdicts_agree_with_their_sources(name):
    by_id, text = claims(), _text(name)
    times = json.loads((ROOT / "benchmarks" / "notebook_times.json").read_text())
    assert table_disagreements(text, by_id) == []
    assert prose_disagreements(text, by_id) == []
    assert time_disagreements(text, times) == []


@pytest.mark.parametrize("name", DOCS + ["benchmarks/README.md"])
def test_no_test_count_is_written_down(name):
    """The count of tests changes with every commit; where it was written it disagreed with the suite."""
    assert re.findall(r"\b\d[\d,]*\s+(?:tests|passed|failed)\b", _text(name)) == []


def test_the_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_bytes()
    assert len(readme) <= README_LIMIT, f"README.md is {len(readme)} bytes; move detail into docs/"
    text = readme.decode()
    for cid in ("S1", "D2", "P3", "P4", "F1", "F2"):  # the four phenomena, each claim a row of one table
        assert re.search(rf"^\|[^\n]*\| {cid} \|", text, flags=re.M), cid
    for page in (ROOT / "docs").glob("*.md"):
        assert f"(docs/{page.name})" in text, f"README does not link docs/{page.name}"


@pytest.mark.parametrize("name", DOCS)
def test_relative_links_resolve(name):
    text, base = _prose(_text(name)), (ROOT / name).parent
    targets = re.findall(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)", text) + re.findall(r'(?:src|href)="([^"#]+)', text)
    missing = [t for t in targets if not re.match(r"[a-z]+:", t) and not (base / t).exists()]
    assert missing == []
    assert not re.search(r"/(?:work|tmp|root|home)/", text), "a path of this machine"
