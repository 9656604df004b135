"""gpolib: the GRPO family of RL objectives (GRPO, DAPO, GSPO, GFPO, Dr. GRPO) as readable code."""
from .config import LossConfig, TrainConfig
from . import objectives, presets

__all__ = ["LossConfig", "TrainConfig", "objectives", "presets"]
__version__ = "0.1.0"
