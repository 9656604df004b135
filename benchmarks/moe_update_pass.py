"""The passes of one fine-grained MoE update (notebook 08), timed per variant on one thread (a notebook job's).

An update of notebook 08's `grpo` arm (mu = 4, router trainable, `moe/expert_change` logged) runs, per RL step:
- 1 + mu no-grad routing passes over the whole rollout (`moe.routing_pass`: the routing under pi_old, which
  also gives the later minibatches' pi_old, then the routing after each optimiser step);
- the training forward + backward of each minibatch's active rows, in micro-batches of 16 rows.
Variants, on one real rollout batch of the arm (16 prompts x 8, bf16 engine), LoRA B drawn N(0, 0.02):
- experts: transformers' grouped path (`experts_implementation='grouped_mm'`) against `qwen_ops.experts_forward`
  (routing weight on the SwiGLU product, one index_add), for a routing pass and a training micro-batch;
- routing pass chunks (`moe.routing_pass`: rows sorted by length, each chunk cut to its longest row) of 16 and 32
  rows (the packed layout it replaced, R rows per sequence under a block-diagonal mask, is gone with issue 49; its
  timings stay in benchmarks/README.md);
- the rollout itself (the decoder under bf16 autocast): one SwiGLU per expert in a Python loop against two grouped
  matmuls (`engine.decoder._grouped_swiglu`), these in torch's bf16 kernel or on the experts' bf16 values held in
  float32 (`engine.weights.widen_experts`, the default), same prompts and seed; and a held-out rollout of 64 prompts
  x 4 (the end evaluation's shape, an eighth of its prompts) with the grouped experts either way.
Prints the agreement of each variant with the reference (share of (completion token, layer, slot) experts that
differ, max |log-prob difference|, max |gradient difference|), seconds per variant per repeat (interleaved, order
alternating) and the median ratio to the first variant of its group.

    python benchmarks/moe_update_pass.py [--repeats 3] [--threads 1]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402

from gpolib import moe, qwen_ops  # noqa: E402
from gpolib.engine import decoder, weights  # noqa: E402
from gpolib.lab import gspo_moe  # noqa: E402
from gpolib.lab.runs import configs  # noqa: E402
from gpolib.models import EMBEDDED  # noqa: E402
from gpolib.runtime import deterministic_cpu  # noqa: E402
from gpolib.train import Trainer  # noqa: E402


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


def routing(trainer: Trainer, batch, fused: bool, rows: int = 16) -> tuple:
    """One no-grad pass over every row (`moe.routing_pass` in chunks of `rows` rows): log-probs (B, T) and each
    layer's experts at the real positions, row-major."""
    qwen_ops.EXPERTS = fused
    try:
        return moe.routing_pass(trainer.policy, batch.rollout, rows)
    finally:
        qwen_ops.EXPERTS = True


def train_micro(trainer: Trainer, batch, rows: torch.Tensor, fused: bool) -> list:
    """Forward + backward of one micro-batch (sum of its log-probs): the trainable parameters' gradients."""
    pol = trainer.policy
    qwen_ops.EXPERTS = fused
    pol.model.train()
    try:
        lp = pol.logps(batch.rollout, rows, chunk_rows=len(rows))
        (lp * batch.loss_mask[rows]).sum().backward()
        grads = [p.grad.clone() for p in pol.params if p.grad is not None]
        pol.opt.zero_grad(set_to_none=True)
        return grads
    finally:
        qwen_ops.EXPERTS = True
        pol.model.eval()


def rollout(trainer: Trainer, grouped: bool, wide: bool = True, held_out: int = 0):
    """The rollout of step 0's prompts (16 x 8) by the run's engine, its experts grouped or looped, bf16 experts held
    in float32 (`wide`) or not; held_out > 0: that many held-out prompts x 4 at T = 1 instead."""
    real, real_widen = decoder._grouped, weights.widen_experts
    decoder._grouped = real if grouped else (lambda *a: False)
    weights.widen_experts = real_widen if wide else (lambda lw: lw)
    try:
        torch.manual_seed(0)
        if held_out:
            return trainer.rollout(trainer.eval_tasks[:held_out], 4, temperature=1.0, top_p=1.0, held_out=True)
        return trainer.rollout(trainer.sample_prompts(0, 0), trainer.cfg.group_size)
    finally:
        decoder._grouped, weights.widen_experts = real, real_widen


def seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def compare(groups: dict, repeats: int) -> None:
    for title, variants in groups.items():
        names, times = list(variants), {n: [] for n in variants}
        for rep in range(repeats):
            for name in (names if rep % 2 == 0 else names[::-1]):
                times[name].append(seconds(variants[name]))
        base = times[names[0]]
        print(f"-- {title}")
        for name, ts in times.items():
            ratio = statistics.median(t / b for t, b in zip(ts, base))
            print(f"   {name:28s} s {[round(t, 3) for t in ts]}; / {names[0]}: median {ratio:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (a notebook's job has 1)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    deterministic_cpu("cpu")
    trainer, batch = grpo_rollout()
    ro = batch.rollout
    comp = torch.cat([torch.zeros_like(ro.prompt_mask), ro.completion_mask], dim=1)[moe.real_positions(ro)]
    real = ro.completion_mask.bool()
    ref_lp, ref_rt = routing(trainer, batch, False, rows=16)
    for name, kw in {"bucketed@16 qwen_ops": dict(fused=True, rows=16),
                     "bucketed@32 qwen_ops": dict(fused=True, rows=32)}.items():
        lp, rt = routing(trainer, batch, **kw)
        differ, _ = moe.expert_change(ref_rt, rt, comp)
        print(f"{name}: experts differing from bucketed@16 transformers {differ.item():.2e}; max |log-prob diff| "
              f"{(lp - ref_lp)[real].abs().max():.2e}")
    micro = torch.argsort(ro.lengths, descending=True)[:16].sort().values  # the longest micro-batch
    g0, g1 = train_micro(trainer, batch, micro, False), train_micro(trainer, batch, micro, True)
    rel = max(((a - b).abs().max() / a.abs().max().clamp(min=1e-30)).item() for a, b in zip(g0, g1))
    print(f"training micro-batch (16 longest rows): max relative gradient difference, qwen_ops experts vs "
          f"transformers' {rel:.2e}")
    loop, grouped = rollout(trainer, False, wide=False), rollout(trainer, True, wide=False)
    same = torch.equal(loop.completion_ids, grouped.completion_ids)
    diff = (loop.sample_logps - grouped.sample_logps)[loop.completion_mask.bool()].abs().max().item() if same else None
    print(f"rollout, grouped vs looped experts (bf16 kernel): same tokens {same}, max |sampling log-prob diff| {diff}")
    wide = rollout(trainer, True)
    agree = (wide.completion_ids == grouped.completion_ids).all(dim=1).float().mean().item()
    print(f"rollout, float32-held vs bf16-kernel experts: {agree:.1%} of responses token for token the same")
    compare({
        "routing pass over the rollout (128 rows)": {
            "bucketed@16 transformers": lambda: routing(trainer, batch, False, rows=16),
            "bucketed@16 qwen_ops": lambda: routing(trainer, batch, True, rows=16),
            "bucketed@32 qwen_ops": lambda: routing(trainer, batch, True, rows=32)},
        "training forward + backward (16 longest rows)": {
            "transformers": lambda: train_micro(trainer, batch, micro, False),
            "qwen_ops": lambda: train_micro(trainer, batch, micro, True)},
        "rollout, 16 prompts x 8 (bf16 engine)": {
            "experts looped": lambda: rollout(trainer, False, wide=False),
            "experts grouped": lambda: rollout(trainer, True, wide=False),
            "grouped, float32-held": lambda: rollout(trainer, True)},
        "held-out rollout, 64 prompts x 4 (bf16 engine)": {
            "experts grouped": lambda: rollout(trainer, True, wide=False, held_out=64),
            "grouped, float32-held": lambda: rollout(trainer, True, held_out=64)},
    }, args.repeats)


if __name__ == "__main__":
    main()
