"""The trainer's forward + backward on micro-batches, padded against packed (issue 31, 'no padding in training').

What the update computes per micro-batch: `completion_logps` (with entropies) of 16 rows, then backward. The rows are
a real rollout of 16 train prompts x 8 of the embedded dense policy (GRPO defaults, LoRA B drawn N(0, 0.02)), split
into mu = 4 random minibatches, each sorted by completion length and cut into micro-batches of 16 rows, as the update
does. Variants, timed in
interleaved A/B repeats in one process (the order alternates per repeat):
- `padded`: each micro-batch trimmed to its own longest prompt and completion (today's path);
- `packed@R`: each micro-batch fed as packed sequences of R rows without padding (`packed=True`, chunk_rows=R);
  R = 16 is one sequence of batch 1. Attention over a packed sequence is computed with a dense block-diagonal mask
  (sdpa), so its cost grows with the square of the packed length: smaller R trades padding for attention.
Prints the positions fed per real one, the max log-prob / gradient difference from `padded`, seconds per pass over
the whole rollout for every repeat, and the per-repeat ratio packed / padded (median and all).

    OMP_NUM_THREADS=1 python benchmarks/train_pass_packed.py [--repeats 5] [--rows 16] [--mu 4] [--pack 16 4]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402

from gpolib import presets  # noqa: E402
from gpolib.logprobs import completion_logps  # noqa: E402
from gpolib.train import Trainer  # noqa: E402


def micro_batches(ro, rows: int, mu: int) -> list:
    """Row indices of the micro-batches the update forms: mu random minibatches, each sorted by completion length
    and split `rows` at a time (`update._minibatch_step`)."""
    minibatches = torch.randperm(len(ro.lengths), generator=torch.Generator().manual_seed(0)).chunk(mu)
    return [m for mb in minibatches for m in mb[torch.argsort(ro.lengths[mb], stable=True)].split(rows)]


def fed_per_real(ro, micros: list) -> float:
    """Positions the padded path feeds (each micro-batch trimmed to its longest prompt and completion) per real one."""
    c_len, p_len = ro.completion_mask.sum(1), ro.prompt_mask.sum(1)  # (B,), (B,)
    fed = sum(len(m) * int(c_len[m].max() + p_len[m].max()) for m in micros)
    return fed / float(c_len.sum() + p_len.sum())


def forward_backward(trainer: Trainer, ro, micros: list, pack: int | None) -> tuple:
    """Every micro-batch's log-probs (with entropy) and backward of their sum; pack=None: padded.
    -> (logps (B, T), LoRA grads flattened)."""
    trainer.opt.zero_grad(set_to_none=True)
    out = torch.zeros(ro.completion_ids.shape)
    for m in micros:
        m = m.sort().values
        lp, _ent = completion_logps(trainer.model, ro.prompt_ids[m], ro.prompt_mask[m], ro.completion_ids[m],
                                    ro.completion_mask[m], trainer.cfg.temperature, chunk_rows=pack or len(m),
                                    with_entropy=True, packed=pack is not None)
        lp.sum().backward()
        out[m] = lp.detach()
    return out, torch.cat([p.grad.flatten() for p in trainer.params])


def seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rows", type=int, default=16, help="rows per micro-batch (TrainConfig.micro_batch_rows)")
    ap.add_argument("--mu", type=int, default=4, help="minibatches per step (TrainConfig.mu)")
    ap.add_argument("--pack", type=int, nargs="+", default=[16, 4], help="rows per packed sequence, per variant")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    trainer = Trainer(presets.get("grpo", eval_prompts=8))
    with torch.no_grad():
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.02)
    ro = trainer.rollout(trainer.sample_prompts(0, 0), trainer.cfg.group_size)
    L = ro.lengths.float()
    print(f"rollout: {tuple(ro.completion_ids.shape)}, completion length mean {L.mean():.1f} sd {L.std():.1f} "
          f"min {int(L.min())} max {int(L.max())}; prompt length mean {ro.prompt_mask.sum(1).float().mean():.1f}")
    micros = micro_batches(ro, args.rows, args.mu)
    share = 1 - 1 / fed_per_real(ro, micros)
    print(f"padded: positions fed / real {fed_per_real(ro, micros):.3f}, padding {share:.1%} of the fed positions "
          f"(mu = {args.mu} minibatches, micro-batches of {args.rows} rows sorted by length)")
    trainer.model.train()
    variants = {"padded": None, **{f"packed@{r}": r for r in args.pack}}
    ref = forward_backward(trainer, ro, micros, None)
    for name, pack in variants.items():
        lp, g = forward_backward(trainer, ro, micros, pack)
        print(f"{name}: max |logp - padded's| {(lp - ref[0]).abs().max():.2e}, "
              f"max |grad - padded's| / max |grad| {(g - ref[1]).abs().max() / ref[1].abs().max():.2e}")
    times: dict = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.repeats):
        for name in (names if r % 2 == 0 else names[::-1]):  # interleaved, order alternating
            times[name].append(seconds(lambda: forward_backward(trainer, ro, micros, variants[name])))
    for name, ts in times.items():
        ratios = [t / b for t, b in zip(ts, times["padded"])]
        print(f"{name:10s} s per pass {[round(t, 3) for t in ts]}; / padded per repeat: median "
              f"{statistics.median(ratios):.3f}, all {[round(x, 3) for x in ratios]}")


if __name__ == "__main__":
    main()
