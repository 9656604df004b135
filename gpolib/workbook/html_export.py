"""An executed notebook as a page that renders offline: nbconvert's lab HTML with its maths typeset by the MathJax
bundle committed once beside the pages (`reports/html/mathjax/`), not by a CDN.

nbconvert's own page loads MathJax 2 and require.js from a CDN, so a reader without a network sees raw `$...$`.
Here the page loads MathJax 3 (SVG output: glyphs drawn from the script itself, no font files) from the relative
path MATHJAX, configured as nbconvert configures MathJax 2 ($ and $$, \\( \\) and \\[ \\], AMS numbering), and
require.js only where the notebook holds widget state (which needs the network for its widget manager anyway).

    python -m gpolib.workbook.html_export reports/executed/*.ipynb   # re-export committed notebooks, no re-run

The bundle is MathJax 3.2.2's `es5/tex-svg-full.js` (Apache-2.0, its LICENSE beside it), as shipped in the PyPI
package django-static-mathjax 3.2.2.1 (`mathjax/static/mathjax/es5/`); MATHJAX_SHA256 pins it.
"""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

from .. import paths
from ..folders import write_text

MATHJAX = Path("mathjax") / "tex-svg-full.js"
"""the bundle's path relative to the folder of the pages (what each page's script tag names)"""
MATHJAX_SHA256 = "214c3da890b16db3d1319684cc04f3fd4e72ea59d5eb3863f256146015fb1783"
"""sha256 of the committed bundle (MathJax 3.2.2, es5/tex-svg-full.js)"""

_TEMPLATE = r"""{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}
{%- if "widgets" in nb.metadata -%}<script src="{{ resources.require_js_url }}"></script>{%- endif -%}
{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}
<script>
window.MathJax = {
  tex: {inlineMath: [['$', '$'], ['\\(', '\\)']], displayMath: [['$$', '$$'], ['\\[', '\\]']],
        processEscapes: true, processEnvironments: true, tags: 'ams'},
  svg: {fontCache: 'global'},
  options: {enableMenu: false}
};
</script>
<script src="{{ resources.mathjax_url }}" defer></script>
{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}
{%- endblock html_head_js_mermaidjs -%}
"""
"""nbconvert's lab template with the three CDN scripts replaced (mermaid: no notebook draws a diagram)"""

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def bundle() -> Path:
    """The committed MathJax bundle: reports/html/MATHJAX of the repository."""
    return paths.html_dir("full") / MATHJAX


def stable_html(body: str) -> str:
    """The exported HTML with each random uuid the exporter gives a widget view's element replaced by its rank of
    first appearance (`view-<n>`), so that an unchanged notebook exports the same bytes."""
    ids = dict.fromkeys(m.group(1) for m in re.finditer(r'id="(' + _UUID.pattern + ')"', body))  # element ids only
    ranks = {u: f"view-{i:04d}" for i, u in enumerate(ids)}
    return _UUID.sub(lambda m: ranks.get(m.group(), m.group()), body) if ranks else body


def render(executed: Path) -> str:
    """The page of an executed notebook (read from its file: the file's key order orders the widget state)."""
    import jinja2
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(extra_loaders=[jinja2.DictLoader({"offline.html.j2": _TEMPLATE})],
                            template_file="offline.html.j2", mathjax_url=MATHJAX.as_posix())
    body, _ = exporter.from_notebook_node(nbformat.read(str(executed), as_version=4))
    return stable_html(body)


def export(executed: Path, html: Path) -> Path:
    """Write the page of `executed` to `html`, with the MathJax bundle beside it (copied from the committed one
    into another folder, e.g. the smoke profile's, where it is missing). Returns `html`."""
    html.parent.mkdir(parents=True, exist_ok=True)
    write_text(html, render(executed))  # atomically: a committed page is replaced whole or not at all
    target, source = html.parent / MATHJAX, bundle()
    if not target.exists() and source.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        shutil.copyfile(source.parent / "LICENSE", target.parent / "LICENSE")
    return html


def main(argv: list | None = None) -> int:
    """Re-export executed notebooks (paths) into the full profile's HTML folder, without running them."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m gpolib.workbook.html_export EXECUTED.ipynb ...", file=sys.stderr)
        return 2
    for name in args:
        print(paths.relative(export(Path(name), paths.html_dir("full") / f"{Path(name).stem}.html")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
