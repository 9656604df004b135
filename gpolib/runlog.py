"""What the workbook runner learns from the runs inside a notebook's kernel: reused or computed, and progress.

The runner (`gpolib.workbook.workbook`) runs each notebook in a separate kernel process; it sets two
environment variables that the kernel inherits, and the run folders (`RunDir`) answer through them:
  GPOLIB_RUN_LOG             a file: one line per event, `<event>\t<folder>\t<detail>`, where event is
                             "reused", "computed" or "step" (detail "<done>/<total>") or "start"
  GPOLIB_RECOMPUTE_BEFORE    a unix time: a finished run whose summary is older is recomputed, not reused
                             (`reproduce --recompute`); runs finished during this reproduce are reused.
Without them (a notebook run by hand, the tests) nothing is logged and every finished run is reused.
"""
from __future__ import annotations

import os
from pathlib import Path

from .paths import relative

LOG_ENV = "GPOLIB_RUN_LOG"
RECOMPUTE_ENV = "GPOLIB_RECOMPUTE_BEFORE"


def note(event: str, folder, detail: str = "") -> None:
    """Append one event to the runner's log, if a runner asked for one."""
    log = os.environ.get(LOG_ENV)
    if log:
        with open(log, "a") as f:
            f.write(f"{event}\t{relative(folder)}\t{detail}\n")


def recompute(summary: Path) -> bool:
    """True when the runner asked to recompute runs finished before it started, and this one did."""
    before = os.environ.get(RECOMPUTE_ENV)
    return bool(before) and Path(summary).stat().st_mtime < float(before)


def read(log: Path) -> list:
    """The events logged so far: (event, folder, detail) tuples."""
    if not Path(log).exists():
        return []
    return [tuple((line.split("\t") + ["", ""])[:3]) for line in Path(log).read_text().splitlines() if line]
