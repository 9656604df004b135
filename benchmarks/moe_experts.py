"""Speed of the fine-grained embedded MoE (`moe-fine`) on the CPU, and the cost of logging `moe/expert_change`.

1. transformers' expert implementations of Qwen3-MoE (`experts_implementation`: eager, one matmul pair per
   expert hit; batched_mm, every (token, slot) with its own expert's weights gathered; grouped_mm, tokens
   sorted by expert into one grouped matmul): forward + backward of a 16 x 160-token batch, and sampling
   (`rollout.generate` with the HF backend: transformers' forward per token, KV cache), for 64 and 128
   experts (top-8, width 16, 8 layers, random weights). The project's own decoder (backend 'decoder') runs
   the MoE layers itself (`engine.decoder._moe`) and is timed beside them.
2. The routing passes of `moe/expert_change` (`moe.routing_pass`: one no-grad forward of the whole batch
   before the first optimiser step and after each) against one step of the embedded MoE (rollout + update,
   `behaviour_check`'s moe_grpo case: GRPO, mu = 2, router trained).

    python benchmarks/moe_experts.py --out benchmarks/moe_experts.json

The numbers depend on the machine and its load: the JSON records the thread count and the load average.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpolib import models, moe, presets  # noqa: E402
from gpolib.rollout import generate  # noqa: E402
from gpolib.tokenizer import build_tokenizer  # noqa: E402

IMPLEMENTATIONS = ("eager", "grouped_mm", "batched_mm")
"""timed in this order (the slowest last)"""


def fine_model(n_experts: int, implementation: str):
    from transformers import AutoModelForCausalLM

    tok = build_tokenizer(padding_side="left")
    cfg = models.tiny_config("moe-fine", len(tok), tok.pad_token_id, tok.eos_token_id)
    cfg.num_experts = n_experts
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg, experts_implementation=implementation), tok


def best_of(fn, reps: int) -> float:
    """Fastest of `reps` timed calls after one warm-up call (seconds)."""
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def train_pass(model, rows: int = 16, length: int = 160) -> float:
    ids = torch.randint(2, model.config.vocab_size, (rows, length), generator=torch.Generator().manual_seed(1))

    def step():
        out = model(input_ids=ids, labels=ids, output_router_logits=True)
        out.loss.backward()
        model.zero_grad(set_to_none=True)
    return step


def sampling(model, tok, backend: str, prompts: int = 4, group: int = 4, new_tokens: int = 64):
    batch = [f"{i + 12}*{i + 3}+{7 * i + 5}=?\n" for i in range(prompts)]
    model.eval()
    return lambda: generate(model, tok, batch, group, new_tokens, backend=backend)


def implementations(reps: int, experts: list, out: dict, save) -> dict:
    """Fills `out` one (experts, implementation) row at a time, calling `save()` after each (a slow one may be cut)."""
    for impl in IMPLEMENTATIONS:
        for n_experts in experts:
            model, tok = fine_model(n_experts, impl)
            row = {"train_pass_s": round(best_of(train_pass(model), reps), 3),
                   "sample_hf_s": round(best_of(sampling(model, tok, "hf"), reps), 3)}
            if impl == "eager":
                row["sample_decoder_s"] = round(best_of(sampling(model, tok, "decoder"), reps), 3)
            out[f"{n_experts}x{impl}"] = row
            print(f"{n_experts} experts, {impl}: {row}", flush=True)
            save()
    return out


def routing_cost(reps: int) -> dict:
    """Seconds of one moe_grpo step (rollout, update) and of the routing passes `moe/expert_change` adds."""
    from gpolib.train import Trainer

    cfg = presets.get("grpo", model=models.EMBEDDED["moe"], mu=2, train_router=True, steps=1, prompts_per_step=4,
                      group_size=4, max_new_tokens=160, micro_batch_rows=8, seed=1)
    tr = Trainer(cfg)
    t = time.perf_counter()
    batch = tr.collect(0)
    rollout_s = time.perf_counter() - t
    update_s = best_of(lambda: tr.update(batch, 0), reps)
    routing_s = best_of(lambda: moe.routing_pass(tr.policy, batch.rollout, cfg.micro_batch_rows), reps)
    n_passes = 1 + cfg.mu  # pi_old's routing (no Routing Replay) and one after each optimiser step
    step_s = rollout_s + update_s
    return {"rollout_s": round(rollout_s, 3), "update_s": round(update_s, 3), "routing_pass_s": round(routing_s, 4),
            "routing_passes": n_passes, "share_of_step": round(n_passes * routing_s / step_s, 4),
            "share_of_update": round(n_passes * routing_s / update_s, 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "moe_experts.json"))
    ap.add_argument("--reps", type=int, default=2, help="timed calls after the warm-up call; the fastest is kept")
    ap.add_argument("--experts", type=int, nargs="+", default=[64, 128])
    a = ap.parse_args()
    res = {"torch_threads": torch.get_num_threads(), "load_average_1min": round(os.getloadavg()[0], 2),
           "reps": a.reps, "routing_cost": routing_cost(a.reps), "implementations": {}}

    def save():
        res["load_average_1min_end"] = round(os.getloadavg()[0], 2)
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    save()
    implementations(a.reps, a.experts, res["implementations"], save)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
