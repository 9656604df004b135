"""README's generated blocks: the layout of `gpolib/` and the notebook times, each a pure function of the tree.

    python -m gpolib.workbook.readme --write    # rewrite both blocks in README.md
    python -m gpolib.workbook.readme            # exit 1 (naming the block) if README.md differs

A block sits between `<!-- NAME -->` and `<!-- /NAME -->`. `layout`: every module of `gpolib/`, subpackages
included, with the first sentence of its docstring (`summary`; read with `ast`, nothing imported). `notebook-times`: the
table of `benchmarks/notebook_times.json` (per notebook: minutes recomputed from nothing, jobs, the fp32 matmul
peak recorded with it, its source; `benchmarks/notebook_time.py` records there).
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
        raise ValueError(f"README block {name!r} is invalid; expected one {start} ... {end} pair")
    head, rest = text.split(start)
    return f"{head}{start}\n{body}\n{end}{rest.split(end, 1)[1]}"


def record_time(root: Path, notebook: str, *, minutes: float, peak_gflops: float, jobs: int, source: str) -> Path:
    """Set notebook `notebook`'s row of `benchmarks/notebook_times.json` (the other rows kept); returns its path."""
    path = root / TIMES
    times = jsonio.read(path) if path.exists() else {}
    times[notebook] = {"minutes": round(minutes, 1), "peak_gflops": round(peak_gflops), "jobs": jobs, "source": source}
    return jsonio.write(path, dict(sorted(times.items())))


def render(text: str, root: Path) -> str:
    """README text `text` with both generated blocks rebuilt from the tree at `root`."""
    times = jsonio.read(root / TIMES)
    text = replace_block(text, "layout", layout_block(root))
    return replace_block(text, "notebook-times", times_block(times))


def main(argv: list | None = None) -> int:
    """`python -m gpolib.workbook.readme [--write]`; returns the exit code."""
    ap = argparse.ArgumentParser(prog="python -m gpolib.workbook.readme", description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite README.md's generated blocks")
    args = ap.parse_args(argv)
    root = paths.repo_root()
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8")
    new = render(text, root)
    if args.write:
        write_text(readme, new)
        print(f"README.md: generated blocks {'rewritten' if new != text else 'unchanged'}")
        return 0
    if new != text:
        print("README.md's generated blocks are stale: python -m gpolib.workbook.readme --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
