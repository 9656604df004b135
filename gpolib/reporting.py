"""Where a run's per-step metrics go besides `metrics.jsonl`: `TrainConfig.report_to`.

'none' (default): only the run folder. 'tensorboard': every numeric metric of every step also as a
TensorBoard scalar under `<out_dir>/tensorboard/` (torch's `SummaryWriter`; needs the `tensorboard`
package: `pip install "gpolib[tensorboard]"`), tag = the metric's name (`reward/mean`, `clip/frac`, ...),
so TensorBoard groups them by their namespace. View with `tensorboard --logdir reports/runs`.
Where the metrics go does not change what a run computes, so `report_to` is not part of a run's identity.
"""
from __future__ import annotations

import math
from pathlib import Path

from .validation import REPORT_TO, fail

TB_DIR = "tensorboard"
"""sub-folder of the run folder that holds the event files"""


class NoReporter:
    """report_to='none': nothing beyond metrics.jsonl."""

    def log(self, row: dict) -> None:
        """Nothing to do."""

    def close(self) -> None:
        """Nothing to close."""


class TensorBoardReporter:
    """Every step's numeric metrics as scalars of one event file in `log_dir`."""

    def __init__(self, log_dir: Path | str, start_step: int = 0):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:  # torch's module imports the tensorboard package
            raise ImportError('report_to="tensorboard" needs the tensorboard package: '
                              'pip install "gpolib[tensorboard]"') from e
        # purge_step: a resumed run drops the events a killed process wrote after its last checkpoint
        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=start_step or None)

    def log(self, row: dict) -> None:
        """One metrics row at its `step`; None, NaN (null in metrics.jsonl) and non-numeric values are skipped."""
        step = int(row["step"])
        for key, value in row.items():
            if key == "step" or not isinstance(value, (int, float)) or math.isnan(value):
                continue
            self.writer.add_scalar(key, float(value), global_step=step)

    def close(self) -> None:
        """Flush and close the event file."""
        self.writer.close()


def reporter(report_to: str, out_dir: Path | str, start_step: int = 0):
    """The reporter of `report_to` for a run in `out_dir` that (re)starts at `start_step`."""
    if report_to == "tensorboard":
        return TensorBoardReporter(Path(out_dir) / TB_DIR, start_step)
    if report_to == "none":
        return NoReporter()
    fail("report_to", report_to, " | ".join(map(repr, REPORT_TO)))
