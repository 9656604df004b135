"""Sampler vs sampler on random-weight models or any model: `gpolib.bench.samplers` from the command line.

Run: `python benchmarks/sampler_speed.py [--model random-dense|random-moe|PATH] [--max-new-tokens 256]
[--rows 128] [--threads 2] [--repeats 5] [--no-eos] [--with-generate] [--autocast bfloat16] [--train-router]`
(configurations and measurement: see gpolib/bench/samplers.py; n = --threads). `--autocast bfloat16` samples
every configuration under bf16 autocast, the reduced-precision engine of notebook 08 (`TrainConfig.
rollout_autocast`); `--train-router` loads a MoE as notebook 08 trains it (router in full beside LoRA).

`random-dense` / `random-moe` are the embedded architectures (`gpolib.models.tiny_config`,
max_position_embeddings 512) with random weights, seeded: their near-uniform next-token distribution over
99 symbols ends a row with probability ~1/99 per token (mean length ~80 at a budget of 256, a few percent
truncated), like the harder regime's 80-250-token answers. A LoRA (r = 16, B random) is attached.
`--no-eos` passes an EOS id that never occurs, so every row runs the whole budget.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402

from gpolib.bench.samplers import measure, prompt_batch, report  # noqa: E402
from gpolib.tasks import load_tasks  # noqa: E402

TOKENIZER = "data/models/tiny-qwen3"


def build_model(name: str, lora_r: int = 16, seed: int = 0, train_router: bool = False):
    """(model with LoRA, tokenizer): a random-weight embedded architecture or a local path / hub name."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gpolib.models import load_policy, lora_config, tiny_config

    torch.manual_seed(seed)
    if not name.startswith("random-"):
        model, tok = load_policy(name, lora_r=lora_r, train_router=train_router)
    else:
        tok = AutoTokenizer.from_pretrained(ROOT / TOKENIZER)
        cfg = tiny_config(name[len("random-"):], len(tok), tok.pad_token_id, tok.eos_token_id)
        cfg.max_position_embeddings = 512
        base = AutoModelForCausalLM.from_config(cfg)
        model = get_peft_model(base, lora_config(base, lora_r, 2 * lora_r, train_router))
    for n, p in model.named_parameters():
        if "lora_B" in n:  # a trained adapter, not the zero init
            torch.nn.init.normal_(p, std=0.02)
    return model.eval(), tok


def matmul_peak_gflops(threads: int) -> float:
    from gpolib.bench.common import matmul_peak_gflops as peak

    return peak(threads=threads)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="random-dense", help="random-dense | random-moe | a local path or hub name")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--rows", type=int, default=128, help="completions per batch (16 prompts x 8 by default)")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--threads", type=int, default=2, help="n: the process's threads (configurations use 1 or n)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--no-eos", action="store_true", help="rows never end early: every row runs the whole budget")
    p.add_argument("--with-generate", action="store_true", help="also time transformers.generate")
    p.add_argument("--autocast", default=None, choices=["bfloat16", "float16"],
                   help="sample under torch.autocast in this dtype (the reduced-precision engine)")
    p.add_argument("--train-router", action="store_true", help="MoE: the router trained in full (peft modules_to_save)")
    p.add_argument("--json", default="", help="also write the results to this JSON file")
    args = p.parse_args(argv)
    model, tok = build_model(args.model, train_router=args.train_router)
    prompts = [t["prompt"] for t in load_tasks(str(ROOT / "data/tasks/train.jsonl"))[: args.rows // args.group_size]]
    ids, mask = prompt_batch(tok, prompts, args.group_size)  # (B, P)
    env = {"torch": torch.__version__, "cpu_count": os.cpu_count(), "model": args.model,
           "rows": ids.shape[0], "prompt_len_max": ids.shape[1], "max_new_tokens": args.max_new_tokens,
           "no_eos": args.no_eos, "autocast": args.autocast, "train_router": args.train_router, "loadavg_1_5_15": [round(x, 2) for x in os.getloadavg()]}
    print("environment:", json.dumps(env))
    peak = matmul_peak_gflops(args.threads)
    r = measure(model, tok, ids, mask, args.max_new_tokens, args.threads, args.repeats, args.no_eos,
                args.with_generate, args.autocast)
    r.update(matmul_peak_gflops=peak, environment=env, loadavg_end=[round(x, 2) for x in os.getloadavg()])
    report(r, peak)
    print("\nRESULTS_JSON " + json.dumps(r))
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
