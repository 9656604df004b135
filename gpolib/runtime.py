"""Process settings, made where a process starts: the CLI, `make`, each notebook's first code cell, the tests.

Importing gpolib changes nothing in the environment; `setup_threads()` does, once, on purpose.
"""
from __future__ import annotations

import contextlib
import os
import sys
import warnings


def setup_threads(threads: int | None = None) -> None:
    """Passive OpenMP waiting and, if given, a fixed number of torch CPU threads.

    OpenMP threads that spin while they wait make two torch processes on a 2-core machine 10-50x
    slower (measured: 4 RL steps 122 s vs 10 s beside another job); waiting passively costs nothing
    alone. OpenMP reads OMP_WAIT_POLICY when torch loads it, so call this before the process's first
    `import torch`; a value already in the environment (e.g. from the Makefile) is kept.
    threads=None leaves torch's own choice (one per physical core).
    """
    if "torch" in sys.modules and "OMP_WAIT_POLICY" not in os.environ:
        warnings.warn("setup_threads() ran after torch was imported: OMP_WAIT_POLICY has no effect now",
                      stacklevel=2)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if threads:
        import torch

        torch.set_num_threads(threads)


@contextlib.contextmanager
def cpu_threads(n: int):
    """Run the block with n torch CPU threads (0: leave the setting alone)."""
    import torch

    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
