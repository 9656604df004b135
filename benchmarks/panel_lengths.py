"""How long are the dense base's responses, and how accurate, as chains get longer? (how notebook 02's panel was chosen)

S1 (DESIGN) needs responses that reach 200 tokens; the RL splits' 6-operator chains give ~80. This samples the
shipped dense base (no LoRA) at T = 1, top-p 1, on chains of more operators than the splits hold
(`gpolib.tasks.make_chain`, the splits' product probability 0.5), PROMPTS prompts x G samples per operator count,
one budget large enough that almost no response is cut (`--budget`, within the model's 512-token context), and
prints per operator count: mean / quantiles / max of the response length, the share of responses reaching
200 tokens, the share cut at the budget, and the accuracy (strict reward). One sampling seed, one thread.

    python benchmarks/panel_lengths.py --out benchmarks/panel_lengths_cpu.json
"""
from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np
import torch

from gpolib import tasks
from gpolib.models import load_policy
from gpolib.rewards import correctness_reward
from gpolib.rollout import generate
from gpolib.runtime import setup_threads

N_OPS = (6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40)
"""operator counts probed (the splits hold 6)"""
REACH = 200
"""the length S1 judges (DESIGN)"""


def probe(model, tok, n_ops: int, prompts: int, group: int, budget: int, seed: int) -> dict:
    """One operator count: PROMPTS chains, G samples each at T = 1; length and accuracy statistics."""
    rng = random.Random(f"{seed}-{n_ops}")
    problems = [tasks.make_chain(rng, n_ops, p_mul=tasks.SPLIT_P_MUL) for _ in range(prompts)]
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    ro = generate(model, tok, [p.prompt for p in problems], group, budget)
    wall = time.perf_counter() - t0
    lengths = ro.lengths.numpy()
    correct = np.array([correctness_reward(t, problems[j // group].answer) for j, t in enumerate(ro.texts)])
    per_prompt = correct.reshape(prompts, group).mean(1)
    return {"n_ops": n_ops, "len_mean": float(lengths.mean()), "len_q10": float(np.quantile(lengths, 0.1)),
            "len_q50": float(np.median(lengths)), "len_q90": float(np.quantile(lengths, 0.9)),
            "len_max": int(lengths.max()), f"reach_{REACH}": float((lengths >= REACH).mean()),
            "cut": float(ro.truncated.float().mean()), "acc": float(correct.mean()),
            "mixed_groups": float(((per_prompt > 0) & (per_prompt < 1)).mean()), "wall_s": round(wall, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="data/models/tiny-qwen3")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--budget", type=int, default=384)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-ops", type=int, nargs="+", default=list(N_OPS))
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    setup_threads(1)
    model, tok = load_policy(args.model, lora_r=0)
    model.eval()
    rows = []
    for n in args.n_ops:
        rows.append({k: round(v, 4) if isinstance(v, float) else v
                     for k, v in probe(model, tok, n, args.prompts, args.group, args.budget, args.seed).items()})
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        meta = {"model": args.model, "prompts": args.prompts, "group": args.group, "budget": args.budget,
                "seed": args.seed, "p_mul": tasks.SPLIT_P_MUL, "temperature": 1.0, "threads": 1}
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
