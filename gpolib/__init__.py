"""gpolib: the GRPO family of RL objectives (GRPO, DAPO, GSPO, GFPO, Dr. GRPO) as readable code.

`import gpolib` loads neither torch nor anything that changes the process: the configs and presets are plain
dataclasses, and `gpolib.objectives` (the loss and its surrogates) computes with the tensors it is given, importing
no torch itself. Process settings (OpenMP waiting, threads) are made where a process starts, by
`gpolib.runtime.setup_threads()`.
"""
from . import objectives, presets
from .config import LossConfig, TrainConfig

__all__ = ["LossConfig", "TrainConfig", "objectives", "presets"]
__version__ = "0.1.0"
