"""Learning-rate sweep that fixes TrainConfig.lr (shared by every preset), judged on the validation split.

    python benchmarks/lr_sweep.py --lrs 1e-3,3e-4 --steps 150 --out /tmp/lr_sweep

GRPO preset on data/models/tiny-qwen3 with the default TrainConfig (16 prompts x 8, mu = 1, LoRA r = 16,
warm-up 5 steps, gradient clipping 1.0); accuracy on data/tasks/val.jsonl (never the held-out split the
claims are judged on): 128 prompts, 4 samples at T = 1, and greedy, every 25 steps.
"""
import argparse
import json
import time

from gpolib import presets
from gpolib.runtime import setup_threads
from gpolib.train import load_summary, train

VAL = "data/tasks/val.jsonl"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lrs", default="1e-3,3e-4")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--out", default="/tmp/lr_sweep")
    args = ap.parse_args(argv)
    setup_threads()
    for lr in [float(x) for x in args.lrs.split(",")]:
        cfg = presets.get("grpo", lr=lr, steps=args.steps, task_eval=VAL, eval_prompts=128, eval_every=25,
                          checkpoint_every=25)
        t0 = time.time()
        train(cfg, f"{args.out}/grpo_lr{lr}", progress=False)
        evals = load_summary(f"{args.out}/grpo_lr{lr}")["eval"]
        print(json.dumps({"lr": lr, "wall_s": round(time.time() - t0), "steps": [e["step"] for e in evals],
                          "acc_sample": [round(e["acc/sample"], 3) for e in evals],
                          "acc_greedy": [round(e["acc/greedy"], 3) for e in evals],
                          "len_mean": [round(e["len/mean"], 1) for e in evals]}), flush=True)


if __name__ == "__main__":
    main()
