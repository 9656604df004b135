"""reports/index.html in a real headless Chromium (gpolib/workbook/index.py, gpolib/workbook/browser.py): the page renders,
every image loads, every link (and the notebook section it points to) resolves, a broken one is caught; the four
phenomena sit above the scoreboard, no scoreboard cell is cut off, every figure is shown near its own size, nothing
scrolls sideways at 1280 px. Without a browser: the README's screenshot shows the committed scoreboard (its PNG text chunk
holds the scoreboard's hash, gpolib/workbook/screenshot.py), and a stale one is caught.

Where no Chromium is found and `make test` cannot install one (no apt-get, or apt-get only with a password), the
tests that need it are reported as not run, with how to get it (the one skip of the suite, docs/development.md); where
apt-get works (CI), a missing Chromium fails them."""
import hashlib
import json
import shutil
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import pytest
from PIL import Image

from gpolib.lab import phenomena
from gpolib.workbook import browser, index, screenshot

matplotlib.use("Agg")


def _why_not_run():
    """None where the browser tests must run; else the reason they cannot (no Chromium, none installable)."""
    try:
        browser.find_chromium()
    except FileNotFoundError as err:
        return None if browser.can_install() else f"not run: {err}"
    return None


needs_chromium = pytest.mark.skipif(_why_not_run() is not None, reason=str(_why_not_run()))
ROOT = Path(__file__).resolve().parents[1]
CLAIMS = [
    {"id": "G1", "verdict": "reproduced", "ours": "held-out accuracy 0.69 -> 0.86 " * 12, "paper": "82.9 -> 88.2", "paper_name": "DeepSeekMath 4.1",
     "claim": "GRPO improves", "criterion": "rises >= 5 points", "notebook": "01_x", "runs": ["a", "b"]},
    {"id": "S1", "verdict": "partly", "ours": "slope 7.98e-03", "paper": "0.134", "paper_name": "GSPO",
     "claim": "ratios decay <&>", "criterion": "slope > 0", "notebook": "01_x",
     "evidence": {"within": {"0": {"L": [10, 20, 120], "V": [1.0, 2.0, 7.0]}}}},
    {"id": "D1", "verdict": "not yet run", "ours": "", "paper": "pi < 0.2", "paper_name": "DAPO 3.1",
     "claim": "Clip-Higher", "criterion": "entropy higher " * 40, "notebook": "03_missing"},
]
NOTEBOOK_HTML = ('<html><body><h1 id="01-%C2%B7-x">01 \u00b7 x</h1><h2 id="S1-%C2%B7-ratios">S1</h2>'
                 '<h2 id="Verdicts">Verdicts</h2></body></html>')


def _png(path: Path, width: float) -> None:
    fig = plt.figure(figsize=(width, 1.0), dpi=100)
    fig.savefig(path)
    plt.close(fig)


@pytest.fixture
def site(tmp_path):
    reports = tmp_path / "reports"
    (reports / "figures").mkdir(parents=True)
    (reports / "html").mkdir()
    (reports / "claims.json").write_text(json.dumps(CLAIMS))
    (reports / "claims.md").write_text("# claims\n")
    (reports / "html" / "01_x.html").write_text(NOTEBOOK_HTML)
    for name, width in (("a.png", 3.0), ("b.png", 2.0), (phenomena.FIGURES["S1"], 4.0)):
        _png(reports / "figures" / name, width)
    shutil.copy(reports / "figures" / "a.png", reports / "figures" / "index_screenshot.png")  # left off the page
    return tmp_path


def _board(page) -> list:
    """[(id, claim, verdict word, its colour)] of the scoreboard's lines."""
    return page.evaluate("Array.from(document.querySelectorAll('.board details.claim')).map(d => [d.id, "
                         "d.querySelector('.claim').textContent, d.querySelector('.verdict').textContent, "
                         "getComputedStyle(d.querySelector('.verdict')).color])")


def _assert_glanceable(lay: dict) -> None:
    """The four phenomena above the scoreboard; no scoreboard cell cut off (they wrap); every card's figure shown at
    >= 70% of its own width and every gallery figure at >= 55% (multi-panel ones span the row); no horizontal
    scroll."""
    assert [p["id"] for p in lay["phenomena"]] == [f"phenomenon-{ph.claim}" for ph in phenomena.PHENOMENA]
    assert max(p["bottom"] for p in lay["phenomena"]) < lay["board_top"]
    closed = [r for r in lay["rows"] if not r["open"]]
    assert closed and all(r["clipped"] == 0 for r in closed), closed
    small = [s for s in lay["scale"] if s["shown"] < (0.7 if s["where"] == "card" else 0.55)]
    assert lay["scale"] and small == [], small
    assert lay["scroll_width"] <= lay["width"] <= 1280


@needs_chromium
def test_page_renders_with_every_image_and_link(site):
    page_file = index.build("full", root=site)
    reports = site / "reports"
    with browser.open_page() as page:
        page.goto(page_file.as_uri())
        inv, lay, board = browser.inventory(page), browser.layout(page), _board(page)
        captions = page.evaluate("Array.from(document.querySelectorAll('.phenomenon figcaption')).map(f => f.textContent)")
        shot = page.screenshot(site / "shot.png")
    assert inv["title"] == "gpolib workbook · full" and inv["rows"] == 3
    embedded = [i for i in inv["images"] if i["src"].startswith("data:image/png;base64,")]
    assert [i["width"] for i in embedded] == [400]  # S1's figure in the file itself; D2, P3, F1: not drawn
    assert [(Path(i["src"]).name, i["width"]) for i in inv["images"] if i not in embedded] == [
        (phenomena.FIGURES["S1"], 400), ("a.png", 300), ("b.png", 200)]  # the gallery, by name
    assert board == [["claim-G1", "GRPO improves", "reproduced", "rgb(46, 125, 50)"],
                     ["claim-S1", "ratios decay <&>", "partly", "rgb(230, 81, 0)"],  # escaped in the HTML, shown as written
                     ["claim-D1", "Clip-Higher", "not yet run", "rgb(117, 117, 117)"]]  # VERDICT_COLOURS
    assert captions[0].startswith("Token-ratio products compound along a response: ours: slope 7.98e-03; paper: 0.134")
    assert "paper: 0.134 — partly (S1)" in captions[0] and "our number is not in the scoreboard yet" in captions[1]
    targets = sorted({h[len("file://"):].replace(str(reports) + "/", "") for h in inv["links"]})
    assert [t for t in targets if "index.html" not in t] == [
        "claims.json", "claims.md", f"figures/{phenomena.FIGURES['S1']}", "figures/a.png", "figures/b.png",
        "html/01_x.html", "html/01_x.html#S1-%C2%B7-ratios", "html/01_x.html#Verdicts"]  # G1: no G1 heading
    assert browser.problems(inv) == []  # 03_missing has no HTML: named, not linked
    _assert_glanceable(lay)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


@needs_chromium
def test_a_line_opens_to_its_evidence_and_criterion(site):
    with browser.open_page() as page:
        page.goto(index.build("full", root=site).as_uri())
        before = browser.layout(page)
        page.evaluate("document.getElementById('claim-D1').querySelector('summary').click()")
        after = browser.layout(page)
        text = page.evaluate("document.querySelector('#claim-D1 .more').textContent")
    rows = {r["id"]: r for r in after["rows"]}
    assert rows["claim-D1"]["open"] and rows["claim-D1"]["height"] > 3 * before["rows"][2]["height"]
    assert "criterion entropy higher" in text and "computed in 03_missing (its HTML is not in this folder)" in text
    assert after["scroll_width"] <= after["width"]  # the long criterion wraps


@needs_chromium
def test_a_broken_image_or_link_is_reported(site):
    page_file = index.build("full", root=site)
    reports = site / "reports"
    (reports / "figures" / "b.png").unlink()
    (reports / "html" / "01_x.html").write_text("<html><body>no sections</body></html>")
    inv, found = browser.check(page_file)
    b, nb = (reports / "figures" / "b.png").as_uri(), (reports / "html" / "01_x.html").as_uri()
    assert sorted(found) == sorted([f"image did not load: {b}", f"broken link: {b}",
                                    f"link to a missing section: {nb}#S1-%C2%B7-ratios",
                                    f"link to a missing section: {nb}#Verdicts"])


@needs_chromium
def test_committed_report_page_is_whole_and_glanceable(tmp_path):
    page_file = ROOT / "reports" / "index.html"
    claims = json.loads((ROOT / "reports" / "claims.json").read_text())
    figures = [p for p in (ROOT / "reports" / "figures").glob("*.png") if not p.name.startswith("index_")]
    drawn = [c for c, name in phenomena.FIGURES.items() if (ROOT / "reports" / "figures" / name).exists()]
    with browser.open_page() as page:
        page.goto(page_file.as_uri())
        inv, lay = browser.inventory(page), browser.layout(page)
    assert browser.problems(inv) == []
    stale = "reports/index.html is older than the reports: python -m gpolib.workbook.index (the workbook runner does it)"
    assert inv["rows"] == len(claims) and len(inv["images"]) == len(figures) + len(drawn), stale
    assert [p["images"] for p in lay["phenomena"]] == [int(ph.claim in drawn) for ph in phenomena.PHENOMENA], stale
    _assert_glanceable(lay)


def test_a_figure_spans_the_gallery_columns_that_keep_it_legible(tmp_path):
    assert [index.span(w) for w in (300, 513, 514, 1000, 1026, 1027, 1990)] == [1, 1, 2, 2, 2, 3, 3]
    _png(tmp_path / "w.png", 12.5)
    assert index.png_width(tmp_path / "w.png") == 1250 and index.png_width(tmp_path / "missing.png") == 0
    assert 'class="span3"' in index.figures_html(["w.png"], {"w.png": 1250})


def test_readme_shows_a_screenshot_of_the_committed_scoreboard():
    assert f"![the report page](reports/figures/{screenshot.NAME})" in (ROOT / "README.md").read_text()
    assert screenshot.stale("full") is None, "retake it: python -m gpolib.workbook.index full"


def test_a_screenshot_older_than_its_scoreboard_is_stale(tmp_path):
    reports = tmp_path / "reports"
    (reports / "figures").mkdir(parents=True)
    assert screenshot.stale("full", tmp_path) == "index_screenshot.png is missing"
    _png(screenshot.path("full", tmp_path), 2.0)
    assert "no gpolib:scoreboard-sha256 text chunk" in screenshot.stale("full", tmp_path)
    (reports / "claims.json").write_text("[1]\n")
    shot = screenshot.path("full", tmp_path)
    shot.write_bytes(screenshot.with_text(shot.read_bytes(), screenshot.KEY, screenshot.scoreboard_hash("full", tmp_path)))
    assert screenshot.stale("full", tmp_path) is None
    (reports / "claims.json").write_text("[2]\n")  # the scoreboard moved on, the screenshot did not
    one, two = (hashlib.sha256(b).hexdigest()[:12] for b in (b"[1]\n", b"[2]\n"))
    assert screenshot.stale("full", tmp_path) == f"index_screenshot.png shows scoreboard {one}, claims.json is {two}"


def test_the_mark_is_a_valid_png_text_chunk(tmp_path):
    _png(tmp_path / "a.png", 2.0)
    png = screenshot.with_text((tmp_path / "a.png").read_bytes(), screenshot.KEY, "old")
    png = screenshot.with_text(png, screenshot.KEY, "abc123")  # replaces, never duplicates
    (tmp_path / "b.png").write_bytes(png)
    with Image.open(tmp_path / "b.png") as im:
        im.load()  # PIL checks every chunk's CRC
        assert im.text[screenshot.KEY] == "abc123" and im.size == (200, 100)
    assert list(screenshot.texts(png)).count(screenshot.KEY) == 1
    with pytest.raises(ValueError, match="not a PNG"):
        screenshot.texts(b"GIF89a")


def test_section_anchor_names_the_claim_else_the_verdicts():
    assert index.section_anchor(NOTEBOOK_HTML, "S1") == ("S1-%C2%B7-ratios", "S1 · ratios")
    assert index.section_anchor(NOTEBOOK_HTML, "S10") == ("Verdicts", "Verdicts")  # S1 is not S10
    assert index.section_anchor("<h2 id='x'>x</h2>", "S1") is None


def test_the_workbook_runner_rebuilds_the_page(tmp_path, capsys):
    from gpolib.workbook import workbook

    (tmp_path / "reports" / "smoke" / "html").mkdir(parents=True)
    (tmp_path / "reports" / "smoke" / "html" / "90_objectives_explorer.html").write_text("<html></html>")
    workbook._report("smoke", tmp_path, {})
    text = (tmp_path / "reports" / "smoke" / "index.html").read_text()
    claims = json.loads((tmp_path / "reports" / "smoke" / "claims.json").read_text())
    assert text.count('<details class="claim"') == len(claims) > 0 and 'href="html/90_objectives_explorer.html"' in text
    out = capsys.readouterr().out
    assert "report page:" in out and "screenshot:" not in out  # README shows the full profile's page only


def test_the_runner_retakes_the_full_screenshot_or_says_why_not(tmp_path, capsys, monkeypatch):
    from gpolib.workbook import workbook

    def missing():
        raise FileNotFoundError("no Chromium on PATH")

    monkeypatch.setattr(browser, "find_chromium", missing)
    workbook._report("full", tmp_path, {})
    assert "screenshot: not retaken (no Chromium on PATH)" in capsys.readouterr().out


def _executable(folder: Path, name: str) -> Path:
    exe = folder / name
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return exe


def test_chromium_from_the_variable_then_path(tmp_path, monkeypatch):
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv(browser.ENV, raising=False)
    with pytest.raises(FileNotFoundError, match=r"no Chromium on PATH .*or set GPOLIB_CHROMIUM to its executable"):
        browser.find_chromium()
    on_path = _executable(tmp_path / "bin", "chromium-browser")
    assert browser.find_chromium() == str(on_path)
    given = _executable(tmp_path, "my-chrome")
    monkeypatch.setenv(browser.ENV, str(given))
    assert browser.find_chromium() == str(given)  # the variable wins over PATH
    monkeypatch.setenv(browser.ENV, str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError, match=r"GPOLIB_CHROMIUM=.*absent is not an executable; install Chromium"):
        browser.find_chromium()


def test_chromium_is_installable_with_apt_get_as_root_or_a_passwordless_sudo(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(browser.os, "geteuid", lambda: 0)
    assert browser.can_install() is False  # no apt-get
    _executable(tmp_path, "apt-get")
    assert browser.can_install() is True  # root
    monkeypatch.setattr(browser.os, "geteuid", lambda: 1000)
    assert browser.can_install() is False  # no sudo
    sudo = _executable(tmp_path, "sudo")
    sudo.write_text("#!/bin/sh\nexit 1\n")  # `sudo -n true` fails: it would ask a password
    assert browser.can_install() is False
    sudo.write_text("#!/bin/sh\nexit 0\n")
    assert browser.can_install() is True
