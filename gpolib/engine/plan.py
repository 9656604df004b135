"""How the decoder sampler uses the CPU cores: chosen by timing, not by a constant.

A tiny model's decode step is a few hundred small kernels. Two ways to use n cores:
  - intra-op threads (`torch.set_num_threads(n)`): each kernel split over n threads, which meet at a
    barrier after every kernel; on a busy machine one descheduled thread stalls all of them (several times
    slower beside other jobs: benchmarks/README.md, "Timings that were in docstrings");
  - row shards: the batch split into n parts, each decoded by its own Python thread with one torch
    thread (kernels release the GIL, so the shards' kernels overlap; no barrier between them).
With the whole-step kernel (`step_kernel`, dense float32 models) a (1, n) step is one call whose rows are split over
n threads inside it (no barrier between layers), the loop's own torch ops on one thread; n row shards still win
where the shards' Python (the draw, the loop) overlaps with the other shard's kernel.
`Planner.plan` times a few decode steps of the actual batch under each candidate ((1 shard, 1 thread),
(1, n), (n, 1)), twice and interleaved, keeps the fastest (the simpler one unless another is `margin`
faster), keeps it per (model shape, batch size, n, kernels) and measures again every `recalibrate_every`
calls, since a shared machine's load changes. The chosen plans are the planner's state: `gpolib.engine.sample`
holds one for the process (`engine.PLANNER`) unless a call passes its own. Each row draws from its own uniforms,
so the completions do not depend on the plan (tested).
"""
from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from ..runtime import cpu_threads
from .decoder import Decoder
from .loop import decode_loop
from .spec import SampleSpec


def run(weights: dict, ids, mask, spec: SampleSpec, u, workers: int = 1, threads: int = 0,
        deadline: float | None = None) -> tuple:
    """`decode_loop(decoder, ids, mask, spec, u, deadline)` on `workers` row shards with `threads` torch threads each
    (0: the process's setting) -> ids, logps (B, T) with shards padded to the longest (pad id spec.pad_id)."""
    width = ids.shape[1] + spec.max_new_tokens  # cache columns: prompt + new tokens
    if workers == 1:
        dec = Decoder(weights, ids.shape[0], width, threads=threads or torch.get_num_threads(), kernels=spec.kernels)
        # a whole-step kernel splits its rows over the threads itself; the loop's own small torch ops (the draw) on
        # one thread, where waking sleeping OpenMP workers would cost more than they save
        with cpu_threads(1 if dec.fused_step is not None else threads):
            return decode_loop(dec, ids, mask, spec, u, deadline)

    def shard(rows):
        with torch.inference_mode():  # thread-local: enter it in the worker
            dec = Decoder(weights, len(rows), width, kernels=spec.kernels)
            return decode_loop(dec, ids[rows], mask[rows], spec, None if u is None else u[rows], deadline)
    with cpu_threads(1), ThreadPoolExecutor(workers) as pool:
        outs = list(pool.map(shard, torch.arange(ids.shape[0], device=ids.device).tensor_split(workers)))
    T = max(o[0].shape[1] for o in outs)
    pad = lambda x, v: torch.nn.functional.pad(x, (0, T - x.shape[1]), value=v)  # noqa: E731
    return torch.cat([pad(o[0], spec.pad_id) for o in outs]), torch.cat([pad(o[1], 0.0) for o in outs])


def _candidates(n: int) -> list:
    return list(dict.fromkeys([(1, 1), (1, n), (n, 1)]))  # simplest first


def _key(weights: dict, batch: int, n: int, kernels: str) -> tuple:
    """What a plan is kept for: the model's shape and matmul dtype, the batch size, the threads, the kernels."""
    lw = weights["layers"][0]
    return (tuple(weights["embed"].shape), len(weights["layers"]), weights["n_q"], weights["n_kv"], weights["d"],
            tuple(lw["w_gu"].shape) if "w_gu" in lw else tuple(lw["e_gu"].shape), weights["head"].dtype, batch, n,
            kernels)


@dataclasses.dataclass
class Planner:
    """Chooses (row shards, torch threads) for each decoder batch on the CPU, and keeps what it chose."""

    calibration_steps: int = 8
    """decode steps timed per candidate (after the prefill of the real prompts)"""
    recalibrate_every: int = 50
    """calls with one kept plan before it is measured again"""
    margin: float = 0.1
    """a candidate replaces a simpler one only if it is at least this much faster"""
    abandon_after: float = 2.0
    """a candidate's calibration run stops at this multiple of the best time so far"""
    plans: dict = dataclasses.field(default_factory=dict)
    """`_key` -> [(workers, threads), calls since measured, seconds per candidate]"""
    last: dict = dataclasses.field(default_factory=dict)
    """the plan of the latest call and whether it was measured then: {'workers', 'threads', 'measured', 'seconds'}"""

    def plan(self, weights: dict, ids, mask, kernels: str) -> tuple:
        """(workers, threads) for sampling this batch on the CPU with these kernels: measured, kept, re-measured
        now and then."""
        n = torch.get_num_threads()
        if n == 1 or ids.device.type != "cpu":
            self.last.update(workers=1, threads=n, measured=False, seconds=None)
            return 1, n
        key = _key(weights, ids.shape[0], n, kernels)
        entry = self.plans.get(key)
        measured = entry is None or entry[1] >= self.recalibrate_every
        if measured:
            choice, seconds = self.calibrate(weights, ids, mask, n=n, kernels=kernels)
            entry = self.plans[key] = [choice, 0, seconds]
        entry[1] += 1
        self.last.update(workers=entry[0][0], threads=entry[0][1], measured=measured, seconds=entry[2])
        return entry[0]

    def calibrate(self, weights: dict, ids, mask, *, n: int, kernels: str) -> tuple:
        """Fastest (workers, threads) for this batch: `calibration_steps` greedy steps per candidate, twice, no row
        stopping early. A candidate is stopped once it has taken `abandon_after` times the best time so far (threads
        that wait at a barrier for a core another job holds can be 20x slower; the measurement must not be).
        Returns the choice and the seconds per candidate ('WxT' -> s, None: abandoned)."""
        steps = min(self.calibration_steps, weights["cos"].shape[0] - ids.shape[1])  # within the RoPE table read
        timing = SampleSpec(max_new_tokens=steps, eos_id=-1, pad_id=0, greedy=True, kernels=kernels)
        best = {c: float("inf") for c in _candidates(n)}
        for _ in range(2):
            for c in best:
                t0 = time.perf_counter()
                limit = min(best.values())
                deadline = None if limit == float("inf") else t0 + self.abandon_after * limit
                run(weights, ids, mask, timing, None, *c, deadline=deadline)
                s = time.perf_counter() - t0
                best[c] = min(best[c], s if s < self.abandon_after * limit else float("inf"))
        choice = (1, 1)
        for c, s in best.items():
            if s < best[choice] * (1 - self.margin):
                choice = c
        return choice, {f"{w}x{t}": None if s == float("inf") else s for (w, t), s in best.items()}
