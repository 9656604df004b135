"""Claim V1: what the critic costs. PPO (policy + value model, GAE) vs GRPO at equal generated samples.

Each arm runs in its own process (peak memory is a per-process high-water mark): one warm-up step,
then --steps measured RL steps with the same prompts, group size and budget. Printed per arm: median
step time (wall and this process's CPU time, which other jobs on a busy machine disturb less) and its
phases; the peak memory of building the Trainer and running the steps, above the process's memory
once torch, transformers and peft are loaded (CPU: RSS sampled every 2 ms in a second run of the arm
with MMAP_ENV; CUDA: max allocated); and the exact static bytes of parameters + optimiser states.
Then the ratios PPO / GRPO beside the parameter-count arithmetic at 0.5B (gpolib.value.cost_arithmetic).
Timings are ratios from one invocation; on a busy machine rerun it before reading them.

    python benchmarks/value_cost.py --steps 3
    python benchmarks/value_cost.py --threads 1 --json benchmarks/value_cost_cpu.json   # notebook 07 reads it
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class PeakMemory:
    """Peak memory of a block above its start: CUDA max allocated, or on the CPU the resident set size
    sampled every 2 ms by a thread (ru_maxrss would include the model loading before the block)."""

    def __init__(self, device: str):
        self.device, self.peak, self.start, self._stop = device, 0, 0, threading.Event()

    @staticmethod
    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()

    def _watch(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, self.rss())

    def __enter__(self):
        import torch
        if self.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
            self.start = torch.cuda.memory_allocated()
        else:
            self.start = self.peak = self.rss()
            self._thread = threading.Thread(target=self._watch, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        import torch
        if self.device.startswith("cuda"):
            self.peak = torch.cuda.max_memory_allocated()
        else:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, self.rss())

    @property
    def above_start(self) -> int:
        return self.peak - self.start


def _static_bytes(trainer) -> int:
    """Parameters of the model (incl. any value adapter) and head, plus every optimiser state tensor."""
    import torch
    params = {id(p): p for p in trainer.model.parameters()}
    opts = [trainer.opt]
    value = getattr(trainer, "value", None)
    if value is not None:
        params.update({id(p): p for p in value.head.parameters()})
        opts.append(value.opt)
    total = sum(p.numel() * p.element_size() for p in params.values())
    for opt in opts:
        for state in opt.state.values():
            total += sum(t.numel() * t.element_size() for t in state.values() if torch.is_tensor(t))
    return total


def run_arm(arm: str, args) -> dict:
    """One arm in this process: build the Trainer, one warm-up step, --steps measured steps."""
    from gpolib.runtime import setup_threads
    setup_threads(args.threads)  # passive OpenMP waiting before torch loads, fixed threads
    import peft  # noqa: F401  (loaded before the memory baseline, as torch and transformers are)
    from gpolib import presets
    from gpolib.train import Trainer, train_step
    budget = {} if args.max_new_tokens is None else {"max_new_tokens": args.max_new_tokens}
    cfg = presets.get(arm, steps=args.steps + 1, prompts_per_step=args.prompts, group_size=args.group,
                      device=args.device, warmup_steps=0, **budget)
    rows = []
    with PeakMemory(args.device) as mem:  # the model, its optimiser states and the steps' working memory
        trainer = Trainer(cfg)
        for step in range(args.steps + 1):
            t0, c0 = time.perf_counter(), time.process_time()
            row = train_step(trainer, step)
            rows.append({**row, "time/step_s": time.perf_counter() - t0, "cpu/step_s": time.process_time() - c0})
    rows = rows[1:]  # step 0 warms up allocators and caches

    def med(key):
        vals = [r[key] for r in rows if r.get(key) is not None]
        return statistics.median(vals) if vals else None
    return {"arm": arm, "samples_per_step": med("gen/samples"), "zero_var_groups": med("groups/zero_var"),
            "step_s": med("time/step_s"), "cpu_s": med("cpu/step_s"), "rollout_s": med("time/rollout_s"),
            "train_s": med("time/train_s"), "value_s": med("time/value_s"),
            "peak_bytes_above_start": mem.above_start, "static_bytes": _static_bytes(trainer)}


MMAP_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}
"""glibc serves blocks >= 64 KiB by mmap and unmaps them on free, so the sampled RSS tracks the live
tensors instead of the allocator's retained heap (it slows the process: timings come from a run without it)"""


def _child(arm: str, env: dict) -> dict:
    """Run one arm in a fresh process (with `env` added) and return its JSON result."""
    out = subprocess.run([sys.executable, __file__, "--arm", arm] + sys.argv[1:], check=True, capture_output=True,
                         text=True, cwd=ROOT, env={**os.environ, **env}).stdout
    return json.loads(out.strip().splitlines()[-1])


def arithmetic_05b(lora_r: int) -> dict:
    from transformers import Qwen2Config
    from gpolib.value import cost_arithmetic
    qwen25_05b = Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                             num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True)
    return cost_arithmetic(qwen25_05b, lora_r)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default: TrainConfig's")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default="", help="also write the results, the machine and the 0.5B arithmetic here")
    ap.add_argument("--arm", help=argparse.SUPPRESS)  # internal: run one arm and print its JSON
    args = ap.parse_args()
    if args.arm:
        print(json.dumps(run_arm(args.arm, args)))
        return
    results = {}
    for arm in ("grpo", "ppo"):
        results[arm] = _child(arm, {})
        if not args.device.startswith("cuda"):  # memory from a second run whose RSS follows the live bytes
            results[arm]["peak_bytes_above_start"] = _child(arm, MMAP_ENV)["peak_bytes_above_start"]
    mib = lambda b: f"{b / 2**20:8.1f} MiB"
    for arm, r in results.items():
        value = "" if r["value_s"] is None else f", of which value {r['value_s']:.2f}"
        print(f"{arm:5s} samples/step {r['samples_per_step']:.0f} (zero-variance groups {r['zero_var_groups']:.2f}: "
              f"GRPO skips their rows)\n      step {r['step_s']:.2f} s wall, {r['cpu_s']:.2f} s CPU (rollout {r['rollout_s']:.2f}, "
              f"train {r['train_s']:.2f}{value})  peak {mib(r['peak_bytes_above_start'])}  static {mib(r['static_bytes'])}")
    g, p = results["grpo"], results["ppo"]
    print(f"PPO / GRPO: step time x{p['step_s'] / g['step_s']:.2f} wall, x{p['cpu_s'] / g['cpu_s']:.2f} CPU, peak memory x"
          f"{p['peak_bytes_above_start'] / max(g['peak_bytes_above_start'], 1):.2f}, static bytes x{p['static_bytes'] / g['static_bytes']:.2f}")
    a = arithmetic_05b(16)
    gb = lambda b: f"{b / 1e9:.2f} GB"
    print(f"Qwen2.5-0.5B, LoRA r=16 on 7 projections, bf16 weights, AdamW fp32 on LoRA (16 B/param):\n"
          f"  P = {a['P']:,} base parameters; L = {a['L']:,} LoRA parameters per adapter; head {a['head']}\n"
          f"  GRPO  = 2 P + 16 L               = {gb(a['grpo_bytes'])}\n"
          f"  PPO   = 2 P + 16 (2 L + head)    = {gb(a['ppo_shared_bytes'])}  (x{a['ratio_shared']:.3f}; value adapter on the shared base)\n"
          f"  PPO'  = 4 P + 16 (2 L + head)    = {gb(a['ppo_copy_bytes'])}  (x{a['ratio_copy']:.3f}; a separate copy of the base)")
    if args.json:
        from gpolib import jsonio
        from gpolib.bench.common import environment, matmul_peak_gflops
        peak = matmul_peak_gflops(threads=args.threads, device=args.device)  # after the arms: none of them shares the cores
        settings = {k: getattr(args, k) for k in ("steps", "prompts", "group", "max_new_tokens", "device", "threads")}
        Path(args.json).write_text(jsonio.dumps({"settings": settings, "environment": environment(),
                                                 "matmul_peak_gflops": peak, "results": results,
                                                 "arithmetic_05b": a}, indent=1) + "\n")
        print(f"matmul peak {peak:.1f} GFLOP/s at {args.threads} thread(s); results in {args.json}")


if __name__ == "__main__":
    main()
