"""Memory guard: estimate the peak of one update and refuse a run that cannot fit, before any compute.

What degrades instead of failing: the update always runs in micro-batches of `micro_batch_rows`
rows with gradient accumulation, so memory grows with the micro-batch, not with the rollout batch.
A run is refused only when even one micro-batch (plus weights, optimiser state and the rollout
batch) is estimated to exceed the memory available; the message gives the estimate and the fix.
"""
from __future__ import annotations

import os

import torch

BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def available_bytes(device: str) -> int:
    """Free memory of the device: CUDA free memory, or MemAvailable of /proc/meminfo on the host."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info()[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def estimate_update_bytes(cfg, model_config, n_params: int, n_trainable: int, prompt_len: int = 32) -> dict:
    """Rough peak bytes of one micro-batch update (an upper-side estimate, documented per term)."""
    w = BYTES[cfg.dtype]
    rows = min(cfg.micro_batch_rows, cfg.prompts_per_step * cfg.group_size)
    tokens = rows * (prompt_len + cfg.max_new_tokens)
    hidden = model_config.hidden_size
    layers = model_config.num_hidden_layers
    inter = getattr(model_config, "intermediate_size", 4 * hidden)
    terms = {
        "weights": n_params * w,
        "optimizer": n_trainable * 4 * 4,  # fp32 master grad + two AdamW moments + the update
        # saved activations per token and layer: residual/norms/attention (~12 h) + MLP (3 * intermediate)
        "activations": tokens * layers * (12 * hidden + 3 * inter) * w,
        "logits": rows * cfg.max_new_tokens * model_config.vocab_size * 4 * 3,  # logits, softmax, grad (fp32)
    }
    terms["total"] = sum(terms.values())
    return terms


def check_fits(cfg, model, available: int | None = None) -> dict:
    """Raise MemoryError with the estimate when one micro-batch update would not fit."""
    n_params = sum(p.numel() for p in model.parameters())
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    est = estimate_update_bytes(cfg, model.config, n_params, n_train)
    free = available_bytes(cfg.device) if available is None else available
    if est["total"] > free:
        gib = lambda b: f"{b / 2**30:.2f} GiB"
        detail = ", ".join(f"{k} {gib(v)}" for k, v in est.items() if k != "total")
        raise MemoryError(f"one update needs about {gib(est['total'])} ({detail}) but {gib(free)} is available; "
                          f"lower micro_batch_rows (now {cfg.micro_batch_rows}) or max_new_tokens "
                          f"(now {cfg.max_new_tokens}), or use a smaller model")
    return est
