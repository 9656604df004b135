"""The no-grad passes an MoE update adds to measure routing volatility (`moe/expert_change`, issue 33), padded
against packed.

Without Routing Replay, an update of mu minibatches on an MoE policy ran, besides its training passes (before
`update._routing_pass`):
- pi_old for the later minibatches' active rows (`update._recompute`, length-bucketed, padded per chunk);
- the rollout's routing under pi_old (`update._routing` then: every row, in order, each chunk padded to the
  batch's width);
- after each of the mu optimiser steps, the routing under the updated policy (`_routing` again).
That is mu + 1 routing passes over the whole batch at its full padded width. Variants timed here, each giving the
same quantities (the routing of every row, and pi_old of the later rows):
- `padded`: the update before this change, `_recompute` + one padded routing pass;
- `packed@R`: the update until `moe_update_pass.py` (R rows per packed sequence, 8 in it): one packed pass
  (`completion_logps(packed=True)`, R rows per packed sequence) that records the routing and returns every row's
  log-probs, the later rows' pi_old among them; each routing pass after a step is one such pass too.
The rollout is one real rollout batch of notebook 08's `grpo` arm (fine-grained MoE, bf16 engine, 16 prompts x 8),
LoRA B drawn N(0, 0.02). Prints the positions the padded routing pass feeds per real one, the packed pass's agreement
with the padded one (share of (completion token, layer, slot) experts that differ, max |log-prob difference|), seconds
per variant for every repeat (interleaved, order alternating) and the per-repeat ratio to `padded`.

    python benchmarks/moe_routing_pass.py [--repeats 3] [--pack 16 8 4] [--threads 1]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402

from gpolib import moe  # noqa: E402
from gpolib import update as upd  # noqa: E402
from gpolib.lab import gspo_moe  # noqa: E402
from gpolib.lab.runs import configs  # noqa: E402
from gpolib.logprobs import completion_logps  # noqa: E402
from gpolib.models import EMBEDDED  # noqa: E402
from gpolib.train import Trainer  # noqa: E402


def padded_passes(trainer: Trainer, batch, later: torch.Tensor) -> tuple:
    """Before: pi_old of the later rows (`update._recompute`), then the routing of every row, padded to the batch's
    width in chunks of `micro_batch_rows`, rows in order."""
    old = upd._recompute(trainer.policy, trainer.cfg, batch, later)
    store: list = []
    with torch.inference_mode(), moe.record_routing(trainer.model, store):
        trainer.policy.logps(batch.rollout, chunk_rows=trainer.cfg.micro_batch_rows, bucket=False)
    return old, moe.stack_by_layer(store, len(moe.routers(trainer.model)))


def packed_pass(trainer: Trainer, batch, rows_per_pack: int) -> tuple:
    """One packed no-grad pass over every row: log-probs (B, T) and the routing per layer, packed order."""
    ro, model = batch.rollout, trainer.model
    store: list = []
    model.eval()
    with torch.inference_mode(), moe.record_routing(model, store):
        lp = completion_logps(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                              trainer.cfg.temperature, chunk_rows=rows_per_pack, packed=True)
    return lp, moe.stack_by_layer(store, len(moe.routers(model)))


def grpo_rollout() -> tuple:
    """A trainer of notebook 08's `grpo` arm on the fine-grained MoE, LoRA B drawn N(0, 0.02) (a policy that has
    moved), and its first rollout batch (16 prompts x 8): (trainer, batch)."""
    shared = {"model": EMBEDDED["moe-fine"], "eval_prompts": 64, "steps": 1}
    trainer = Trainer(configs({"grpo": gspo_moe.ARMS["grpo"]}, shared)["grpo"])
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.02)
    return trainer, trainer.collect(0)


def seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pack", type=int, nargs="+", default=[16, 8, 4], help="rows per packed sequence, per variant")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (a notebook's job has 1)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    trainer, batch = grpo_rollout()
    cfg, ro = trainer.cfg, batch.rollout
    B, T = ro.completion_ids.shape
    P = ro.prompt_ids.shape[1]
    real = float(ro.prompt_mask.sum() + ro.completion_mask.sum())
    print(f"rollout: B={B}, prompt width {P}, completion width {T}, completion length mean "
          f"{ro.lengths.float().mean():.1f}; the padded routing pass feeds {B * (P + T) / real:.2f} positions per real")
    later = torch.arange(B)[B // cfg.mu:]  # stand-in for the later minibatches' rows: 3/4 of the batch at mu = 4
    old, padded = padded_passes(trainer, batch, later)
    keep = torch.cat([ro.prompt_mask, ro.completion_mask], dim=1)  # (B, P+T)
    comp = torch.cat([torch.zeros_like(ro.prompt_mask), ro.completion_mask], dim=1)[keep.bool()]  # packed order
    for r in args.pack:
        lp, rec = packed_pass(trainer, batch, r)
        differ, _ = moe.expert_change(moe.to_packed(padded, keep), rec, comp)
        print(f"packed@{r}: experts differing from the padded pass {differ.item():.2e} of (token, layer, slot); "
              f"max |pi_old - padded's| {(lp[later] - old[later]).abs().max():.2e}")
    variants = {"padded": lambda: padded_passes(trainer, batch, later),
                **{f"packed@{r}": (lambda r=r: packed_pass(trainer, batch, r)) for r in args.pack}}
    names, times = list(variants), {n: [] for n in variants}
    for rep in range(args.repeats):
        for name in (names if rep % 2 == 0 else names[::-1]):
            times[name].append(seconds(variants[name]))
    for name, ts in times.items():
        ratios = [t / b for t, b in zip(ts, times["padded"])]
        print(f"{name:10s} s {[round(t, 3) for t in ts]}; / padded per repeat: median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
