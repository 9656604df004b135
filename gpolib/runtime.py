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
    filter_known_warnings()
    if threads:
        import torch

        torch.set_num_threads(threads)


def deterministic_cpu(device: str) -> None:
    """On CPU, torch's deterministic implementations for the rest of the process
    (`torch.use_deterministic_algorithms(True, warn_only=True)`); other devices are left alone.

    transformers' Qwen3-MoE runs its experts through a grouped matmul (`experts_implementation='grouped_mm'`, the
    default), whose backward on 2 threads otherwise accumulates in thread order: measured on the fine-grained embedded
    MoE, two pre-trainings of one recipe had different weights after 4 steps and the gradients of one batch differed
    in every parameter, while 1 thread, transformers' eager experts (1.7x slower) or this setting gave equal bits.
    With it, runs of one configuration on one machine repeat. Cost measured on the embedded models (2 threads,
    interleaved): the fine MoE's pre-training step 1.1 s (1.3 s without), the dense trainer's forward + backward and
    the rollout unchanged. Called by the trainer and the pre-training at their start.

    Without the setting's other half, `torch.utils.deterministic.fill_uninitialized_memory` (on by default with it),
    which fills every new tensor of `empty` with NaN so that a kernel reading memory it never wrote shows: on the fine
    MoE, the grouped matmul's outputs and `index_select`'s gathered rows, (N k, H) per layer and chunk, were filled
    once each, ~19% of a no-grad pass over a rollout (one thread, `benchmarks/moe_vs_dense_step.py`). Kernels that
    write all of their output compute the same bits either way (tests/test_runtime.py)."""
    if str(device).startswith("cpu"):
        import torch
        import torch.utils.deterministic

        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = False


KNOWN_WARNINGS = (
    # the KV-cache sampler (gpolib/engine/loop.py) passes `past_key_values=`, which transformers 5.24 renamed `cache`
    # while keeping the old name working until 5.40; drop this line when the sampler passes `cache=`
    (FutureWarning, r"`past_key_values` is deprecated"),
)
"""third-party deprecation warnings about calls that still work, one per line with the reason; nothing broader"""


def filter_known_warnings() -> None:
    """Silence exactly the KNOWN_WARNINGS (message prefix and category), so that normal runs print none."""
    for category, message in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)


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
