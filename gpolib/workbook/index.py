"""`reports/index.html`: the workbook's front page, a static file that opens without a server.

It shows the claims scoreboard of `claims.json` (verdict colours, the paper's number beside ours), every
figure in `figures/` and a link to each executed notebook's HTML in `html/`, all by relative paths so the
folder can be opened, copied or served as it is. `build(profile)` writes it; the workbook runner calls it
after the scoreboard. `gpolib.workbook.browser` checks it in a headless Chromium and takes its screenshot.
"""
from __future__ import annotations

import json
from html import escape
from pathlib import Path

from .. import paths

VERDICT_COLOURS = {"reproduced": "#2e7d32", "partly": "#ef8f00", "not reproduced": "#c62828",
                   "not yet run": "#757575"}
"""background of the verdict cell, per verdict word (anything else: the 'not yet run' grey)"""
SKIP_FIGURES = ("index_",)
"""figure name prefixes left off the page (its own screenshot)"""

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1200px;
       color: #222; padding: 0 1rem; }
h1 { margin-bottom: 0.2rem; } .meta { color: #666; margin-top: 0; }
table.claims { border-collapse: collapse; width: 100%; font-size: 0.9rem; }
table.claims th, table.claims td { border: 1px solid #ddd; padding: 0.35rem 0.5rem; vertical-align: top; text-align: left; }
table.claims th { background: #f3f3f3; }
td.verdict { color: white; font-weight: 600; white-space: nowrap; }
ul.notebooks { columns: 2; } .figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(360px, 1fr)); gap: 1rem; }
figure { margin: 0; border: 1px solid #eee; padding: 0.5rem; } figure img { width: 100%; height: auto; }
figcaption { font-size: 0.85rem; color: #444; text-align: center; }
"""


def _claims(reports: Path) -> list:
    f = reports / "claims.json"
    return json.loads(f.read_text()) if f.exists() else []


def scoreboard_html(claims: list, notebooks=()) -> str:
    """The scoreboard table: id, claim, paper (source and number), ours, criterion, verdict, notebook
    (a link where `notebooks` has its HTML)."""
    head = "".join(f"<th>{h}</th>" for h in ("id", "claim", "paper", "paper's number", "ours", "criterion",
                                              "verdict", "notebook"))
    rows = []
    for c in claims:
        verdict = c.get("verdict", "not yet run")
        colour = VERDICT_COLOURS.get(verdict, VERDICT_COLOURS["not yet run"])
        nb = c.get("notebook", "")
        cells = [escape(str(c.get(k, ""))) for k in ("id", "claim", "paper_name", "paper", "ours", "criterion")]
        rows.append("<tr>" + "".join(f"<td>{x}</td>" for x in cells)
                    + f'<td class="verdict" style="background:{colour}">{escape(verdict)}</td>'
                    + f"<td>{_notebook_link(nb) if nb in notebooks else escape(nb)}</td></tr>")
    return f'<table class="claims"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _notebook_link(stem: str) -> str:
    return f'<a href="html/{escape(stem)}.html">{escape(stem)}</a>'


def figures_html(figures: list) -> str:
    """One captioned image per figure, relative to the reports folder."""
    items = [f'<figure><a href="figures/{escape(f)}"><img src="figures/{escape(f)}" alt="{escape(f)}"></a>'
             f"<figcaption>{escape(f)}</figcaption></figure>" for f in figures]
    return f'<div class="figures">{"".join(items)}</div>'


def page(claims: list, figures: list, notebooks: list, profile: str, files=()) -> str:
    """The whole page as a string. figures: names under figures/; notebooks: stems of html/<stem>.html;
    files: other files of the reports folder to link at the top (claims.md, claims.json)."""
    links = "".join(f"<li>{_notebook_link(n)}</li>" for n in notebooks)
    top = "".join(f' · <a href="{escape(f)}">{escape(f)}</a>' for f in files)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>gpolib workbook · {profile}</title>'
            f"<style>{_CSS}</style></head><body>\n<h1>gpolib workbook</h1>"
            f'<p class="meta">{escape(profile)} profile{top}</p>\n'
            f"<h2>Claims scoreboard</h2>\n{scoreboard_html(claims, notebooks)}\n"
            f'<h2>Executed notebooks</h2>\n<ul class="notebooks">{links}</ul>\n'
            f"<h2>Figures</h2>\n{figures_html(figures)}\n</body></html>\n")


def build(profile: str = "full", root: Path | str | None = None) -> Path:
    """Write `<reports>/index.html` from what is on disk now; returns its path."""
    reports = paths.reports_dir(profile, root)
    figs = sorted(p.name for p in paths.figures_dir(profile, root).glob("*.png")
                  if not p.name.startswith(SKIP_FIGURES))
    notebooks = sorted(p.stem for p in paths.html_dir(profile, root).glob("*.html"))
    files = [f for f in ("claims.md", "claims.json") if (reports / f).exists()]
    text = page(_claims(reports), figs, notebooks, profile, files)
    out = reports / "index.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out


if __name__ == "__main__":  # python -m gpolib.workbook.index [profile]: rewrite the page without running the workbook
    import sys

    print(build(sys.argv[1] if len(sys.argv) > 1 else "full"))
