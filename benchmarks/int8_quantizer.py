"""The w8a8 engine's int8 quantizer (`engine.quant.int8_per_channel`), plain tensor ops against torch's own per-channel
qint8 quantizer (what it used until this script), on one thread (a notebook job's).

The w8a8 engine (notebook 09's C3 arms) quantizes the input rows of every projection at every decode step
(`quant.int8_per_token`), so the quantizer is called four times per layer and step. Prints the microseconds per call
on a (128, 128) block, and the rollout of one real batch of the `grpo_w8a8` arm (16 prompts x 8) with each
quantizer: seconds per repeat (interleaved, order alternating), the median ratio, and whether the completions and
sampling log-probs are identical (they must be: the two are bit-equal, tests/test_quant_engine.py).

    python benchmarks/int8_quantizer.py [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402

from gpolib.bench.common import cpu_model, matmul_peak_gflops  # noqa: E402
from gpolib.engine import quant  # noqa: E402
from gpolib.lab import beyond  # noqa: E402
from gpolib.lab.runs import configs  # noqa: E402
from gpolib.train import Trainer  # noqa: E402


def per_call_us(fn, x: torch.Tensor, n: int = 3000) -> float:
    fn(x)
    t0 = time.perf_counter()
    for _ in range(n):
        fn(x)
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(f"cpu: {cpu_model()}; fp32 matmul peak with 2 threads: {matmul_peak_gflops(threads=2):.0f} GFLOP/s")
    torch.set_num_threads(1)
    variants = {"torch quantizer": quant.torch_int8_per_channel, "plain ops": quant.int8_per_channel}
    x = torch.randn(128, 128)
    for name, fn in variants.items():
        print(f"{name:16s} {per_call_us(fn, x):.1f} us per (128, 128) block")
    trainer = Trainer(configs({"grpo_w8a8": beyond.ARMS["grpo_w8a8"]}, {"eval_prompts": 8, "steps": 1})["grpo_w8a8"])
    real, times, outs = quant.int8_per_channel, {n: [] for n in variants}, {}
    try:
        for rep in range(args.repeats):
            for name in (list(variants) if rep % 2 == 0 else list(variants)[::-1]):
                quant.int8_per_channel = variants[name]
                torch.manual_seed(0)
                t0 = time.perf_counter()
                outs[name] = trainer.rollout(trainer.sample_prompts(0, 0), trainer.cfg.group_size)
                times[name].append(time.perf_counter() - t0)
    finally:
        quant.int8_per_channel = real
    a, b = outs.values()
    same_ids, same_lp = torch.equal(a.completion_ids, b.completion_ids), torch.equal(a.sample_logps, b.sample_logps)
    print(f"rollout 16 prompts x 8, w8a8 engine: identical completions {same_ids}, identical sampling log-probs {same_lp}")
    base = times["torch quantizer"]
    for name, ts in times.items():
        ratio = statistics.median(t / s for t, s in zip(ts, base))
        print(f"   {name:16s} s {[round(t, 2) for t in ts]}; / torch quantizer: median {ratio:.3f}")


if __name__ == "__main__":
    main()
