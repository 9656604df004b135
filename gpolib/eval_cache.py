"""The held-out evaluation before the first update, computed once per base policy and evaluation setting.

Before its first update a run's policy is its base model: LoRA's B starts at zero, so the adapted model computes
exactly what the base computes (merged, folded into the decoder's weights or not), and a router trained in full
starts as a copy of the base router. `Trainer.evaluate` samples from `eval_seed`, which every arm and training
seed share, and every training step reseeds itself, so nothing after it depends on it having run. Runs of one
base model with the same evaluation settings therefore evaluate to the same numbers at step 0: in the committed
full-profile runs, notebooks 00-07 hold 37 runs with one step-0 evaluation and notebook 03 18 runs with another
(its own budget). `step0(trainer)` computes that evaluation for the first such run and hands it to the others
(512 prompts x 4 sampled answers + 512 greedy ones each, about 20 s of one core on the dense model).

The key (`key`) is everything the evaluation reads: the model's and evaluation tasks' fingerprints, the settings
in `EVAL_FIELDS`, the gpolib sources it runs and the torch / transformers / peft versions (any code change is a
new key). Entries live outside the repository, in `$GPOLIB_CACHE_DIR/step0_evals/` (default
`~/.cache/gpolib/`), one JSON file each, written atomically. Not cached: the vLLM engine (its own generator).
"""
from __future__ import annotations

import hashlib
import json
import math
import warnings
from pathlib import Path

from . import paths
from .folders import write_text
from .identity import file_sha256, model_fingerprint, task_fingerprint

EVAL_FIELDS = ("model", "task_eval", "prompt_style", "max_new_tokens", "temperature", "rollout_autocast", "backend",
               "rollout_threads", "device", "dtype", "eval_prompts", "eval_samples", "eval_seed", "lora_r",
               "lora_alpha", "train_router")
"""the TrainConfig fields the step-0 evaluation may depend on (more than it needs: a wider key only shares less)"""


def cache_dir() -> Path:
    """Where entries live: $GPOLIB_CACHE_DIR/step0_evals, or ~/.cache/gpolib/step0_evals."""
    return paths.cache_root() / "step0_evals"


def _code_fingerprint() -> str:
    """sha256 over the package's own modules (gpolib/*.py, not the lab) and the versions of torch, transformers, peft."""
    import peft
    import torch
    import transformers

    h = hashlib.sha256(f"{torch.__version__} {transformers.__version__} {peft.__version__}".encode())
    for f in sorted(Path(__file__).resolve().parent.glob("*.py")):
        h.update(f"{f.name}:{file_sha256(f)}\n".encode())
    return h.hexdigest()


def key(cfg) -> str:
    """sha256 (32 hex digits) of what the step-0 evaluation of `cfg` reads (module docstring)."""
    blob = {"fields": {f: getattr(cfg, f) for f in EVAL_FIELDS}, "model": model_fingerprint(cfg.model),
            "task_eval": task_fingerprint(cfg.task_eval), "code": _code_fingerprint()}
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:32]


def step0(trainer) -> dict:
    """`trainer.evaluate(0)`, from the cache when a run with the same key computed it before (then stored)."""
    if trainer.cfg.backend == "vllm":
        return trainer.evaluate(0)
    path = cache_dir() / f"{key(trainer.cfg)}.json"
    if path.is_file():
        try:
            entry = json.loads(path.read_text())
            if valid(entry):
                return entry
        except (OSError, ValueError):
            pass  # unreadable (a half-written file of a crashed writer is never renamed in): compute it again
        warnings.warn(f"step-0 cache entry {path} is unreadable or incomplete: computed again")
    out = trainer.evaluate(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    # atomic: two runs computing the same entry at once both write the same numbers; key order kept (summary.json)
    write_text(path, json.dumps(out))
    return out


ENTRY_FIELDS = ("step", "acc/sample", "acc/greedy", "len/mean", "trunc/frac")
"""what every step-0 evaluation holds (`Trainer.evaluate`); an entry without one of them is not reused"""


def valid(entry) -> bool:
    """A cache entry that can stand for `trainer.evaluate(0)`: an object of step 0 with every `ENTRY_FIELDS`, its
    accuracies and truncation share in [0, 1], its mean length a finite number >= 0."""
    if not isinstance(entry, dict) or entry.get("step") != 0 or any(k not in entry for k in ENTRY_FIELDS):
        return False
    nums = [entry[k] for k in ENTRY_FIELDS[1:]]
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in nums):
        return False
    return all(0 <= entry[k] <= 1 for k in ("acc/sample", "acc/greedy", "trunc/frac")) and entry["len/mean"] >= 0
