"""What a run was computed from, and the folder name that follows from it.

A run is identified by its configuration (`TrainConfig.identity()`, the non-default fields) and by
the data behind the configured names: the base model's files (weights, config, tokenizer) and the
train / evaluation task files. Two runs with the same config on different weights or tasks get
different keys, so a run computed on an old model or task is never reused for a new one.

No torch or transformers import: the key is computed before anything heavy loads.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .paths import resolve

MODEL_FILES = ("config.json", "generation_config.json", "*.safetensors", "*.bin", "tokenizer*", "*.model",
               "vocab*", "merges.txt", "special_tokens_map.json", "chat_template*")
"""files of a local model folder that change what it computes (its README, logs and metrics do not)"""

_CACHE: dict = {}


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, cached per (path, size, mtime) within the process."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _CACHE:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _CACHE[key] = h.hexdigest()
    return _CACHE[key]


def model_fingerprint(name_or_path: str) -> str:
    """'sha256:<hex>' over a local model folder's MODEL_FILES (name and bytes), 'hub:<name>' for a hub name,
    'missing:<path>' for a local-looking path that does not exist (loading it fails later, naming it)."""
    p = resolve(name_or_path)
    if p.is_dir():
        files = sorted({f for pattern in MODEL_FILES for f in p.glob(pattern) if f.is_file()})
        h = hashlib.sha256()
        for f in files:
            h.update(f"{f.name}:{file_sha256(f)}\n".encode())
        return f"sha256:{h.hexdigest()}"
    if str(name_or_path).startswith((".", "/", "~", "data/")):
        return f"missing:{name_or_path}"
    return f"hub:{name_or_path}"


def task_fingerprint(path: str) -> str:
    """'sha256:<hex>' of a task file, 'missing:<path>' if there is none."""
    p = resolve(path)
    return f"sha256:{file_sha256(p)}" if p.is_file() else f"missing:{path}"


def data_fingerprint(cfg) -> dict:
    """What the run reads besides its config: {"model", "task_train", "task_eval"} -> fingerprint."""
    return {"model": model_fingerprint(cfg.model), "task_train": task_fingerprint(cfg.task_train),
            "task_eval": task_fingerprint(cfg.task_eval)}


def check_data(cfg, data: dict | None = None) -> dict:
    """The data fingerprint; raises FileNotFoundError naming the field whose local model or task path is missing."""
    data = data if data is not None else data_fingerprint(cfg)
    for field, fp in data.items():
        if fp.startswith("missing:") and field != "model" and resolve(getattr(cfg, field)).is_dir():
            raise FileNotFoundError(f"{field}={getattr(cfg, field)!r} is invalid: it is a directory; allowed: an "
                                    "existing task file (JSONL)")
        if fp.startswith("missing:"):
            what = "a local model folder or a hub name" if field == "model" else "an existing task file (JSONL)"
            raise FileNotFoundError(f"{field}={getattr(cfg, field)!r} is invalid: not found from here or the "
                                    f"repository root; allowed: {what}")
    return data


def run_key(cfg, data: dict | None = None) -> str:
    """sha256 (16 hex digits) of the config's identity and its data fingerprint: the run-cache key."""
    blob = {"config": cfg.identity(), "data": data if data is not None else data_fingerprint(cfg)}
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def folder_name(name: str, cfg) -> str:
    """A run's folder: the readable arm/seed name, then the first 8 digits of its key ("grpo-seed0-1a2b3c4d")."""
    return f"{name.replace('/', '-')}-{run_key(cfg)[:8]}"


def data_diff(recorded: dict | None, current: dict) -> list:
    """Which of model / task_train / task_eval differ; ["unknown"] when nothing was recorded."""
    if not recorded:
        return ["unknown"]
    return sorted(k for k in set(recorded) | set(current) if recorded.get(k) != current.get(k))
