"""Executed notebooks as HTML that renders its maths offline (gpolib/workbook/html_export.py): every committed page
loads MathJax from the one bundle committed beside the pages, is the export of its committed executed notebook, and
in a headless Chromium with no network shows typeset maths, no raw `$...$` and requests nothing over http(s) (the
objectives explorer's widgets excepted: their manager comes from the network, as nbconvert writes it). nbconvert's
own export of the same notebook, the page before, shows raw maths there: the check can fail."""
import hashlib
import re
import subprocess
from pathlib import Path

from test_index_page import needs_chromium

from gpolib.workbook import browser, html_export

ROOT = Path(__file__).resolve().parents[1]
HTML, EXECUTED = ROOT / "reports" / "html", ROOT / "reports" / "executed"
PAGES = sorted(HTML.glob("*.html"))
WIDGET_MANAGER = {"https://cdnjs.cloudflare.com/ajax/libs/require.js/2.1.10/require.min.js",
                  "https://unpkg.com/@jupyter-widgets/html-manager@*/dist/embed-amd.js"}
"""what a page with widget state fetches to draw its widgets (nbconvert's choice), nothing else"""


def _has_widgets(page: Path) -> bool:
    return '"widgets"' in (EXECUTED / f"{page.stem}.ipynb").read_text()


def test_one_bundle_beside_the_pages_and_every_page_loads_it():
    """The bundle is the pinned MathJax 3 file with its licence, committed once; each page names it by a relative
    path, and no page loads MathJax or anything else from a CDN unless it holds widget state."""
    assert len(PAGES) == len(list(EXECUTED.glob("*.ipynb"))) >= 11
    bundle = HTML / html_export.MATHJAX
    assert bundle == html_export.bundle()
    assert hashlib.sha256(bundle.read_bytes()).hexdigest() == html_export.MATHJAX_SHA256
    assert "Apache License" in (bundle.parent / "LICENSE").read_text()
    committed = subprocess.run(["git", "ls-files", "--", "*tex-svg-full.js"], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout.split()  # a smoke run's copy is not committed
    assert committed == [f"reports/html/{html_export.MATHJAX.as_posix()}"]
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        sources = re.findall(r'<script[^>]*\bsrc="([^"]*)"', text)
        assert f'src="{html_export.MATHJAX.as_posix()}"' in text and "window.MathJax = {" in text, page.name
        assert "mathjax/2.7" not in text and "mermaid.esm" not in text, page.name
        remote = {s for s in sources if s.startswith(("http:", "https:", "//"))}
        assert remote <= (WIDGET_MANAGER if _has_widgets(page) else set()), (page.name, remote)


def test_committed_pages_are_the_export_of_the_committed_notebooks():
    """Each page is what the exporter writes for its executed notebook now (re-exported, never re-run)."""
    for page in PAGES:
        assert html_export.render(EXECUTED / f"{page.stem}.ipynb") == page.read_text(encoding="utf-8"), page.name


def test_a_page_written_elsewhere_gets_the_bundle_beside_it(tmp_path):
    page = html_export.export(EXECUTED / "00_embedded_models.ipynb", tmp_path / "html" / "00.html")
    copied = page.parent / html_export.MATHJAX
    assert copied.read_bytes() == html_export.bundle().read_bytes() and (copied.parent / "LICENSE").exists()


@needs_chromium
def test_maths_render_in_chromium_without_a_network(tmp_path):
    import nbformat
    from nbconvert import HTMLExporter

    before = tmp_path / "02_ratio_decay.html"  # nbconvert's own page: MathJax 2 from a CDN
    body, _ = HTMLExporter().from_notebook_node(nbformat.read(str(EXECUTED / "02_ratio_decay.ipynb"), as_version=4))
    before.write_text(body, encoding="utf-8")
    with browser.open_page(offline=True) as page:
        seen = {p.name: browser.maths(page, p) for p in PAGES}
        old = browser.maths(page, before)
    assert old["typeset"] == 0 and old["raw"] > 0 and old["requests"], old  # raw $...$, a CDN tried
    for name, got in seen.items():
        assert got["typeset"] > 0 and got["errors"] == 0 and got["raw"] == 0, (name, got)
        assert set(got["requests"]) <= (WIDGET_MANAGER if _has_widgets(HTML / name) else set()), (name, got)
    assert sum(got["typeset"] for got in seen.values()) >= 300  # 371 formulas over the 11 pages
