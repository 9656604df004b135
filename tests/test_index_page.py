"""reports/index.html in a real headless Chromium (gpolib/workbook/index.py, gpolib/workbook/browser.py): the page renders,
every image loads, every link resolves, a broken one is caught, a screenshot is written.

Where no Chromium is found and `make test` cannot install one (no apt-get, or apt-get only with a password), the
tests that need it are reported as not run, with how to get it (the one skip of the suite, README "Tests"); where
apt-get works (CI), a missing Chromium fails them."""
import json
import shutil
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import pytest

from gpolib.workbook import browser, index

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
    {"id": "G1", "verdict": "reproduced", "ours": "0.69 -> 0.86", "paper": "82.9 -> 88.2", "paper_name": "DeepSeekMath 4.1",
     "claim": "GRPO improves", "criterion": "rises >= 5 points", "notebook": "01_x"},
    {"id": "S1", "verdict": "partly", "ours": "slope 7.98e-03", "paper": "0.134", "paper_name": "GSPO",
     "claim": "ratios decay <&>", "criterion": "slope > 0", "notebook": "01_x"},
    {"id": "D1", "verdict": "not yet run", "ours": "", "paper": "pi < 0.2", "paper_name": "DAPO 3.1",
     "claim": "Clip-Higher", "criterion": "entropy higher", "notebook": "03_missing"},
]


@pytest.fixture
def site(tmp_path):
    reports = tmp_path / "reports"
    (reports / "figures").mkdir(parents=True)
    (reports / "html").mkdir()
    (reports / "claims.json").write_text(json.dumps(CLAIMS))
    (reports / "claims.md").write_text("# claims\n")
    (reports / "html" / "01_x.html").write_text("<html><body>notebook</body></html>")
    for name, width in (("a.png", 3.0), ("b.png", 2.0)):
        fig = plt.figure(figsize=(width, 1.0), dpi=100)
        fig.savefig(reports / "figures" / name)
        plt.close(fig)
    shutil.copy(reports / "figures" / "a.png", reports / "figures" / "index_screenshot.png")  # left off the page
    return tmp_path


@needs_chromium
def test_page_renders_with_every_image_and_link(site):
    page_file = index.build("full", root=site)
    reports = site / "reports"
    with browser.open_page() as page:
        page.goto(page_file.as_uri())
        inv = browser.inventory(page)
        colours = page.evaluate("Array.from(document.querySelectorAll('td.verdict'))"
                                ".map(td => getComputedStyle(td).backgroundColor)")
        claim_text = page.evaluate("document.querySelectorAll('table.claims tbody tr')[1].cells[1].textContent")
        shot = page.screenshot(site / "shot.png")
    assert inv["title"] == "gpolib workbook · full" and inv["rows"] == 3
    assert [(Path(i["src"]).name, i["width"]) for i in inv["images"]] == [("a.png", 300), ("b.png", 200)]
    assert colours == ["rgb(46, 125, 50)", "rgb(239, 143, 0)", "rgb(117, 117, 117)"]  # VERDICT_COLOURS
    assert claim_text == "ratios decay <&>"  # escaped in the HTML, shown as written
    targets = sorted({Path(h[len("file://"):]).relative_to(reports).as_posix() for h in inv["links"]})
    assert targets == ["claims.json", "claims.md", "figures/a.png", "figures/b.png", "html/01_x.html"]
    assert browser.problems(inv) == []  # 03_missing has no HTML: named, not linked
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


@needs_chromium
def test_a_broken_image_or_link_is_reported(site):
    page_file = index.build("full", root=site)
    reports = site / "reports"
    (reports / "figures" / "b.png").unlink()
    (reports / "html" / "01_x.html").unlink()
    inv, found = browser.check(page_file)
    b, nb = (reports / "figures" / "b.png").as_uri(), (reports / "html" / "01_x.html").as_uri()
    assert sorted(found) == sorted([f"image did not load: {b}", f"broken link: {b}"] + [f"broken link: {nb}"] * 3)


@needs_chromium
def test_committed_report_page_is_whole_and_screenshot(tmp_path):
    page_file = ROOT / "reports" / "index.html"
    claims = json.loads((ROOT / "reports" / "claims.json").read_text())
    figures = [p for p in (ROOT / "reports" / "figures").glob("*.png") if not p.name.startswith("index_")]
    inv, found = browser.check(page_file, screenshot=tmp_path / "index.png")
    assert found == []
    stale = "reports/index.html is older than the reports: python -m gpolib.workbook.index (the workbook runner does it)"
    assert inv["rows"] == len(claims) and len(inv["images"]) == len(figures), stale
    assert (tmp_path / "index.png").stat().st_size > 10_000


def test_the_workbook_runner_rebuilds_the_page(tmp_path, capsys):
    from gpolib.workbook import workbook

    (tmp_path / "reports" / "smoke" / "html").mkdir(parents=True)
    (tmp_path / "reports" / "smoke" / "html" / "90_objectives_explorer.html").write_text("<html></html>")
    workbook._report("smoke", tmp_path, {})
    text = (tmp_path / "reports" / "smoke" / "index.html").read_text()
    claims = json.loads((tmp_path / "reports" / "smoke" / "claims.json").read_text())
    assert text.count("<tr><td>") == len(claims) > 0 and 'href="html/90_objectives_explorer.html"' in text
    assert "report page:" in capsys.readouterr().out


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
