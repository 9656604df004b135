"""Base-policy metrics of the embedded models: accuracy, groups, lengths, forms, truncation, speed.

Pure temperature sampling (T = 1, no top-k / top-p) with the workbook's rollout sampler, G samples per
held-out prompt, the default generation budget. Prints one JSON object per model; with --write-card,
stores it as base_metrics.json next to the model and refreshes the model card.

    python benchmarks/base_metrics.py --arch dense moe --write-card
    python benchmarks/base_metrics.py --arch moe-fine --write-card   # with the routing statistics
    python benchmarks/base_metrics.py --arch dense --entropy-only    # adds entropy/mean to the existing card
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict

import torch

from gpolib import router_stats
from gpolib.config import TrainConfig
from gpolib.logprobs import completion_logps
from gpolib.models import EMBEDDED, load_policy
from gpolib.rewards import correctness_reward
from gpolib.rollout import generate
from gpolib.tasks import default_task_path, load_tasks, product_steps

TARGETS = {"accuracy": (0.25, 0.50), "groups/all_correct": (0.05, 1.0), "groups/all_wrong": (0.05, 1.0),
           "len/hardest_bucket": (80, float("inf")), "trunc/frac": (0.03, 0.10)}
"""metric -> accepted [low, high] range of the base policies (DESIGN.md, 'The embedded task and models')"""
HARDEST = 12
"""prompts with hardness >= HARDEST form the hardest bucket"""
ROUTING_PROMPTS = 64
"""MoE: the routing statistics are taken over one sample of each of the first ROUTING_PROMPTS held-out prompts"""


def sample(model, tok, rows: list, group: int, max_new_tokens: int, batch_prompts: int = 32):
    texts, lengths, truncated, wall = [], [], [], 0.0
    for i in range(0, len(rows), batch_prompts):
        start = time.perf_counter()
        ro = generate(model, tok, [r["prompt"] for r in rows[i:i + batch_prompts]], group, max_new_tokens)
        wall += time.perf_counter() - start
        texts += ro.texts
        lengths += ro.lengths.tolist()
        truncated += ro.truncated.tolist()
    return texts, lengths, truncated, wall


def _mean(xs) -> float | None:
    return round(statistics.mean(xs), 4) if xs else None


def form_stats(texts: list) -> dict:
    """Accuracy of product steps by multiplicand digits and form, and the share written long."""
    acc, long_share = defaultdict(list), defaultdict(list)
    for t in texts:
        for s in product_steps(t):
            acc[f"{s['digits']}-digit {s['form']}"].append(s["ok"])
            long_share[f"{s['digits']}-digit"].append(s["form"] == "long")
    return {"step_acc": {k: _mean(v) for k, v in sorted(acc.items()) if len(v) >= 20},
            "long_share": {k: _mean(v) for k, v in sorted(long_share.items()) if len(v) >= 20}}


def measure(path: str, n_prompts: int, group: int, max_new_tokens: int, seed: int, split: str = "heldout") -> dict:
    """Steps: 1. load the base (no LoRA); 2. sample G per prompt of `split`'s first prompts; 3. score; 4. summarise."""
    model, tok = load_policy(path, lora_r=0)
    model.eval()
    rows = load_tasks(default_task_path(split))[:n_prompts]
    torch.manual_seed(seed)
    texts, lengths, truncated, wall = sample(model, tok, rows, group, max_new_tokens)
    per_row = [r for r in rows for _ in range(group)]
    rewards = [correctness_reward(t, r["answer"]) for t, r in zip(texts, per_row)]
    sums = [sum(rewards[i:i + group]) for i in range(0, len(rewards), group)]
    by_hardness = defaultdict(list)
    for r, row in zip(rewards, per_row):
        by_hardness[min(row["hardness"] // 3 * 3, HARDEST)].append(r)
    return {"model": path, "split": split, "n_prompts": len(rows), "G": group, "max_new_tokens": max_new_tokens,
            "accuracy": _mean(rewards), "groups/all_correct": _mean([s == group for s in sums]),
            "groups/all_wrong": _mean([s == 0 for s in sums]),
            "groups/mixed": _mean([0 < s < group for s in sums]),
            "len/mean": _mean(lengths), "len/correct": _mean([n for n, r in zip(lengths, rewards) if r]),
            "len/incorrect": _mean([n for n, r in zip(lengths, rewards) if not r]),
            "len/hardest_bucket": _mean([n for n, row in zip(lengths, per_row) if row["hardness"] >= HARDEST]),
            "trunc/frac": _mean(truncated),
            "accuracy_by_hardness": {f"{k}+" if k == HARDEST else f"{k}-{k + 2}": _mean(v)
                                     for k, v in sorted(by_hardness.items())},
            **form_stats(texts), "speed/tokens_per_s": round(sum(lengths) / wall),
            "torch_threads": torch.get_num_threads()}


@torch.no_grad()
def routing(model, tok, rows: list, max_new_tokens: int) -> dict:
    """MoE: expert load and router margin (`router_stats.routing_stats`) over the completion tokens of one sample per prompt."""
    ro = generate(model, tok, [r["prompt"] for r in rows[:ROUTING_PROMPTS]], 1, max_new_tokens)
    probs: list = []
    with router_stats.record_router_probs(model, probs):
        completion_logps(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                         chunk_rows=len(ro.texts), bucket=False)
    comp = torch.cat([torch.zeros_like(ro.prompt_mask), ro.completion_mask], dim=1)  # (B, P+T)
    stats = router_stats.routing_stats(probs, comp.reshape(-1), model.config.num_experts_per_tok)
    return {"n_prompts": len(ro.texts), **stats,
            "dead_experts": dead_experts(probs, comp.reshape(-1), model.config.num_experts_per_tok)}


def dead_experts(probs: list, mask: torch.Tensor, k: int) -> list:
    """Per layer, the experts that no token of `mask` (N,) has in its top-k (router probabilities per layer (N, E))."""
    keep = mask.reshape(-1).bool()  # (N,)
    out = []
    for p in probs:
        picks = p[keep.to(p.device)].topk(k, dim=-1).indices.reshape(-1)  # (n * k,)
        out.append(int((torch.bincount(picks, minlength=p.shape[-1]) == 0).sum()))
    return out


@torch.no_grad()
def entropy(model, tok, rows: list, group: int, max_new_tokens: int, seed: int) -> dict:
    """The base policy's mean per-token entropy (nats) over the completion tokens of G samples at T = 1 of each of
    the first ROUTING_PROMPTS held-out prompts: the scale of D1's smallest effect of interest (DESIGN, delta)."""
    torch.manual_seed(seed)
    ro = generate(model, tok, [r["prompt"] for r in rows[:ROUTING_PROMPTS]], group, max_new_tokens)
    _, ent = completion_logps(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                              with_entropy=True)  # (B, T) each
    mask = ro.completion_mask.bool()
    return {"entropy/mean": round(ent[mask].double().mean().item(), 5), "entropy/n_tokens": int(mask.sum())}


def add_to_card(path: str, extra: dict) -> None:
    """Add `extra` to the model's base_metrics.json, leaving every other field as it is."""
    from pathlib import Path

    card = Path(path) / "base_metrics.json"
    data = json.loads(card.read_text())
    data.update(extra)
    card.write_text(json.dumps(data, indent=1) + "\n")


def check(metrics: dict) -> dict:
    return {k: lo <= metrics[k] <= hi for k, (lo, hi) in TARGETS.items()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", nargs="+", default=["dense", "moe"], choices=sorted(EMBEDDED))
    p.add_argument("--n-prompts", type=int, default=256)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=TrainConfig().max_new_tokens)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--routing", nargs="*", default=["moe-fine", "moe-balanced", "moe-floor"], choices=sorted(EMBEDDED),
                   help="the MoE models whose expert load and router margin are measured too")
    p.add_argument("--write-card", action="store_true", help="write base_metrics.json and README.md")
    p.add_argument("--entropy-only", action="store_true",
                   help="measure only the mean per-token entropy and add it to each model's base_metrics.json")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.entropy_only:
        for arch in args.arch:
            model, tok = load_policy(EMBEDDED[arch], lora_r=0)
            got = entropy(model.eval(), tok, load_tasks(default_task_path("heldout")), args.group,
                          args.max_new_tokens, args.seed)
            print(json.dumps({"arch": arch, **got}))
            add_to_card(EMBEDDED[arch], got)
        return
    for arch in args.arch:
        m = measure(EMBEDDED[arch], args.n_prompts, args.group, args.max_new_tokens, args.seed)
        m["targets_met"] = check(m)
        if arch in args.routing:
            model, tok = load_policy(EMBEDDED[arch], lora_r=0)
            m["routing"] = routing(model.eval(), tok, load_tasks(default_task_path("heldout")), args.max_new_tokens)
        print(json.dumps({"arch": arch, **m}))
        if args.write_card:
            from gpolib.model_card import write_model_card

            write_model_card(EMBEDDED[arch], m)


if __name__ == "__main__":
    main()
