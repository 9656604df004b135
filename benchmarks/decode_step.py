"""One decode step of the embedded dense model three ways, and the whole-step kernel's matmul against torch's, on
this CPU (issue 20: what the whole-step kernel, `gpolib.engine.step_kernel`, buys and where its time goes).

1. The matmuls of a decode step at 128 rows (the embedded model's q/k/v, o, gate/up, down and LM-head shapes):
   `torch.mm` on the decoder's weights against the kernel's register-blocked product on packed weights
   (`step_kernel.gemm`), as GFLOP/s.
2. One decode step of 128 rows of the embedded dense model (random LoRA folded in) at 40 / 120 / 200 cached
   positions: `Decoder.step` with the whole-step kernel, with the per-layer torch step and the attention kernel
   (kernels='attention', as under GPOLIB_STEP_KERNEL=0), and torch throughout (kernels='none', as under
   GPOLIB_DECODE_KERNEL=0), in milliseconds.
Each figure is the best of `--repeats` means over 20 calls, beside the fp32 matmul peak measured in the same run at
the same threads.

    python benchmarks/decode_step.py [--threads 1] [--rows 128] [--repeats 5]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a checkout without installing
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402

from gpolib.bench.common import cpu_model, matmul_peak_gflops  # noqa: E402
from gpolib.engine import step_kernel  # noqa: E402
from gpolib.engine.decoder import Decoder  # noqa: E402
from gpolib.engine.weights import read  # noqa: E402

MODEL = "data/models/tiny-qwen3"


def best_mean(fn, repeats: int, calls: int = 20) -> float:
    """Seconds per call: the best of `repeats` means over `calls` calls, after one warm-up call."""
    fn()
    means = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        means.append((time.perf_counter() - t0) / calls)
    return min(means)


def matmuls(weights: dict, rows: int, repeats: int) -> list:
    """(name, k, n, torch GFLOP/s, kernel GFLOP/s) for the step's matmul shapes at `rows` rows."""
    lw = weights["layers"][0]
    shapes = {"q/k/v": lw["w_qkv"], "o": lw["w_o"], "gate/up": lw["w_gu"], "down": lw["w_down"],
              "LM head": weights["head"]}
    out = []
    for name, w in shapes.items():
        k, n = w.shape
        a, packed = torch.randn(rows, k), step_kernel.pack(w)
        flops = 2 * rows * k * n
        t_torch = best_mean(lambda: torch.mm(a, w), repeats)
        t_kernel = best_mean(lambda: step_kernel.gemm(a, packed), repeats)
        out.append((name, k, n, flops / t_torch / 1e9, flops / t_kernel / 1e9))
    return out


def step_ms(weights: dict, rows: int, end: int, repeats: int, kernels: str) -> float:
    """Milliseconds of one `Decoder.step` of `rows` rows writing cache column end - 1 (a cache filled at random),
    with these kernels (`native.KERNELS`)."""
    dec = Decoder(weights, rows, end + 1, kernels=kernels)
    dec.k.normal_()
    dec.v.normal_()
    tok = torch.randint(2, weights["embed"].shape[0], (rows,))
    pos = torch.full((rows,), end - 1)
    with torch.inference_mode():
        return 1e3 * best_mean(lambda: dec.step(tok, pos, end - 1), repeats)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rows", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from gpolib.models import load_policy

    torch.manual_seed(0)
    model, _ = load_policy(MODEL, lora_r=16)
    for n, prm in model.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(prm, std=0.02)
    weights = read(model.eval(), 256)
    if not step_kernel.supports(weights):
        print("the whole-step kernel is unavailable here (no C++ compiler)")
        return 1
    peak = matmul_peak_gflops(threads=args.threads)
    print(f"{cpu_model()}, {args.threads} thread(s); fp32 matmul peak {peak:.0f} GFLOP/s (1024^3)")
    print(f"\nmatmuls of a decode step, {args.rows} rows: GFLOP/s (share of the peak)")
    print(f"{'':10s} {'k x n':>10s} {'torch.mm':>16s} {'kernel':>16s}")
    for name, k, n, g_torch, g_kernel in matmuls(weights, args.rows, args.repeats):
        shares = f"{g_torch:8.1f} ({g_torch / peak:4.0%}) {g_kernel:8.1f} ({g_kernel / peak:4.0%})"
        print(f"{name:10s} {f'{k}x{n}':>10s} {shares}")
    print(f"\none decode step, {args.rows} rows (ms)")
    print(f"{'positions':>9s} {'whole-step kernel':>18s} {'per layer + attention kernel':>29s} {'torch':>8s}")
    for end in (40, 120, 200):
        whole, layer, plain = (step_ms(weights, args.rows, end, args.repeats, k) for k in ("all", "attention", "none"))
        print(f"{end:9d} {whole:18.2f} {layer:29.2f} {plain:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
