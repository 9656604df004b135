"""The trainer's log-prob pass (forward + backward) on CPU: peft's LoRA forward against gpolib's lean one, large
against small micro-batches, and the lean one under `torch.compile` (issue 20, 'training at a higher share of the
matmul peak').

What the update computes: `Trainer.logps` (`gpolib.logprobs.completion_logps`, with entropies) on a rollout of 16
train prompts x 8 of the embedded dense policy with the GRPO defaults, then backward of sum(log-probs). Two
rollouts, so a compiled graph meets a second set of shapes. LoRA B is drawn N(0, 0.02) first (a trained
adapter; at B = 0 the two LoRA forwards could agree by accident). The rows of a rollout are sorted by length and
passed in micro-batches of R rows, each trimmed to its own longest row (what the update does). Variants,
interleaved in one process:
- `peft@64`: peft's `Linear.forward`, y = base(x) + B(A(x)) * s (an output-sized multiply and add per layer),
  R = 64: the trainer before issue 20;
- `lean@64`: `gpolib.lora.lean_forward`: s on the rank-r activations, the sum inside an in-place addmm;
- `lean@16`: and R = 16, less padding (the defaults since issue 20, `TrainConfig.micro_batch_rows`);
- `lean@16+compile` (`--compile`): that model through `torch.compile(dynamic=True)`, first calls (compilation)
  printed apart;
- `lean@16+fused` (`--fused`): and RMSNorm / RoPE with their backward written out (`gpolib.qwen_ops`, the trainer's
  default since issue 31; the other variants run transformers' own);
- `lean@16+fused+justified` (`--justify`): and each micro-batch's rows left-justified with no attention mask
  (`logprobs.completion_logps(justify=True)`, the trainer's default since issue 34; the other variants pass the
  padded layout under its mask).
Prints seconds per pass of both rollouts (median and all), each variant over `peft@64`, the padded positions per
real one, the largest log-prob and LoRA-gradient differences from `peft@64`, and the fp32 matmul peak.

    python benchmarks/train_pass.py [--repeats 5] [--threads 1] [--compile] [--fused] [--justify]
    python benchmarks/train_pass.py --profile        # the op profile of one pass per LoRA forward
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402

from gpolib import presets  # noqa: E402
from gpolib.bench.common import matmul_peak_gflops  # noqa: E402
from gpolib.lora import use_lean_forward, use_peft_forward  # noqa: E402
from gpolib.train import Trainer  # noqa: E402


def forward_backward(trainer: Trainer, model, ro, rows: int, fused: bool = False, justify: bool = False) -> tuple:
    """sum of the completion log-probs of `ro` under `model` in micro-batches of `rows`, backward
    -> (logps (B, T), LoRA grads flattened). fused: RMSNorm / RoPE of `gpolib.qwen_ops`; justify: rows
    left-justified without a mask."""
    trainer.policy.model = model  # the model the trainer's log-probs use
    trainer.policy.fused_ops = fused
    trainer.opt.zero_grad(set_to_none=True)
    lp, _ent = trainer.policy.logps(ro, with_entropy=True, chunk_rows=rows, justify=justify)
    lp.sum().backward()
    return lp.detach(), torch.cat([p.grad.flatten() for p in trainer.params])


def padded_positions(ro, rows: int, justify: bool = False) -> int:
    """Prompt + completion positions the model is fed when the rows, sorted by completion length, go in
    micro-batches of `rows`, each trimmed to its own longest prompt and completion (rows = 1: no padding);
    justify: each micro-batch as wide as its longest prompt + completion together (`logprobs.justified_layout`)."""
    c_len, p_len = ro.completion_mask.sum(1), ro.prompt_mask.sum(1)  # (B,), (B,)
    order = torch.argsort(c_len, stable=True)
    widths = [int((c_len[m] + p_len[m]).max() if justify else c_len[m].max() + p_len[m].max())
              for m in order.split(rows)]
    return sum(len(m) * w for m, w in zip(order.split(rows), widths))


def set_lean(model, lean: bool) -> None:
    """gpolib's lean forward or peft's own on every LoRA Linear."""
    (use_lean_forward if lean else use_peft_forward)(model)


def seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compile", action="store_true", help="also time the lean model under torch.compile")
    ap.add_argument("--fused", action="store_true", help="also time lean@16 with gpolib.qwen_ops' RMSNorm and RoPE")
    ap.add_argument("--justify", action="store_true", help="also time lean@16+fused with rows left-justified")
    ap.add_argument("--profile", action="store_true", help="print the op profile of one pass per LoRA forward")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"fp32 matmul peak ({args.threads} threads): {matmul_peak_gflops(threads=args.threads):.0f} GFLOP/s; "
          f"load average {os.getloadavg()[0]:.2f}")
    torch.manual_seed(0)
    trainer = Trainer(presets.get("grpo", eval_prompts=8))
    model = trainer.model
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.02)
    batches = [trainer.rollout(trainer.sample_prompts(s, 0), trainer.cfg.group_size) for s in (0, 1)]
    for ro in batches:
        print(f"rollout: {tuple(ro.completion_ids.shape)} completions, mean length {ro.lengths.float().mean():.1f}")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile
        for lean in (False, True):
            set_lean(model, lean)
            forward_backward(trainer, model, batches[0], 16 if lean else 64)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                forward_backward(trainer, model, batches[0], 16 if lean else 64)
            print(f"--- {'lean, 16' if lean else 'peft, 64'} rows\n" + prof.key_averages().table(
                sort_by="self_cpu_time_total", row_limit=12))
        return
    variants = {"peft@64": (model, False, 64, False, False), "lean@64": (model, True, 64, False, False),
                "lean@16": (model, True, 16, False, False)}
    if args.fused or args.justify:
        variants["lean@16+fused"] = (model, True, 16, True, False)
    if args.justify:
        variants["lean@16+fused+justified"] = (model, True, 16, True, True)
    if args.compile:
        compiled = torch.compile(model, dynamic=True)
        variants["lean@16+compile"] = (compiled, True, 16, False, False)
        set_lean(model, True)
        for i, ro in enumerate(batches):
            s = seconds(lambda: forward_backward(trainer, compiled, ro, 16))
            print(f"first compiled call on rollout {i}: {s:.1f} s (compilation included)")
    ref = None
    for name, (net, lean, rows, fused, justify) in variants.items():
        set_lean(model, lean)
        outs = [forward_backward(trainer, net, ro, rows, fused, justify) for ro in batches]
        ref = ref or outs
        diffs = [(lp - r[0]).abs().max().item() for (lp, _), r in zip(outs, ref)]
        grads = [(g - r[1]).abs().max().item() / r[1].abs().max().item() for (_, g), r in zip(outs, ref)]
        pad = (sum(padded_positions(ro, rows, justify) for ro in batches)
               / sum(padded_positions(ro, 1) for ro in batches))
        print(f"{name}: positions fed / real {pad:.2f}; max |logp - peft@64's| {max(diffs):.2e}, "
              f"max |grad - peft@64's| / max |grad| {max(grads):.2e}")
    times: dict = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, (net, lean, rows, fused, justify) in variants.items():
            set_lean(model, lean)
            times[name].append(sum(seconds(lambda: forward_backward(trainer, net, ro, rows, fused, justify))
                                   for ro in batches))
    base = statistics.median(times["peft@64"])
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:16s} s per pass of both rollouts: median {m:.2f} ({m / base:.2f} x peft@64), "
              f"all {[round(t, 2) for t in ts]}")

if __name__ == "__main__":
    main()
