"""The generated blocks of README.md and docs/*.md, each a pure function of the tree.

    python -m gpolib.workbook.readme --write    # rewrite every generated block
    python -m gpolib.workbook.readme            # exit 1 (naming the file and block) if one differs

A block sits between `<!-- NAME -->` and `<!-- /NAME -->`; `BLOCKS` says which file holds which. `phenomena`
(README): the four phenomena's claims, one row each, from `reports/claims.json` (claim, the paper's number, our
headline with its interval, `report.headline`, the verdict, a link to the notebook section that computes it), and
a strip of their figures. `scoreboard` (docs/claims.md): every claim the same way. `layout` (docs/layout.md): every
module of `gpolib/`, subpackages included, with the first sentence of its docstring (`summary`; read with `ast`,
nothing imported). `notebook-times` (docs/performance.md): the table of `benchmarks/notebook_times.json` (per
notebook: minutes recomputed from nothing, jobs, the fp32 matmul peak recorded with it, its source;
`benchmarks/notebook_time.py` records there). `rl-step` (docs/performance.md): the RL step against TRL from the
latest `python -m gpolib bench` result, `STEP_BENCH`.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

from .. import jsonio, paths
from ..folders import write_text

TIMES = Path("benchmarks") / "notebook_times.json"
"""the measured notebook times, relative to the repository root"""
STEP_BENCH = Path("benchmarks") / "results_cpu_6ops_justified.json"
"""the latest `python -m gpolib bench --steps 5 --mu 1 4` on the default regime (docs/performance.md's numbers)"""
CLAIMS = Path("reports") / "claims.json"
"""the full profile's scoreboard, relative to the repository root"""


def summary(doc: str) -> str:
    """A docstring's first line, continued over the lines of its first paragraph until one ends a sentence
    (`.`, `?`, `!`, `:`), so that a line wrapped mid-sentence reads whole."""
    taken = []
    for line in doc.strip().split("\n"):
        if not line.strip():
            break
        taken.append(line.strip())
        if line.rstrip().endswith((".", "?", "!", ":")):
            break
    return " ".join(taken)


def module_rows(root: Path) -> list:
    """(path relative to `root`, docstring `summary`) of every `.py` under `root/gpolib`, sorted by path."""
    rows = []
    for path in sorted((root / "gpolib").rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        rows.append((path.relative_to(root).as_posix(), summary(doc)))
    return rows


def layout_block(root: Path) -> str:
    """The markdown table of `module_rows`, one row per module."""
    lines = ["| module | what it is (its docstring's first sentence) |", "|---|---|"]
    lines += [f"| `{path}` | {first.replace('|', chr(92) + '|')} |" for path, first in module_rows(root)]
    return "\n".join(lines)


WHOLE = "all"
"""the row of the whole workbook recomputed in one go (`benchmarks/notebook_time.py all`)"""


def times_block(times: dict) -> str:
    """The markdown table of the notebook times, by notebook, with their sum, and the whole workbook's one run."""
    lines = ["| notebook | minutes, recomputed from nothing | jobs | fp32 matmul peak (GFLOP/s) | source |",
             "|---|---|---|---|---|"]
    each = {nb: t for nb, t in times.items() if nb != WHOLE}
    for nb in sorted(each):
        t = each[nb]
        lines.append(f"| {nb} | {t['minutes']:.1f} | {t['jobs']} | {t['peak_gflops']:.0f} | {t['source']} |")
    total = sum(t["minutes"] for t in each.values())
    lines.append(f"| sum | {total:.1f} ({total / 60:.1f} h) | | | |")
    if WHOLE in times:
        t = times[WHOLE]
        lines.append(f"| all, in one run | {t['minutes']:.1f} ({t['minutes'] / 60:.1f} h) | {t['jobs']} | "
                     f"{t['peak_gflops']:.0f} | {t['source']} |")
    return "\n".join(lines)


def replace_block(text: str, name: str, body: str) -> str:
    """`text` with what lies between `<!-- name -->` and `<!-- /name -->` replaced by `body`."""
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"generated block {name!r} is invalid; expected one {start} ... {end} pair")
    head, rest = text.split(start)
    return f"{head}{start}\n{body}\n{end}{rest.split(end, 1)[1]}"


def record_time(root: Path, notebook: str, *, minutes: float, peak_gflops: float, jobs: int, source: str) -> Path:
    """Set notebook `notebook`'s row of `benchmarks/notebook_times.json` (the other rows kept); returns its path."""
    path = root / TIMES
    times = jsonio.read(path) if path.exists() else {}
    times[notebook] = {"minutes": round(minutes, 1), "peak_gflops": round(peak_gflops), "jobs": jobs, "source": source}
    return jsonio.write(path, dict(sorted(times.items())))


def _verdict_links(root: Path) -> tuple:
    """(claims.json's records, claim id -> (href relative to reports/, title) of the notebook section computing it)."""
    from .index import _anchors  # the page's own links, so that README, docs and page point at one section

    claims = jsonio.read(root / CLAIMS)
    return claims, _anchors(claims, root / "reports" / "html")


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def claim_rows(claims: list, anchors: dict, ids, up: str) -> list:
    """Markdown rows `| id | claim | paper's number | ours (95% interval) | verdict | computed in |` for the claims
    `ids`, in that order; `up`: the path from the file to the repository root ('' or '../')."""
    from ..lab.report import headline

    by_id, rows = {c["id"]: c for c in claims}, []
    for cid in ids:
        c = by_id[cid]
        href, title = anchors.get(cid, (None, c.get("notebook", "")))
        where = f"[{title.split(' · ')[0]}]({up}reports/{href})" if href else _cell(title)
        rows.append("| " + " | ".join([cid, _cell(c.get("claim", "")), _cell(c.get("paper", "")),
                                       _cell(headline(c) or "—"), f"**{c['verdict']}**", where]) + " |")
    return rows


CLAIM_HEAD = ["| id | claim | paper's number | ours (95% interval) | verdict | computed in |",
              "|---|---|---|---|---|---|"]


def phenomena_block(root: Path) -> str:
    """The four phenomena (`gpolib.lab.phenomena.PHENOMENA`) as one table of their claims, then their figures."""
    from ..lab import phenomena

    claims, anchors = _verdict_links(root)
    lines = ["| phenomenon | " + CLAIM_HEAD[0][2:], "|---" + CLAIM_HEAD[1]]
    for ph in phenomena.PHENOMENA:
        rows = claim_rows(claims, anchors, ph.claims, "")
        lines += [f"| {ph.short if i == 0 else ''} {row}" for i, row in enumerate(rows)]
    figs = [(ph.claim, phenomena.FIGURES[ph.claim]) for ph in phenomena.PHENOMENA]
    drawn = [(cid, name) for cid, name in figs if (root / "reports" / "figures" / name).exists()]
    strip = " ".join(f'<a href="reports/figures/{name}"><img src="reports/figures/{name}" width="24%" '
                     f'alt="{cid}: {name}"></a>' for cid, name in drawn)
    return "\n".join(lines) + "\n\n<p>" + strip + "</p>"


def routing_block(root: Path) -> str:
    """What MoE routing did (P3's grid, the default cell, P4 at its operating point), in words from claims.json."""
    from ..lab.moe_grid import routing_paragraph

    by_id = {c["id"]: c for c in jsonio.read(root / CLAIMS)}
    return routing_paragraph(by_id["P3"], by_id["P4"])


def scoreboard_block(root: Path) -> str:
    """Every claim of `reports/claims.json`, one row each (for docs/claims.md)."""
    claims, anchors = _verdict_links(root)
    return "\n".join(CLAIM_HEAD + claim_rows(claims, anchors, [c["id"] for c in claims], "../"))


def step_block(root: Path) -> str:
    """The RL step, gpolib against TRL, from `STEP_BENCH`: per mu the median seconds per step and their ratio."""
    res = jsonio.read(root / STEP_BENCH)
    env = res["environment"]
    lines = [f"Measured by `python -m gpolib bench` ({STEP_BENCH.as_posix()}) on a {env['cpu_count']}-core "
             f"{env['cpu_model']}, fp32 matmul peak {res['matmul_peak_gflops']:.0f} GFLOP/s, torch {env['torch']}, "
             f"TRL {env['trl']}; the losses of both agree to {res['loss_check']['abs_diff']:.1e} on a shared "
             "batch.", "",
             "| mu | gpolib s/step | TRL s/step | gpolib / TRL |", "|---|---|---|---|"]
    for run in res["runs"]:
        ours, theirs = run["gpolib"]["s_per_step_median"], run["trl"]["s_per_step_median"]
        lines.append(f"| {run['mu']} | {ours:.2f} | {theirs:.2f} | **{ours / theirs:.3f}** |")
    return "\n".join(lines)


OBJECTIVE_NAMES = {"grpo": "GRPO", "dapo": "DAPO", "gspo": "GSPO", "gfpo": "GFPO", "dr_grpo": "Dr. GRPO", "ppo": "PPO",
                   "vapo": "VAPO", "cispo": "CISPO", "gmpo": "GMPO", "sapo": "SAPO", "luspo": "LUSPO", "vespo": "VESPO",
                   "grpo_top_entropy": "GRPO, top-20% entropy tokens", "rloo": "RLOO"}
"""preset name -> how the docs name it (a preset not here is shown by its name)"""


def axes_block(root: Path) -> str:
    """Every preset on the three axes (`gpolib.lab.beyond.axes_table`, read from the presets), for docs/api.md."""
    from ..lab.beyond import axes_table

    lines = ["| objective | ratio | samples trained | clip | aggregation | advantage | notebook |",
             "|---|---|---|---|---|---|---|"]
    for name, row in axes_table().iterrows():
        cells = [OBJECTIVE_NAMES.get(name, name), row["granularity"], row["sampling"], row["clipping"],
                 row["aggregation"], row["advantage"], row["notebook"]]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


BLOCKS = {"README.md": {"phenomena": phenomena_block, "routing": routing_block},
          "docs/claims.md": {"scoreboard": scoreboard_block},
          "docs/layout.md": {"layout": layout_block},
          "docs/api.md": {"axes": axes_block},
          "docs/performance.md": {"rl-step": step_block,
                                  "notebook-times": lambda root: times_block(jsonio.read(root / TIMES))}}
"""file (relative to the repository root) -> block name -> the function of the tree that writes it"""


def render(root: Path) -> dict:
    """file -> (its text now, its text with every generated block rebuilt from the tree at `root`); a file that
    `root` does not hold (a test's scratch tree) is left out."""
    out = {}
    for name, blocks in BLOCKS.items():
        if not (root / name).is_file():
            continue
        text = new = (root / name).read_text(encoding="utf-8")
        for block, make in blocks.items():
            new = replace_block(new, block, make(root))
        out[name] = (text, new)
    return out


def write(root: Path) -> list:
    """Rewrite the generated blocks that changed; returns the files written."""
    written = []
    for name, (text, new) in render(root).items():
        if new != text:
            write_text(root / name, new)
            written.append(name)
    return written


def main(argv: list | None = None) -> int:
    """`python -m gpolib.workbook.readme [--write]`; returns the exit code."""
    ap = argparse.ArgumentParser(prog="python -m gpolib.workbook.readme", description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the generated blocks of README.md and docs/")
    args = ap.parse_args(argv)
    root = paths.repo_root()
    if args.write:
        written = write(root)
        print(f"generated blocks rewritten in {', '.join(written)}" if written else "generated blocks unchanged")
        return 0
    stale = [name for name, (text, new) in render(root).items() if new != text]
    if stale:
        print(f"generated blocks are stale in {', '.join(stale)}: python -m gpolib.workbook.readme --write",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
