"""Which load-balancing loss revives the fine MoE's dead experts: a sweep of the coefficient and its form.

Each setting continues the fine MoE (`data/models/tiny-qwen3-moe-fine`, 800 steps at aux 0.01, 3-12 experts per layer
never routed on held-out tokens) for `--steps` steps at a low lr with one load-balancing coefficient, in
transformers' pooled form (expert counts summed over the layers) or per layer (`pretrain.balance_per_layer`), into a
scratch folder; then measures, on held-out prompts, the routing of the model card (`base_metrics.routing`: each
expert's share of the activated (token, slot) pairs, min / max per layer), the dead experts per layer, the premise
of P3 (`gspo_moe.load_balance`: every expert's share >= 0.25 x 1/E in every layer) and the sampled accuracy. One
setting per call, one JSON line appended to `--results`; `--table` prints the collected sweep as markdown.
Recipes are chosen on validation prompts (`--split val`); the card then measures the chosen model on held-out ones.

    python benchmarks/moe_balance_sweep.py --work SCRATCH --coef 0.2 --per-layer
    python benchmarks/moe_balance_sweep.py --work SCRATCH --coef 0   # the fine MoE itself, untouched (steps 0)
    python benchmarks/moe_balance_sweep.py --table
    python benchmarks/moe_balance_sweep.py --premise data/models/tiny-qwen3-moe-balanced --n-prompts 512
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).with_name("moe_balance_sweep.jsonl")
"""one JSON object per measured setting"""


def routing_summary(path: str, max_new_tokens: int, split: str = "heldout") -> dict:
    """The card's routing record of the model at `path`, on `split`'s prompts, with the dead experts per layer and
    P3's premise."""
    from base_metrics import routing

    from gpolib.lab.gspo_moe import load_balance
    from gpolib.models import load_policy
    from gpolib.tasks import default_task_path, load_tasks

    model, tok = load_policy(path, lora_r=0)
    torch.manual_seed(0)
    r = routing(model.eval(), tok, load_tasks(default_task_path(split)), max_new_tokens)
    premise = load_balance(r)
    return {**r, "premise": premise.word, "premise_text": premise.text}


def run(args) -> dict:
    from base_metrics import measure

    from gpolib.models import EMBEDDED
    from gpolib.pretrain import PretrainConfig, pretrain

    name = ((f"from-{Path(args.init).name}-" if args.init else "")
            + f"aux{args.coef:g}-{'layer' if args.per_layer else 'pooled'}-{args.steps}"
            + (f"-floor{args.floor_coef:g}x{args.floor:g}" if args.floor_coef else "") + (f"-lr{args.lr:g}"))
    path, wall = args.measure or EMBEDDED["moe-fine"], 0.0
    if args.measure:
        name = args.setting or args.measure
    elif args.coef > 0:
        cfg = PretrainConfig(arch=args.arch, init=args.init or EMBEDDED["moe-fine"], steps=args.steps, lr=args.lr,
                             warmup=args.warmup, micro_batches=4, aux_coef=args.coef, aux_per_layer=args.per_layer,
                             floor_coef=args.floor_coef, floor=args.floor, seed=args.seed, out=str(Path(args.work) / name))
        t0 = time.perf_counter()
        pretrain(cfg, show_progress=False)
        wall, path = time.perf_counter() - t0, cfg.out
    else:
        name = "fine MoE (no continuation)"
    acc = measure(path, args.n_prompts, args.group, args.max_new_tokens, seed=0, split=args.split)
    out = {"setting": name, "split": args.split, "coef": args.coef, "floor_coef": args.floor_coef, "floor": args.floor,
           "per_layer": args.per_layer, "steps": args.steps if args.coef else 0,
           "lr": args.lr, "train_s": round(wall, 1), "threads": torch.get_num_threads(),
           "accuracy": acc["accuracy"], "acc_prompts": acc["n_prompts"], "acc_G": acc["G"],
           "routing": routing_summary(path, args.max_new_tokens, args.split)}
    with open(args.results, "a") as fh:
        fh.write(json.dumps(out) + "\n")
    return out


def premise_on_more_prompts(paths: list, n_prompts: int, seeds=(0, 1)) -> list:
    """P3's premise of each model on one sample of each of the first `n_prompts` held-out prompts (the card reads 64),
    per sampling seed: the lowest expert share per layer over uniform, dead experts, the premise's word. Printed,
    appended to benchmarks/moe_balance_premise_<n>.jsonl."""
    import base_metrics

    from gpolib.lab.gspo_moe import load_balance
    from gpolib.models import load_policy
    from gpolib.tasks import default_task_path, load_tasks

    base_metrics.ROUTING_PROMPTS = n_prompts
    rows, out = load_tasks(default_task_path("heldout")), []
    for path in paths:
        model, tok = load_policy(path, lora_r=0)
        for seed in seeds:
            torch.manual_seed(seed)
            r = base_metrics.routing(model.eval(), tok, rows, 192)
            out.append({"model": path, "prompts": n_prompts, "seed": seed, "n_tokens": r["n_tokens"],
                        "min_over_uniform": [round(x * round(1 / r["uniform_share"]), 3) for x in r["expert_share_min"]],
                        "dead": r["dead_experts"], "premise": load_balance(r).word})
            print(json.dumps(out[-1]), flush=True)
    with open(Path(__file__).with_name(f"moe_balance_premise_{n_prompts}.jsonl"), "a") as fh:
        fh.writelines(json.dumps(o) + "\n" for o in out)
    return out


def table(results: Path) -> str:
    """The collected sweep as markdown (`model_card.sweep_table`, as the balanced model's card shows it)."""
    from gpolib.model_card import sweep_table

    return "\n".join(sweep_table([json.loads(line) for line in results.read_text().splitlines() if line.strip()]))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", help="scratch folder for the continued models (outside the repository)")
    p.add_argument("--coef", type=float, default=0.2, help="load-balancing coefficient; 0: the fine MoE as shipped")
    p.add_argument("--per-layer", action="store_true", help="the Switch loss per layer (else transformers' pooled)")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--floor-coef", type=float, default=0.0, help="coefficient of `pretrain.underload_per_layer`")
    p.add_argument("--floor", type=float, default=0.5, help="its floor, x uniform")
    p.add_argument("--init", default="", help="the model folder training continues (default: the fine MoE)")
    p.add_argument("--arch", default="moe-balanced", help="the continued model's architecture key")
    p.add_argument("--measure", metavar="MODEL", help="measure this model folder (no training) as the row --setting")
    p.add_argument("--setting", default="", help="the row's name with --measure")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--seed", type=int, default=1, help="the data stream's seed (the fine MoE was trained on seed 0)")
    p.add_argument("--n-prompts", type=int, default=256)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=192)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--split", default="heldout", choices=("val", "heldout"),
                   help="prompts the routing and accuracy are measured on: val to choose a recipe (the first rows, "
                        "2026-12-06, were measured on held-out prompts), held-out for the card")
    p.add_argument("--results", type=Path, default=RESULTS)
    p.add_argument("--table", action="store_true", help="print the collected sweep as a markdown table")
    p.add_argument("--premise", nargs="+", metavar="MODEL", help="P3's premise of these models on --n-prompts held-out "
                   "prompts (one sample each, sampling seeds 0 and 1), instead of a sweep setting")
    args = p.parse_args(argv)
    if args.table:
        print(table(args.results))
        return
    if args.premise:
        torch.set_num_threads(args.threads)
        premise_on_more_prompts(args.premise, args.n_prompts)
        return
    torch.set_num_threads(args.threads)
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
