"""The cost of one cell of P3's grid: seconds per RL step of a grid cell (full profile: 16 prompts x 8, mu, the
bf16 rollout engine, a routing pass after every optimiser step), per mode, on one thread, with the machine's load
(`os.getloadavg`) and one thread's fp32 matmul peak beside; the whole grid estimated from it. Writes one JSON line per call to
benchmarks/moe_grid_cost.jsonl.

    python benchmarks/moe_grid_cost.py --mu 8 --steps 2
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

OUT = Path(__file__).with_name("moe_grid_cost.jsonl")


def main(argv=None) -> None:
    from gpolib import presets
    from gpolib.bench.common import matmul_peak_gflops
    from gpolib.lab.moe_grid import BALANCED, grid_arms
    from gpolib.train import Trainer, train_step

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mu", type=int, default=8)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--modes", nargs="+", default=["lora", "full"])
    p.add_argument("--model", default=BALANCED)
    p.add_argument("--full-lr-scale", type=float, default=0.1)
    args = p.parse_args(argv)
    peak = matmul_peak_gflops(threads=1)  # sets one thread
    cells = grid_arms(lr_mults=[1], mus=[args.mu], modes=args.modes, full_lr_scale=args.full_lr_scale,
                      steps=args.steps, eval_prompts=1, model=args.model)
    for arm, spec in cells.items():
        cfg = presets.get("grpo", **{k: v for k, v in spec.items() if k != "preset"}, prompts_per_step=16, group_size=8)
        load0, t0 = os.getloadavg()[0], time.perf_counter()
        trainer = Trainer(cfg)
        t_init = time.perf_counter() - t0
        rows = []
        for step in range(args.steps):
            t = time.perf_counter()
            row = train_step(trainer, step)
            rows.append({"wall_s": round(time.perf_counter() - t, 1), "rollout_s": round(row["time/rollout_s"], 1),
                         "train_s": round(row["time/train_s"], 1), "len": round(row["len/mean"], 1)})
        out = {"cell": arm, "model": args.model, "threads": torch.get_num_threads(),
               "matmul_peak_gflops_1thread": round(peak, 1), "init_s": round(t_init, 1),
               "steps": rows, "load_1min": [round(load0, 2), round(os.getloadavg()[0], 2)]}
        with open(OUT, "a") as fh:
            fh.write(json.dumps(out) + "\n")
        print(json.dumps(out))


if __name__ == "__main__":
    main()
