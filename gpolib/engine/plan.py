"""How the decoder sampler uses the CPU cores: chosen by timing, not by a constant.

A tiny model's decode step is a few hundred small kernels. Two ways to use n cores:
  - intra-op threads (`torch.set_num_threads(n)`): each kernel split over n threads, which meet at a
    barrier after every kernel; on a busy machine one descheduled thread stalls all of them
    (measured here: 5 s -> 23-77 s per 128 x 200 tokens beside other jobs);
  - row shards: the batch split into n parts, each decoded by its own Python thread with one torch
    thread (kernels release the GIL, so the shards' kernels overlap; no barrier between them).
With the whole-step kernel (`step_kernel`, dense float32 models) a (1, n) step is one call whose rows are split over
n threads inside it (no barrier between layers), the loop's own torch ops on one thread; n row shards still win
where the shards' Python (the draw, the loop) overlaps with the other shard's kernel.
`plan` times a few decode steps of the actual batch under each candidate ((1 shard, 1 thread),
(1, n), (n, 1)), twice and interleaved, keeps the fastest (the simpler one unless another is 5%
faster), caches it per (model shape, batch size, n) and measures again every `RECALIBRATE_EVERY`
calls, since a shared machine's load changes. Each row draws from its own uniforms, so the
completions do not depend on the plan (tested).
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import torch

from ..runtime import cpu_threads

CALIBRATION_STEPS = 8
"""decode steps timed per candidate (after the prefill of the real prompts)"""
RECALIBRATE_EVERY = 50
"""calls with one cached plan before it is measured again"""
MARGIN = 0.1
"""a candidate replaces a simpler one only if it is at least this much faster"""
ABANDON_AFTER = 2.0
"""a candidate's calibration run stops at this multiple of the best time so far"""
_PLANS: dict = {}
LAST: dict = {}
"""the plan of the latest call and whether it was measured then: {'workers', 'threads', 'measured', 'seconds'}"""


def run(weights: dict, ids, mask, loop, args: tuple, u, workers: int = 1, threads: int = 0) -> tuple:
    """`loop(decoder, ids, mask, *args[:5], u, *args[5:])` on `workers` row shards with `threads` torch threads each
    (0: the process's setting) -> ids, logps (B, T) with shards padded to the longest (pad id args[2])."""
    from .decoder import Decoder

    S = ids.shape[1] + args[0]
    if workers == 1:
        dec = Decoder(weights, ids.shape[0], S, threads=threads or torch.get_num_threads())
        # a whole-step kernel splits its rows over the threads itself; the loop's own small torch ops (the draw) on
        # one thread, where waking sleeping OpenMP workers would cost more than they save
        with cpu_threads(1 if dec.fused_step is not None else threads):
            return loop(dec, ids, mask, *args[:5], u, *args[5:])

    def shard(rows):
        with torch.inference_mode():  # thread-local: enter it in the worker
            return loop(Decoder(weights, len(rows), S), ids[rows], mask[rows], *args[:5],
                        None if u is None else u[rows], *args[5:])
    with cpu_threads(1), ThreadPoolExecutor(workers) as pool:
        outs = list(pool.map(shard, torch.arange(ids.shape[0], device=ids.device).tensor_split(workers)))
    T = max(o[0].shape[1] for o in outs)
    pad = lambda x, v: torch.nn.functional.pad(x, (0, T - x.shape[1]), value=v)  # noqa: E731
    return torch.cat([pad(o[0], args[2]) for o in outs]), torch.cat([pad(o[1], 0.0) for o in outs])


def _candidates(n: int) -> list:
    return list(dict.fromkeys([(1, 1), (1, n), (n, 1)]))  # simplest first


def calibrate(weights: dict, ids, mask, loop, n: int) -> tuple:
    """Fastest (workers, threads) for this batch: CALIBRATION_STEPS greedy steps per candidate, twice.
    A candidate is stopped once it has taken `ABANDON_AFTER` times the best time so far (threads that
    wait at a barrier for a core another job holds can be 20x slower; the measurement must not be)."""
    steps = min(CALIBRATION_STEPS, weights["cos"].shape[0] - ids.shape[1])  # within the RoPE table read
    best = {c: float("inf") for c in _candidates(n)}
    for _ in range(2):
        for c in best:
            t0 = time.perf_counter()
            limit = min(best.values())
            args = (steps, -1, 0, 1.0, 1.0, None if limit == float("inf") else t0 + ABANDON_AFTER * limit)
            run(weights, ids, mask, loop, args, None, *c)  # eos -1: no row stops early
            s = time.perf_counter() - t0
            best[c] = min(best[c], s if s < ABANDON_AFTER * limit else float("inf"))
    choice = (1, 1)
    for c, s in best.items():
        if s < best[choice] * (1 - MARGIN):
            choice = c
    return choice, {f"{w}x{t}": None if s == float("inf") else s for (w, t), s in best.items()}  # None: abandoned


def plan(weights: dict, ids, mask, loop) -> tuple:
    """(workers, threads) for sampling this batch on the CPU: measured, cached, re-measured now and then."""
    n = torch.get_num_threads()
    if n == 1 or ids.device.type != "cpu":
        LAST.update(workers=1, threads=n, measured=False, seconds=None)
        return 1, n
    lw = weights["layers"][0]
    key = (tuple(weights["embed"].shape), len(weights["layers"]), weights["n_q"], weights["n_kv"], weights["d"],
           tuple(lw["w_gu"].shape) if "w_gu" in lw else tuple(lw["e_gu"].shape), weights["head"].dtype, ids.shape[0], n)
    entry = _PLANS.get(key)
    measured = entry is None or entry[1] >= RECALIBRATE_EVERY
    if measured:
        choice, seconds = calibrate(weights, ids, mask, loop, n)
        entry = _PLANS[key] = [choice, 0, seconds]
    entry[1] += 1
    LAST.update(workers=entry[0][0], threads=entry[0][1], measured=measured, seconds=entry[2])
    return entry[0]
