"""What a committed notebook under `notebooks/` may hold: sources, and the outputs of checked cells only.

The choice (docs/notebooks.md, "How a verdict is reached"): committed notebooks carry no results. A result is
whatever depends on the profile — training curves, tables of runs, verdicts — and the smoke values
in a notebook's `parameters` cell are not evidence, so their outputs are never committed. Results
live in the executed copies of the full profile, `reports/executed/*.ipynb` and `reports/html/`.

The only outputs kept are those of cells marked `# NBVAL_CHECK_OUTPUT`: deterministic, profile-
independent checks (identities, hand-computed tables, the task format) that nbval re-runs and
compares under `--nbval-lax`. nbval needs their stored outputs; everything else is cleared.

    python -m gpolib.workbook.notebooks clean notebooks/*.ipynb              # clear non-checked outputs
    python -m gpolib.workbook.notebooks clean --from reports/smoke/executed notebooks/*.ipynb
                                                                        # and refresh checked ones
    python -m gpolib.workbook.notebooks check notebooks/*.ipynb              # exit 1 if any is not clean
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

import nbformat

CHECK = "# NBVAL_CHECK_OUTPUT"
"""first-line marker of a checked cell"""
RUN_METADATA = ("papermill", "gpolib")
"""notebook metadata written by an execution (papermill's and the workbook's); never committed"""
VERDICT_WORDS = ("REPRODUCED", "PARTLY", "INCONCLUSIVE", "NOT REPRODUCED", "NOT TESTED", "smoke: no verdict")


def is_checked(cell) -> bool:
    """A code cell whose outputs nbval compares."""
    return cell.cell_type == "code" and cell.source.lstrip().startswith(CHECK)


def _injected(cell) -> bool:
    return "injected-parameters" in cell.get("metadata", {}).get("tags", [])


def clean(nb, reference=None):
    """`nb` without results: non-checked outputs cleared, execution counts and run metadata removed.

    With `reference` (an executed copy of the same notebook), checked cells take its outputs,
    matched by source; a checked cell the reference lacks keeps its own.
    """
    ref = {c.source: c.outputs for c in (reference.cells if reference is not None else []) if is_checked(c)}
    nb.cells = [c for c in nb.cells if not _injected(c)]
    count = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.outputs = ref.get(cell.source, cell.outputs) if is_checked(cell) else []
        # nbval treats a cell without an execution count as unrun and refuses its stored outputs, so a
        # checked cell with outputs gets a count (its rank among them); every other cell gets none
        count += bool(cell.outputs)
        cell.execution_count = count if cell.outputs else None
        for out in cell.outputs:
            if "execution_count" in out:
                out["execution_count"] = cell.execution_count
        for key in ("execution", "papermill"):
            cell.metadata.pop(key, None)
    for key in RUN_METADATA:
        nb.metadata.pop(key, None)
    return nb


def _text(outputs) -> str:
    parts = []
    for out in outputs:
        parts.append(out.get("text", ""))
        parts.extend(str(v) for k, v in out.get("data", {}).items() if k.startswith("text/"))
    return "\n".join(parts)


def problems(nb) -> list[str]:
    """Why `nb` is not clean (empty when it is)."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if _injected(cell):
            found.append(f"cell {i}: papermill's injected-parameters cell")
        if is_checked(cell):
            if not cell.outputs:
                found.append(f"cell {i}: checked cell without stored output (nbval would fail)")
            words = [w for w in VERDICT_WORDS if w in _text(cell.outputs)]
            if words:
                found.append(f"cell {i}: checked cell prints a verdict ({', '.join(words)})")
        elif cell.outputs:
            found.append(f"cell {i}: output of a cell that is not checked (a result)")
    found += [f"metadata: {k} (from an execution)" for k in RUN_METADATA if k in nb.metadata]
    return found


def _reference(path: Path, folder: Optional[Path]):
    if folder is None:
        return None
    ref = folder / path.name
    if not ref.exists():
        raise FileNotFoundError(f"no executed copy {ref} to take checked outputs from")
    return nbformat.read(str(ref), as_version=4)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpolib.workbook.notebooks")
    p.add_argument("action", choices=("clean", "check"))
    p.add_argument("--from", dest="source", type=Path, default=None,
                   help="folder of executed copies whose checked outputs replace the stored ones (clean)")
    p.add_argument("notebooks", nargs="+", type=Path)
    args = p.parse_args(argv)
    bad = 0
    for path in args.notebooks:
        nb = nbformat.read(str(path), as_version=4)
        if args.action == "clean":
            nbformat.write(clean(nb, _reference(path, args.source)), str(path))
        for msg in problems(nb):
            bad += 1
            print(f"{path}: {msg}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
