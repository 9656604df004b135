"""One supervised pretraining step of an embedded model, padded against length-sorted micro-batches
(`PretrainConfig.micro_batches`, `pretrain.batch_step`): forward + backward of the recipe's batch of 64.

An SFT batch is padded to its longest row (prompt + completion + EOS); on the fine-grained MoE every padded
position also runs the router and its top-8 experts in each of 8 layers. Sorting the rows by length and cutting
them into m micro-batches, each trimmed to its own longest row, computes the same loss (tests/test_pretrain.py)
on fewer positions, at m times the calls. Timed per variant on the same `batches` batches (the first call of
each variant is a warm-up), interleaved, best and median per variant.

    python benchmarks/pretrain_step.py --arch moe-fine --micro 1 4 8 [--threads 2] [--out benchmarks/pretrain_step.json]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpolib.models import tiny_config  # noqa: E402
from gpolib.pretrain import PretrainConfig, batch_step, length_chunks, reserved_prompts, sft_batch  # noqa: E402
from gpolib.tokenizer import build_tokenizer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="moe-fine")
    ap.add_argument("--micro", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM

    tok = build_tokenizer(padding_side="right")
    batches = [sft_batch(reserved_prompts(), tok, random.Random(i), PretrainConfig(arch=args.arch))
               for i in range(args.batches)]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config(args.arch, len(tok), tok.pad_token_id, tok.eos_token_id))
    is_moe = args.arch != "dense"
    times: dict = {m: [] for m in args.micro}
    for b in batches:
        for m in args.micro:  # interleaved: every variant sees the same batch at about the same machine load
            t = time.perf_counter()
            batch_step(model, b, m, is_moe)
            times[m].append(time.perf_counter() - t)
            model.zero_grad(set_to_none=True)
    positions = {m: _positions(batches, m) for m in args.micro}
    out = {"arch": args.arch, "torch_threads": args.threads, "load_average_1min": os.getloadavg()[0],
           "batch_size": batches[0][0].shape[0],
           "variants": {str(m): {"best_s": round(min(times[m][1:] or times[m]), 3),
                                 "median_s": round(statistics.median(times[m][1:] or times[m]), 3),
                                 "positions_per_real_token": round(positions[m], 3)} for m in args.micro}}
    print(json.dumps(out, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


def _positions(batches, m: int) -> float:
    """Positions fed per real token with m length-sorted micro-batches (m = 1: the padded batch)."""
    fed = sum(len(rows) * T for _, mask, _ in batches for rows, T in length_chunks(mask, m))
    return fed / sum(int(mask.sum()) for _, mask, _ in batches)


if __name__ == "__main__":
    main()
