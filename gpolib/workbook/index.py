"""`reports/index.html`: the workbook's front page, a static file that opens without a server.

Read top down it gives, at a glance:
1. the four phenomena (`gpolib.lab.phenomena`): per phenomenon one figure, embedded in the file, and one sentence
   with our number beside the paper's and the verdict word;
2. the scoreboard of `claims.json`, one line per claim (id, claim, the paper's number, our headline number with
   its interval, `report.headline`, the verdict as a coloured word), the full evidence and criterion folded under
   each line (`<details>`) with a link to the notebook section that computes it (`section_anchor`);
3. the executed notebooks' HTML and every figure, by relative paths.
The lead and the scoreboard need no other file; the links and the gallery need the folder beside it. `build(profile)`
writes it; the workbook runner calls it after the scoreboard, then retakes its screenshot (`screenshot`).
"""
from __future__ import annotations

import base64
import json
import re
from html import escape
from pathlib import Path
from typing import Optional
from urllib.parse import unquote

from .. import paths
from ..folders import write_text

VERDICT_COLOURS = {"reproduced": "#2e7d32", "partly": "#e65100", "inconclusive": "#1565c0",
                   "not reproduced": "#c62828", "not tested": "#6d4c41", "not yet run": "#757575"}
"""colour of the verdict word (anything else, e.g. 'smoke: no verdict': the 'not yet run' grey)"""
SKIP_FIGURES = ("index_",)
"""figure name prefixes left off the page (its own screenshot)"""

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5rem auto; max-width: 1200px;
       color: #222; padding: 0 1rem; line-height: 1.35; }
h1 { margin-bottom: 0.2rem; } .meta { color: #666; margin-top: 0; } h2 { margin: 1.4rem 0 0.6rem; }
.phenomena { display: grid; grid-template-columns: minmax(0, 1fr); gap: 0.8rem; }
.phenomenon { margin: 0; border: 1px solid #e3e3e3; border-radius: 6px; padding: 0.5rem 0.7rem; }
.phenomenon img { display: block; max-width: 100%; height: auto; margin: 0 auto; }
.phenomenon .nofigure { display: flex; align-items: center; justify-content: center; height: 6rem; background: #f7f7f7;
  color: #777; }
.phenomenon figcaption { font-size: 0.9rem; margin-top: 0.4rem; overflow-wrap: anywhere; }
.board { font-size: 0.86rem; border-top: 1px solid #ddd; }
.board .head, .board summary { display: grid; gap: 0.6rem; padding: 0.28rem 0.5rem;
  grid-template-columns: 3rem minmax(0, 3fr) minmax(0, 2.2fr) minmax(0, 4.2fr) 8.4rem; }
.board .head { font-weight: 600; background: #f3f3f3; }
.board details.history { font-size: 0.78rem; color: #6b4e00; background: #fff8e6; padding: 0.1rem 0.5rem 0.1rem 3rem;
  border-bottom: none; } .board details.history summary { display: block; cursor: pointer; padding: 0; }
.board .history ul { margin: 0.1rem 0; padding-left: 1.1rem; }
.board details { border-bottom: 1px solid #eee; } .board details[open] { background: #fcfcfc; }
.board summary { cursor: pointer; list-style: none; } .board summary::-webkit-details-marker { display: none; }
.board summary > span { overflow-wrap: anywhere; }
.board .id::before { content: "\\25b8  "; color: #888; } .board details[open] .id::before { content: "\\25be  "; }
.board .more { padding: 0.1rem 0.8rem 0.5rem 3.6rem; } .board .more p { margin: 0.3rem 0; overflow-wrap: anywhere; }
.verdict { font-weight: 600; }
ul.notebooks { columns: 2; } .figures { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); grid-auto-flow: row dense; gap: 1rem; }
.figures figure { margin: 0; border: 1px solid #eee; padding: 0.5rem; }
.figures figure.span2 { grid-column: span 2; } .figures figure.span3 { grid-column: 1 / -1; }
.figures img { display: block; max-width: 100%; height: auto; margin: 0 auto; }
.figures figcaption { font-size: 0.85rem; color: #444; text-align: center; }
"""


def _claims(reports: Path) -> list:
    f = reports / "claims.json"
    if not f.exists():
        return []
    try:
        return json.loads(f.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        from ..errors import UserError

        raise UserError(f"{paths.relative(f)} does not parse ({err}); rebuild it (python -m gpolib reproduce) "
                        "or restore it from git") from None


def verdict_word(word: str) -> str:
    """The verdict as a coloured word."""
    colour = VERDICT_COLOURS.get(word, VERDICT_COLOURS["not yet run"])
    return f'<span class="verdict" style="color:{colour}">{escape(word)}</span>'


def section_anchor(html: str, claim_id: str) -> Optional[tuple]:
    """(id as written, title) of the notebook section that computes a claim, from the heading ids of a notebook's HTML
    (nbconvert: the heading text, spaces as '-', percent-encoded): the first heading that names the claim id,
    else the first 'Verdict(s)' heading; None where neither exists."""
    ids = re.findall(r'<h[1-6][^>]*\bid="([^"]+)"', html)
    named = [i for i in ids if re.search(rf"(?<![A-Za-z0-9]){re.escape(claim_id)}(?![A-Za-z0-9])", unquote(i))]
    found = named or [i for i in ids if i.startswith("Verdict")]
    if not found:
        return None
    return found[0], unquote(found[0]).replace("-", " ")


def _computed_in(rec: dict, anchor: Optional[tuple]) -> str:
    """'computed in <link to the section>' (anchor: (href, title)), or the notebook's name where its HTML is missing."""
    if anchor is None:
        return f"computed in {escape(str(rec.get('notebook', '')))} (its HTML is not in this folder)"
    return f'computed in <a href="{escape(anchor[0], quote=True)}">{escape(anchor[1])}</a>'


def board_html(claims: list, anchors: dict) -> str:
    """The scoreboard, one `<details>` line per claim (id, claim, paper's number, headline, verdict); opened: the
    paper, our full numbers, the criterion and the notebook section. anchors: claim id -> (href, title) of the
    section that computes it (`_anchors`)."""
    from ..lab.report import headline

    head = "".join(f"<span>{h}</span>" for h in ("id", "claim", "paper's number", "ours (95% interval)", "verdict"))
    rows = []
    for c in claims:
        cells = [(c.get("id", ""), "id"), (c.get("claim", ""), "claim"), (c.get("paper", ""), "paper"),
                 (headline(c) or "—", "ours")]
        summary = "".join(f'<span class="{k}" title="{escape(str(v), quote=True)}">{escape(str(v))}</span>'
                          for v, k in cells) + f"<span>{verdict_word(c.get('verdict', 'not yet run'))}</span>"
        more = (f"<p><b>paper</b> {escape(str(c.get('paper_name', '')))}: {escape(str(c.get('paper', '')))}</p>"
                f"<p><b>ours</b> {escape(str(c.get('ours', '')) or 'not yet run')}</p>"
                f"<p><b>criterion</b> {escape(str(c.get('criterion', '')))}</p>"
                f"<p>{_computed_in(c, anchors.get(c.get('id')))}"
                f" · {len(c.get('runs', []))} runs</p>")
        rows.append(f'<details class="claim" id="claim-{escape(str(c.get("id", "")), quote=True)}">'
                    f'<summary>{summary}</summary><div class="more">{more}</div></details>'
                    + history_html(c.get("criterion_history") or []))
    return f'<div class="board"><div class="head">{head}</div>{"".join(rows)}</div>'


def history_html(entries: list) -> str:
    """Under a claim's row: each earlier criterion, when and by which commit it was replaced, the verdict it gave and
    why ('' when the criterion never changed after its data were seen)."""
    if not entries:
        return ""
    items = "".join(f"<li>until {escape(e['until'])} ({escape(e['commit'])}): {escape(e['criterion'])} — gave "
                    f"<i>{escape(e['verdict'])}</i>; changed because {escape(e['why'])}</li>" for e in entries)
    gave = "; ".join(f"{escape(e['until'])}: {escape(e['verdict'].split(':')[0])}" for e in entries)
    return (f'<details class="history"><summary>criterion changed after its data were seen, {len(entries)}x '
            f'(earlier verdicts {gave})</summary><ul>{items}</ul></details>')


def phenomena_html(claims: list, images: dict) -> str:
    """The lead: per phenomenon a card as wide as the page, its figure at up to its own size (a link opens it alone;
    images: claim id -> data URI, or None: not drawn) and one sentence, the scoreboard's headline first, then the
    paper's number, the verdict word, a link to its scoreboard line."""
    from ..lab import phenomena
    from ..lab.report import headline

    by_id, cards = {c.get("id"): c for c in claims}, []
    for ph in phenomena.PHENOMENA:
        rec, fig = by_id.get(ph.claim, {}), phenomena.FIGURES[ph.claim]
        img = (f'<a href="figures/{escape(fig)}"><img src="{images[ph.claim]}" alt="{escape(fig)}"></a>'
               if images.get(ph.claim) else f'<div class="nofigure">figure {escape(fig)} not drawn yet</div>')
        text = (f"<b>{escape(ph.title)}</b>: {escape(phenomena.sentence(ph, rec, headline(rec) if rec else ''))}; "
                f"paper: {escape(str(rec.get('paper', '')))} — {verdict_word(rec.get('verdict', 'not yet run'))} "
                + (f'(<a href="#claim-{ph.claim}">{ph.claim}</a>)' if rec else f"({ph.claim}: not in the scoreboard)"))
        cards.append(f'<figure class="phenomenon" id="phenomenon-{ph.claim}">{img}<figcaption>{text}</figcaption></figure>')
    return f'<div class="phenomena">{"".join(cards)}</div>'


GALLERY_COLUMN = 380
"""a gallery column's width in CSS pixels (a third of the page): a figure spans as many columns as keep it at
>= ~75% of its own width, so that a multi-panel figure reads without opening it"""


def png_width(path: Path) -> int:
    """A PNG's width in pixels, from its header (0 for a file that is not a PNG)."""
    head = path.read_bytes()[:24] if path.is_file() else b""
    return int.from_bytes(head[16:20], "big") if head[:8] == b"\x89PNG\r\n\x1a\n" else 0


def span(width: int) -> int:
    """Gallery columns (1-3) for a figure `width` pixels wide."""
    return 1 if width <= 1.35 * GALLERY_COLUMN else 2 if width <= 2.7 * GALLERY_COLUMN else 3


def figures_html(figures: list, widths: dict | None = None) -> str:
    """One captioned image per figure, relative to the reports folder; widths: name -> pixels (`png_width`), from
    which each figure spans one, two or three columns."""
    widths = widths or {}
    items = [f'<figure class="span{span(widths.get(f, 0))}"><a href="figures/{escape(f)}">'
             f'<img src="figures/{escape(f)}" alt="{escape(f)}"></a><figcaption>{escape(f)}</figcaption></figure>'
             for f in figures]
    return f'<div class="figures">{"".join(items)}</div>'


def _notebook_link(stem: str) -> str:
    return f'<a href="html/{escape(stem)}.html">{escape(stem)}</a>'


def page(claims: list, figures: list, notebooks: list, profile: str, files=(), images=None, anchors=None,
         widths=None) -> str:
    """The whole page as a string. figures: names under figures/; notebooks: stems of html/<stem>.html; files:
    other files of the reports folder to link at the top; images: claim id -> data URI of its phenomenon's figure;
    anchors: claim id -> (href, title) of the notebook section that computes it; widths: figure name -> pixels."""
    links = "".join(f"<li>{_notebook_link(n)}</li>" for n in notebooks)
    top = "".join(f' · <a href="{escape(f)}">{escape(f)}</a>' for f in files)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>gpolib workbook · {profile}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_CSS}</style></head><body>\n'
            f'<h1>gpolib workbook</h1><p class="meta">{escape(profile)} profile{top}</p>\n'
            f"<h2>Four phenomena</h2>\n{phenomena_html(claims, images or {})}\n"
            f"<h2>Claims scoreboard</h2>\n{board_html(claims, anchors or {})}\n"
            f'<h2>Executed notebooks</h2>\n<ul class="notebooks">{links}</ul>\n'
            f"<h2>Figures</h2>\n{figures_html(figures, widths)}\n</body></html>\n")


def _images(figures_dir: Path) -> dict:
    """claim id -> data URI of its phenomenon's figure (None where the file is missing)."""
    from ..lab import phenomena

    out = {}
    for cid, name in phenomena.FIGURES.items():
        f = figures_dir / name
        out[cid] = f"data:image/png;base64,{base64.b64encode(f.read_bytes()).decode()}" if f.is_file() else None
    return out


def _anchors(claims: list, html_dir: Path) -> dict:
    """claim id -> (href, title) of the section of its notebook's HTML that computes it; (href, stem) where no
    section is found; no entry where the notebook has no HTML."""
    out, texts = {}, {}
    for c in claims:
        nb, cid = c.get("notebook", ""), c.get("id", "")
        f = html_dir / f"{nb}.html"
        if not f.is_file():
            continue
        texts.setdefault(nb, f.read_text(encoding="utf-8"))
        sec = section_anchor(texts[nb], cid)
        out[cid] = (f"html/{nb}.html#{sec[0]}", f"{nb} · {sec[1]}") if sec else (f"html/{nb}.html", nb)
    return out


def build(profile: str = "full", root: Path | str | None = None) -> Path:
    """Write `<reports>/index.html` from what is on disk now (if its content changed); returns its path."""
    reports, figs_dir = paths.reports_dir(profile, root), paths.figures_dir(profile, root)
    figs = sorted(p.name for p in figs_dir.glob("*.png") if not p.name.startswith(SKIP_FIGURES))
    notebooks = sorted(p.stem for p in paths.html_dir(profile, root).glob("*.html"))
    files = [f for f in ("claims.md", "claims.json") if (reports / f).exists()]
    claims = _claims(reports)
    anchors = _anchors(claims, paths.html_dir(profile, root))
    text = page(claims, figs, notebooks, profile, files, _images(figs_dir), anchors,
                {f: png_width(figs_dir / f) for f in figs})
    out = reports / "index.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    if not (out.exists() and out.read_text(encoding="utf-8") == text):
        write_text(out, text)
    return out


if __name__ == "__main__":  # python -m gpolib.workbook.index [profile]: the page (and, full, its screenshot) alone
    import sys

    from . import screenshot

    chosen = sys.argv[1] if len(sys.argv) > 1 else "full"
    print(f"report page: {paths.relative(build(chosen))}")
    if chosen == "full":
        print(screenshot.retake(chosen))
