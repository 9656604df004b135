"""The gpu code path on a random-weight model: seconds per RL step, tokens/s, peak GPU memory.

Run by benchmarks/gpu_check.sh (which builds the model first). One process: a warm-up step, then
`--steps` timed steps of `train_step` on `--preset` with chat-template prompts, bf16 (where the GPU
supports it), gradient checkpointing and LoRA, exactly the configuration the gpu profile uses, but
with the model path of the random-weight Qwen2 (no hub). Random weights almost never emit EOS, so
every completion runs to max_new_tokens: the numbers are the budget's worst case.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def gpu_config(model: str, preset: str, device: str, **overrides):
    """The gpu profile's TrainConfig for `model` (bf16 when the device supports it)."""
    import torch

    from gpolib import presets

    bf16 = device == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    base = dict(model=model, device=device, dtype="bfloat16" if bf16 else "float32", prompt_style="chat",
                gradient_checkpointing=True, eval_prompts=8)
    return presets.get(preset, **{**base, **overrides})


def run(cfg, steps: int) -> dict:
    """Warm-up + `steps` timed train_steps; per-step seconds, generated tokens/s, peak memory."""
    import torch

    from gpolib.train import Trainer, train_step

    cuda = cfg.device == "cuda"
    trainer = Trainer(cfg)
    train_step(trainer, 0)  # warm-up: kernels, allocator, caches
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times, tokens = [], []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        row = train_step(trainer, step)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        tokens.append(row["gen/tokens"])
    return {"device": torch.cuda.get_device_name() if cuda else "cpu", "dtype": cfg.dtype, "preset": cfg.name,
            "prompts_per_step": cfg.prompts_per_step, "group_size": cfg.group_size,
            "max_new_tokens": cfg.max_new_tokens, "mu": cfg.mu, "steps_timed": steps,
            "s_per_step_median": statistics.median(times), "s_per_step": times,
            "gen_tokens_per_s": sum(tokens) / sum(times),
            "peak_gpu_mem_gb": torch.cuda.max_memory_allocated() / 2 ** 30 if cuda else None,
            "gradient_checkpointing": bool(getattr(trainer.model, "is_activation_checkpointing", False))}


def main(argv: list | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", required=True, help="folder written by scale/random_qwen.py")
    p.add_argument("--preset", default="grpo")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--device", default="cuda")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=256)
    a = p.parse_args(argv)
    cfg = gpu_config(a.model, a.preset, a.device, prompts_per_step=a.prompts, group_size=a.group,
                     max_new_tokens=a.max_new_tokens, steps=a.steps + 1)
    out = run(cfg, a.steps)
    print(f"{out['device']} {out['dtype']} {out['preset']}: {out['s_per_step_median']:.2f} s/step (median of "
          f"{a.steps}), {out['gen_tokens_per_s']:.0f} generated tokens/s, peak GPU memory "
          f"{out['peak_gpu_mem_gb'] if out['peak_gpu_mem_gb'] is None else round(out['peak_gpu_mem_gb'], 2)} GiB")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
