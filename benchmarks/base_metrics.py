"""Base-policy metrics of the embedded models: accuracy, group outcomes, lengths, speed.

Pure temperature sampling (T=1, top_k=0, top_p=1) with `model.generate`, left padding,
G samples per held-out prompt. Prints one JSON object per model; with --write-card,
stores it as base_metrics.json next to the model and refreshes the model card.

    python benchmarks/base_metrics.py --arch dense moe --write-card
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpolib.models import EMBEDDED, load_policy  # noqa: E402
from gpolib.rewards import correctness_reward  # noqa: E402
from gpolib.tasks import default_task_path, load_tasks  # noqa: E402

TARGETS = {"accuracy": (0.30, 0.80), "groups/all_correct": (0.05, 0.40), "groups/all_wrong": (0.02, 1.0),
           "len/correct_cv": (0.20, float("inf")), "speed/time_512_s": (0.0, 5.0)}
"""metric -> accepted [low, high] range of the base policies"""


@torch.no_grad()
def sample(model, tok, prompts: list[str], max_new_tokens: int, batch_size: int):
    """Completions (decoded), lengths in new tokens (incl. EOS), truncation flags, wall seconds."""
    texts, lengths, truncated, wall = [], [], [], 0.0
    for i in range(0, len(prompts), batch_size):
        enc = tok(prompts[i:i + batch_size], return_tensors="pt", padding=True)
        start = time.perf_counter()
        out = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                             max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id,
                             eos_token_id=tok.eos_token_id)
        wall += time.perf_counter() - start
        new = out[:, enc.input_ids.shape[1]:]  # (b, <= max_new_tokens)
        is_eos = new == tok.eos_token_id
        has_eos = is_eos.any(1)
        n = torch.where(has_eos, is_eos.int().argmax(1) + 1, torch.full_like(has_eos, new.shape[1], dtype=torch.long))
        texts += tok.batch_decode(new, skip_special_tokens=True)
        lengths += n.tolist()
        truncated += (~has_eos).tolist()
    return texts, lengths, truncated, wall


def group_stats(rewards: list[float], group: int) -> dict:
    sums = [sum(rewards[i:i + group]) for i in range(0, len(rewards), group)]
    n = len(sums)
    return {"groups/all_correct": sum(s == group for s in sums) / n, "groups/all_wrong": sum(s == 0 for s in sums) / n,
            "groups/mixed": sum(0 < s < group for s in sums) / n}


def length_stats(lengths: list[int], rewards: list[float]) -> dict:
    good = [n for n, r in zip(lengths, rewards) if r == 1.0]
    bad = [n for n, r in zip(lengths, rewards) if r == 0.0]
    mean_good = statistics.mean(good) if good else float("nan")
    std_good = statistics.pstdev(good) if good else float("nan")
    return {"len/correct": mean_good, "len/correct_std": std_good, "len/correct_cv": std_good / mean_good,
            "len/incorrect": statistics.mean(bad) if bad else float("nan")}


def measure(path: str, n_prompts: int, group: int, max_new_tokens: int, seed: int, batch_size: int) -> dict:
    """Steps: 1. load the base (no LoRA); 2. sample G per prompt; 3. score; 4. time 512 samples."""
    model, tok = load_policy(path, lora_r=0)
    model.eval()
    rows = load_tasks(default_task_path("heldout"))[:n_prompts]
    prompts = [r["prompt"] for r in rows for _ in range(group)]
    answers = [r["answer"] for r in rows for _ in range(group)]
    torch.manual_seed(seed)
    texts, lengths, truncated, _ = sample(model, tok, prompts, max_new_tokens, batch_size)
    rewards = [correctness_reward(t, a) for t, a in zip(texts, answers)]
    _, speed_lengths, _, wall = sample(model, tok, prompts[:512], max_new_tokens, 512)
    by_ops = {}
    for r, row in zip(rewards, [row for row in rows for _ in range(group)]):
        by_ops.setdefault(row["n_ops"], []).append(r)
    return {"model": path, "n_prompts": len(rows), "G": group, "max_new_tokens": max_new_tokens,
            "accuracy": statistics.mean(rewards), **group_stats(rewards, group), **length_stats(lengths, rewards),
            "trunc/frac": statistics.mean(truncated),
            "accuracy_by_n_ops": {k: round(statistics.mean(v), 3) for k, v in sorted(by_ops.items())},
            "speed/time_512_s": wall, "speed/tokens_per_s": sum(speed_lengths) / wall,
            "torch_threads": torch.get_num_threads()}


def check(metrics: dict) -> dict:
    return {k: lo <= metrics[k] <= hi for k, (lo, hi) in TARGETS.items()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", nargs="+", default=["dense", "moe"], choices=sorted(EMBEDDED))
    p.add_argument("--n-prompts", type=int, default=256)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--write-card", action="store_true", help="write base_metrics.json and README.md")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = {}
    for arch in args.arch:
        m = measure(EMBEDDED[arch], args.n_prompts, args.group, args.max_new_tokens, args.seed, args.batch_size)
        rounded = {k: round(v, 4) if isinstance(v, float) else v for k, v in m.items()}
        results[arch] = rounded | {"targets_met": check(m)}
    if len(results) == 2:
        gap = abs(results["dense"]["accuracy"] - results["moe"]["accuracy"])
        for m in results.values():
            m["accuracy_gap_dense_moe"] = round(gap, 4)
            m["targets_met"]["accuracy_gap_dense_moe"] = gap <= 0.15
    for arch, m in results.items():
        print(json.dumps({"arch": arch, **m}))
        if args.write_card:
            from gpolib.pretrain import write_model_card

            write_model_card(EMBEDDED[arch], m)


if __name__ == "__main__":
    main()
