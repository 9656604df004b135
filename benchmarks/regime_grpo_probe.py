"""Would the candidate harder regime of `regime_probe.py` also show the dynamics DESIGN.md asks of GRPO?

The candidate: the shipped dense model, unchanged, on chains of exactly `--n-ops` operators with a product at each
step with probability `--p-mul` (regime_probe.py: base accuracy 0.445, truncation 6.0% at 144 tokens for 6 / 0.5).
This writes a train and a validation split of that distribution to a scratch folder (never over data/tasks), runs
GRPO with the default hyper-parameters and the given budget, and prints held-out (validation) accuracy, mean
length and truncation at each evaluation. DESIGN's dynamics targets: accuracy still rising after step 50, mean
length >= 20% above the base. One seed: a feasibility probe for the next regime, not evidence for a claim. The
committed outputs (regime_grpo_probe_*.json) were measured on the models of the build before the splits changed.

    python benchmarks/regime_grpo_probe.py --max-new-tokens 144 --steps 100 [--out benchmarks/regime_grpo_probe_144.json]
"""
from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

from gpolib import presets, tasks
from gpolib.runtime import setup_threads


def write_candidate(folder: Path, n_ops: int, p_mul: float, sizes: dict, seed: int = 7) -> dict:
    """train / val splits of the candidate distribution, disjoint by prompt; {split: path}."""
    rng, seen, out = random.Random(seed), set(), {}
    for split, n in sizes.items():
        rows = []
        while len(rows) < n:
            p = tasks.make_problem(rng, n_ops, p_mul=p_mul)
            if p.prompt not in seen:
                seen.add(p.prompt)
                rows.append(tasks.split_row(p, split, len(rows)))
        out[split] = folder / f"{split}.jsonl"
        out[split].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-ops", type=int, default=6)
    ap.add_argument("--p-mul", type=float, default=0.5)
    ap.add_argument("--max-new-tokens", type=int, default=144)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=25)
    ap.add_argument("--eval-prompts", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    setup_threads(args.threads)
    from gpolib.train import train

    with tempfile.TemporaryDirectory() as tmp:
        split = write_candidate(Path(tmp), args.n_ops, args.p_mul, {"train": 4000, "val": args.eval_prompts})
        cfg = presets.get("grpo", task_train=str(split["train"]), task_eval=str(split["val"]), steps=args.steps,
                          max_new_tokens=args.max_new_tokens, eval_every=args.eval_every,
                          eval_prompts=args.eval_prompts, seed=args.seed)
        train(cfg, Path(tmp) / "run", progress=False)
        summary = json.loads((Path(tmp) / "run" / "summary.json").read_text())
    rows = [{k: e.get(k) for k in ("step", "acc/sample", "acc/greedy", "len/mean", "trunc/frac")} for e in summary["eval"]]
    for r in rows:
        print(json.dumps(r))
    base, last = rows[0], rows[-1]
    after50 = [r for r in rows if r["step"] >= 50]
    verdict = {"length growth": last["len/mean"] / base["len/mean"] - 1,
               "accuracy rise after step 50": after50[-1]["acc/sample"] - after50[0]["acc/sample"] if len(after50) > 1 else None,
               "wall_s": summary.get("wall_s")}
    print(json.dumps(verdict))
    if args.out:
        meta = {k: getattr(args, k) for k in ("n_ops", "p_mul", "max_new_tokens", "steps", "eval_every", "eval_prompts",
                                              "seed", "threads")}
        Path(args.out).write_text(json.dumps({"meta": meta, "evals": rows, "summary": verdict}, indent=1) + "\n")


if __name__ == "__main__":
    main()
