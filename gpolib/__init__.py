"""gpolib: the GRPO family of RL objectives (GRPO, DAPO, GSPO, GFPO, Dr. GRPO) as readable code.

`import gpolib` loads neither torch nor anything that changes the process: the configs and presets
are plain dataclasses, and `gpolib.objectives` is imported on first use. Process settings (OpenMP
waiting, threads) are made where a process starts, by `gpolib.runtime.setup_threads()`.
"""
import importlib

from .config import LossConfig, TrainConfig
from . import presets

__all__ = ["LossConfig", "TrainConfig", "objectives", "presets"]
__version__ = "0.1.0"


def __getattr__(name: str):
    """`gpolib.objectives` on first use (it imports torch)."""
    if name == "objectives":
        return importlib.import_module(".objectives", __name__)
    raise AttributeError(f"module 'gpolib' has no attribute {name!r}")
