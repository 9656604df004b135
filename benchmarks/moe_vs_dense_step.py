"""One full RL step of the fine-grained MoE against the dense embedded model, at the same batch and configuration
(issue 50): the ratio MoE / dense is the headline.

Both arms are notebook 08's `grpo` arm (GRPO, Clip-Higher 0.2 / 0.28, 16 prompts x 8, mu = 4, up to the full
profile's new tokens), on the dense embedded policy (`tiny-qwen3`, 887k parameters) and on the fine-grained MoE
(`tiny-qwen3-moe-fine`, 64 experts, top-8, 8 layers, 867k active parameters per token) with its router trainable and
`moe/expert_change` logged after every optimiser step. A step is `train.train_step`: the rollout, the reward, pi_old,
the mu minibatch updates and, on the MoE, P3's measure. Arms:
- `dense`: the dense policy, the fp32 decoder (its default engine);
- `moe`: the fine MoE, the fp32 decoder;
- `moe_bf16`: the fine MoE with notebook 08's engine (bf16 autocast, `gspo_moe.ENGINE`), as its committed runs;
- `moe_torch`: `moe` with issue 50's switchable changes off for its steps (`issue50_off`): experts by torch in the
  no-grad passes, the training forward + backward and the decoder (its MoE layers per layer, not in the whole-step
  kernel), the experts' LoRA folded at every forward call by peft's parametrization (not `lora.lean_experts_forward`),
  the routers' top-k by torch (not `engine.topk_kernel`), new tensors NaN-filled,
  `expert_change='full'` (a routing pass over the rollout after every optimiser step; the routing passes' justified
  layout stays): the same process's before / after.
`moe` and `moe_bf16` log the expert change as the config's default, `expert_change='minibatch'`.
One process, `--threads` torch threads (a notebook job's: 1), each arm's trainer built once and warmed up by one
step, then `--repeats` steps per arm, interleaved (order alternating per repeat); step r of every arm samples the
same prompts (same seed). Printed: seconds per step per arm and repeat, the median of the per-repeat ratio to
`dense`, and per arm the median seconds of each phase with its achieved GFLOP/s from active parameters N (dense:
all; MoE: all but the experts, plus k / E of them): rollout 2N per new token, forward-only passes (pi_old, the
routing passes of P3's measure) 2N per position fed, training forward + backward 6N per position fed (attention
scores left out); the fp32 matmul peak at the same threads (1024^3, best of 8) measured at the start and printed
beside. The phases:
  rollout, reward      `Trainer.rollout`, `Trainer.score`
  pi_old               `update.pi_old` (dense: the later minibatches' active rows; MoE: the hook's routing pass,
                       `moe.ExpertChange.before`, which is also pi_old: over every row ('full') or over the later
                       minibatches' active rows ('minibatch'))
  expert_change        `moe.ExpertChange.after_step`: the routing passes after the optimiser steps (MoE; 'full': the
                       rollout after each step; 'minibatch': the first minibatch's active rows after the last step)
  train_fwd            the training forward passes (`Policy.logps` outside the two above; 'minibatch': with their
                       routing recorded)
  backward             from the end of a loss to the next forward or the gradient clip
  optimizer            gradient clip + AdamW + schedule
  other                the rest of the step (advantages, filters, loss, metrics)

    python benchmarks/moe_vs_dense_step.py [--repeats 3] [--threads 1] [--arms dense moe moe_bf16 moe_torch]
                                           [--json FILE]
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402

import torch.utils.deterministic  # noqa: E402

from gpolib import lora, moe  # noqa: E402
from gpolib import policy as P  # noqa: E402
from gpolib import update as U  # noqa: E402
from gpolib.engine import decoder, step_kernel  # noqa: E402
from gpolib.bench.common import environment, matmul_peak_gflops  # noqa: E402
from gpolib.lab import gspo_moe  # noqa: E402
from gpolib.lab.runs import configs  # noqa: E402
from gpolib.models import EMBEDDED  # noqa: E402
from gpolib.train import Trainer, train_step  # noqa: E402

PHASES = ("rollout", "reward", "pi_old", "expert_change", "train_fwd", "backward", "optimizer", "other")
FLOPS_PER_POSITION = {"pi_old": 2, "expert_change": 2, "train_fwd": 6}
"""FLOPs per active parameter per position fed (train_fwd: forward + backward, timed together)"""


def arm_config(arm: str, max_new_tokens: int | None):
    """The TrainConfig of `arm` (module docstring): notebook 08's `grpo` arm on that model and engine."""
    fields = dict(gspo_moe.ARMS["grpo"])
    shared = {"prompts_per_step": 16, "group_size": 8, "eval_prompts": 8, "steps": 100}
    if max_new_tokens:
        shared["max_new_tokens"] = max_new_tokens
    if arm == "dense":
        fields.update(model=EMBEDDED["dense"], train_router=False, rollout_autocast=None)
    elif arm in ("moe", "moe_torch"):
        fields.update(model=EMBEDDED["moe-fine"], rollout_autocast=None)
    elif arm == "moe_bf16":
        fields.update(model=EMBEDDED["moe-fine"])
    else:
        raise ValueError(f"arm={arm!r} is invalid; allowed: dense, moe, moe_bf16, moe_torch")
    return configs({arm: fields}, shared)[arm]


@contextlib.contextmanager
def issue50_off(trainer: Trainer):
    """Issue 50's switchable changes off while the block runs (module docstring, `moe_torch`)."""
    pack, fold, fill = decoder._pack_experts, P.folded_experts, torch.utils.deterministic.fill_uninitialized_memory
    decoder._pack_experts, P.folded_experts = (lambda w: None), (lambda model: contextlib.nullcontext())
    torch.utils.deterministic.fill_uninitialized_memory = True
    pol = trainer.policy
    pol.experts_kernel = pol.train_experts_kernel = pol.router_kernel = step_kernel.MOE = False
    lean = {m: m.__dict__.pop("forward") for m in trainer.model.modules()
            if getattr(m.__dict__.get("forward"), "func", None) is lora.lean_experts_forward}
    cfg, trainer.cfg = trainer.cfg, dataclasses.replace(trainer.cfg, expert_change="full")
    try:
        yield
    finally:
        decoder._pack_experts, P.folded_experts = pack, fold
        torch.utils.deterministic.fill_uninitialized_memory = fill
        pol.experts_kernel = pol.train_experts_kernel = pol.router_kernel = step_kernel.MOE = True
        for m, forward in lean.items():
            m.forward = forward
        trainer.cfg = cfg


def active_parameters(model) -> int:
    """Parameters a token passes through: the base model's (LoRA factors left out), the MoE experts' at k / E."""
    routers = moe.routers(model)
    share = (moe.router_module(routers[0]).top_k / moe.router_module(routers[0]).num_experts) if routers else 1.0
    n = 0.0
    for name, p in model.named_parameters():
        if "lora_" in name or "modules_to_save" in name:
            continue
        n += p.numel() * (share if ".experts." in name else 1.0)
    return int(n)


class StepTimers:
    """Seconds per phase of one `train_step` (module docstring) and positions fed per phase, by wrapping the
    trainer's rollout / score / policy.logps / optimiser step, update's pi_old / policy_loss, the MoE hook's
    `moe.ExpertChange.before` / `after_step` and torch's clip_grad_norm_ while the block runs."""

    def __init__(self, trainer: Trainer):
        self.tr, self.s, self.pos = trainer, {}, {}
        self.phase, self.loss_end = None, None

    def _add(self, name: str, seconds: float) -> None:
        self.s[name] = self.s.get(name, 0.0) + seconds

    def _close_backward(self) -> None:
        if self.loss_end is not None:
            self._add("backward", time.perf_counter() - self.loss_end)
            self.loss_end = None

    def _timed(self, name: str, fn, outer: bool = False):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            if outer and self.phase is not None:  # nested (the hook's routing pass inside pi_old): the outer one times
                return fn(*a, **k)
            self._close_backward()
            before, self.phase = self.phase, name if outer else self.phase
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self._add(name, time.perf_counter() - t0)
                self.phase = before
        return wrapper

    def _logps(self, *a, **k):
        if self.phase is not None:
            return self.orig["logps"](*a, **k)
        self._close_backward()
        self.phase = "train_fwd"
        t0 = time.perf_counter()
        try:
            return self.orig["logps"](*a, **k)
        finally:
            self._add("train_fwd", time.perf_counter() - t0)
            self.phase = None

    def _loss(self, *a, **k):
        out = self.orig["policy_loss"](*a, **k)
        self.loss_end = time.perf_counter()
        return out

    def _count(self, _module, args, kwargs) -> None:
        if self.phase in FLOPS_PER_POSITION:
            ids = kwargs.get("input_ids", args[0] if args else None)
            self.pos[self.phase] = self.pos.get(self.phase, 0) + ids.numel()

    def __enter__(self):
        tr = self.tr
        self.orig = {"rollout": tr.rollout, "score": tr.score, "logps": tr.policy.logps, "opt": tr.policy.opt.step,
                     "pi_old": U.pi_old, "before": moe.ExpertChange.before, "after": moe.ExpertChange.after_step,
                     "policy_loss": U.policy_loss, "clip": torch.nn.utils.clip_grad_norm_}
        tr.rollout, tr.score = self._timed("rollout", tr.rollout), self._timed("reward", tr.score)
        tr.policy.logps = self._logps
        tr.policy.opt.step = self._timed("optimizer", self.orig["opt"])
        U.pi_old = self._timed("pi_old", U.pi_old, outer=True)
        moe.ExpertChange.before = self._timed("pi_old", moe.ExpertChange.before, outer=True)
        moe.ExpertChange.after_step = self._timed("expert_change", moe.ExpertChange.after_step, outer=True)
        U.policy_loss = self._loss
        torch.nn.utils.clip_grad_norm_ = self._timed("optimizer", self.orig["clip"])
        self.hook = tr.model.register_forward_pre_hook(self._count, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        self.hook.remove()
        tr = self.tr
        del tr.rollout, tr.score, tr.policy.logps
        tr.policy.opt.step = self.orig["opt"]
        U.pi_old = self.orig["pi_old"]
        moe.ExpertChange.before, moe.ExpertChange.after_step = self.orig["before"], self.orig["after"]
        U.policy_loss, torch.nn.utils.clip_grad_norm_ = self.orig["policy_loss"], self.orig["clip"]


def timed_step(trainer: Trainer, step: int, arm: str) -> dict:
    """One `train_step` of `arm`: wall seconds, new tokens, phase seconds and positions fed per phase."""
    timers = StepTimers(trainer)
    off = issue50_off(trainer) if arm == "moe_torch" else contextlib.nullcontext()
    t0 = time.perf_counter()
    with timers, off:
        row = train_step(trainer, step)
    wall = time.perf_counter() - t0
    phases = {p: timers.s.get(p, 0.0) for p in PHASES}
    phases["other"] = wall - sum(phases.values())
    return {"s": wall, "tokens": int(row["gen/tokens"]), "phases": phases, "pos": timers.pos,
            "expert_change": row.get("moe/expert_change")}


def summary(arm: str, steps: list, n_active: int, peak: float) -> list:
    """Lines: per phase the median seconds and achieved GFLOP/s (share of the peak)."""
    lines = [f"{arm}: N active = {n_active:,}; s/step {[round(r['s'], 2) for r in steps]}; new tokens "
             f"{[r['tokens'] for r in steps]}"]
    for p in PHASES:
        s = statistics.median(r["phases"][p] for r in steps)
        if s < 1e-4:
            continue
        line = f"   {p:14s} {s:7.3f} s"
        rates = []
        for r in steps:
            sec = r["phases"][p] + (r["phases"]["backward"] if p == "train_fwd" else 0.0)  # 6N: forward + backward
            flops = (2 * n_active * r["tokens"] if p == "rollout"
                     else FLOPS_PER_POSITION.get(p, 0) * n_active * r["pos"].get(p, 0))
            if flops and sec > 0:
                rates.append(flops / sec / 1e9)
        if rates:
            g = statistics.median(rates)
            line += f"   {g:6.1f} GFLOP/s ({g / peak:.0%} of peak){' with backward' if p == 'train_fwd' else ''}"
        lines.append(line)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (a notebook's job has 1)")
    ap.add_argument("--arms", nargs="+", default=["dense", "moe", "moe_bf16", "moe_torch"])
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default: the preset's")
    ap.add_argument("--json", default=None, help="also write every number to this file")
    args = ap.parse_args()
    if args.arms[0] != "dense":
        raise SystemExit("the first arm is the reference of the ratios: --arms dense ...")
    print("environment:", json.dumps(environment()))
    peak = matmul_peak_gflops(threads=args.threads)
    print(f"fp32 matmul peak (1024^3, {args.threads} thread(s), best of 8): {peak:.1f} GFLOP/s")
    torch.set_num_threads(args.threads)
    trainers = {a: Trainer(arm_config(a, args.max_new_tokens)) for a in args.arms}
    for a, tr in trainers.items():
        t0 = time.perf_counter()
        timed_step(tr, 0, a)
        print(f"warm-up {a}: {time.perf_counter() - t0:.2f} s")
    steps = {a: [] for a in args.arms}
    for rep in range(args.repeats):
        for a in (args.arms if rep % 2 == 0 else args.arms[::-1]):
            steps[a].append(timed_step(trainers[a], rep + 1, a))
        print(f"repeat {rep}: " + ", ".join(f"{a} {steps[a][-1]['s']:.2f} s" for a in args.arms), flush=True)
    n_active = {a: active_parameters(tr.model) for a, tr in trainers.items()}
    for a in args.arms:
        print("\n".join(summary(a, steps[a], n_active[a], peak)))
    ratios = {a: statistics.median(r["s"] / d["s"] for r, d in zip(steps[a], steps["dense"])) for a in args.arms[1:]}
    per_token = {a: statistics.median((r["s"] / r["tokens"]) / (d["s"] / d["tokens"])
                                      for r, d in zip(steps[a], steps["dense"])) for a in args.arms[1:]}
    for a in args.arms[1:]:
        print(f"HEADLINE {a} / dense s/step: median of per-repeat ratios {ratios[a]:.2f} "
              f"(per new token {per_token[a]:.2f}); fp32 matmul peak {peak:.1f} GFLOP/s")
    out = {"peak_gflops": peak, "threads": args.threads, "n_active": n_active, "ratios": ratios,
           "ratios_per_token": per_token, "steps": steps, "environment": environment()}
    print("RESULTS_JSON " + json.dumps(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
