"""Every float x in [-110, 0] (1.1 billion) through the MoE router's exp in the decode step (kernels/exp_float.h)
against static_cast<float>(std::exp(static_cast<double>(x))), the per-element call it replaced (issue 50): how many
differ (none may) and how many Ziv's test handed to std::exp, for this CPU's build and, where the CPU runs it, the
AVX2 build (-march=haswell). tests/test_step_kernel.py checks every 61st float; this checks them all (~10 s a build).

    python benchmarks/exp_check.py [--stride 1]
"""
from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a checkout without installing
from gpolib.engine import native  # noqa: E402


def sweep(lib, lo: float, hi: float, stride: int) -> tuple:
    fn = native.function("gpolib_exp_check", [ctypes.c_float, ctypes.c_float, ctypes.c_int64,
                                              ctypes.POINTER(ctypes.c_int64)], lib=lib)
    counts = (ctypes.c_int64 * 3)()
    if fn(lo, hi, stride, counts):
        raise ValueError(f"gpolib_exp_check refused [{lo}, {hi}] stride {stride}")
    return tuple(counts)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stride", type=int, default=1, help="check every n-th float (1: all)")
    args = p.parse_args(argv)
    builds = {"native": ctypes.CDLL(str(native.build()))}
    if "avx2" in native._cpu_flags().split():
        builds["haswell"] = ctypes.CDLL(str(native.build(march="haswell")))
    worst = 0
    for name, lib in builds.items():
        t = time.perf_counter()
        checked, differ, fallbacks = sweep(lib, -110.0, 0.0, args.stride)
        below = [a + b for a, b in zip(sweep(lib, -float("inf"), -110.0, max(args.stride, 4099)),
                                       sweep(lib, -float("inf"), -float("inf"), 1))]
        worst = max(worst, differ, below[1])
        print(f"{name}: {checked:,} floats in [-110, 0], {differ} differ, {fallbacks} decided by std::exp; "
              f"{below[0]:,} below -110 (every 4099th, and -inf), {below[1]} differ; {time.perf_counter() - t:.1f} s")
    return 1 if worst else 0


if __name__ == "__main__":
    sys.exit(main())
