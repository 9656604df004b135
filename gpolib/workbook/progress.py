"""The workbook runner's view into a notebook's kernel: which run is training, its step, the time left.

The kernel's run folders write events to the file named by `gpolib.runlog.LOG_ENV` (reused, computed,
start, step); `Watch` polls that file in a thread while papermill executes the notebook and draws one tqdm
bar per run (`<notebook> <run folder>`, step k/n), whose remaining time tqdm estimates from the measured
step times. Afterwards `Watch.summary()` says which runs were reused and which computed.
"""
from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path

from tqdm.auto import tqdm

from .. import runlog


class Watch:
    """Context manager around one notebook's execution: sets the run log, shows progress, collects events."""

    def __init__(self, notebook: str, poll_s: float = 0.5, show: bool = True):
        self.notebook, self.poll_s, self.show = notebook, poll_s, show
        fd, name = tempfile.mkstemp(prefix="gpolib-runlog-", suffix=".tsv")
        os.close(fd)
        self.log = Path(name)
        self.events: list = []
        self._bar, self._folder, self._seen = None, None, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> "Watch":
        os.environ[runlog.LOG_ENV] = str(self.log)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._poll()
        if self._bar is not None:
            self._bar.close()
        os.environ.pop(runlog.LOG_ENV, None)
        self.log.unlink(missing_ok=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self._poll()

    def _poll(self) -> None:
        """Read the events written since the last poll and move the bar of the current run."""
        new = runlog.read(self.log)[self._seen:]
        self._seen += len(new)
        self.events += new
        for event, folder, detail in new:
            if event in ("start", "step") and self.show:
                done, total = (int(x) for x in detail.split("/"))
                if folder != self._folder:
                    if self._bar is not None:
                        self._bar.close()
                    self._folder = folder
                    self._bar = tqdm(total=total, initial=done, desc=f"  {self.notebook} {Path(folder).name}",
                                     unit="step", file=sys.stderr, dynamic_ncols=True, leave=False)
                else:
                    self._bar.update(done - self._bar.n)

    def summary(self) -> dict:
        """{"reused": [folders], "computed": [folders]} in the order they happened."""
        out = {"reused": [], "computed": []}
        for event, folder, _ in self.events:
            if event in out and folder not in out[event]:
                out[event].append(folder)
        return out


def describe(summary: dict) -> str:
    """'runs: 4 reused, 1 computed (reports/runs/...)' for the runner's line about a notebook."""
    reused, computed = summary["reused"], summary["computed"]
    if not reused and not computed:
        return "no training runs"
    text = f"runs: {len(reused)} reused, {len(computed)} computed"
    return text + (f" ({', '.join(Path(f).name for f in computed)})" if computed else "")


def verdict_changes(before: dict, after: dict) -> list:
    """'G1: reproduced -> partly' for every claim whose verdict differs between two {id: verdict} maps."""
    return [f"{cid}: {before.get(cid, 'absent')} -> {after.get(cid, 'absent')}"
            for cid in sorted(set(before) | set(after)) if before.get(cid) != after.get(cid)]
