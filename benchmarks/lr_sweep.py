"""Learning-rate sweep that fixed TrainConfig.lr (shared by every preset).

    python benchmarks/lr_sweep.py --lrs 1e-3,3e-3,3e-4 --steps 80 --out /tmp/lr_sweep

GRPO preset on data/models/tiny-qwen3, 16 prompts x 8, mu = 1, LoRA r = 16, warm-up 5 steps,
gradient clipping 1.0; held-out accuracy (128 prompts, 4 samples at T = 1, and greedy) every 20 steps.
"""
import argparse
import json
import time

import gpolib  # noqa: F401  (passive OpenMP waiting before torch loads)
import torch

from gpolib import presets
from gpolib.train import load_summary, train


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lrs", default="1e-3,3e-3,3e-4")
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--out", default="/tmp/lr_sweep")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    for lr in [float(x) for x in args.lrs.split(",")]:
        cfg = presets.get("grpo", lr=lr, steps=args.steps, eval_prompts=128, eval_every=20, checkpoint_every=1000)
        t0 = time.time()
        train(cfg, f"{args.out}/grpo_lr{lr}", progress=False)
        evals = load_summary(f"{args.out}/grpo_lr{lr}")["eval"]
        print(json.dumps({"lr": lr, "wall_s": round(time.time() - t0),
                          "acc_sample": [round(e["acc/sample"], 3) for e in evals],
                          "acc_greedy": [round(e["acc/greedy"], 3) for e in evals],
                          "len_mean": [round(e["len/mean"], 1) for e in evals]}), flush=True)


if __name__ == "__main__":
    main()
