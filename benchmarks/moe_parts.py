"""The MoE-only parts of an RL step one at a time, on this CPU (issue 50, the fourth round): what
`benchmarks/moe_vs_dense_step.py` times as phases, taken apart.

1. The experts kernels (`engine.experts_kernel`) at a training micro-batch's tokens (16 rows x 170 positions): the
   forward with its saved [gate | up] product and the backward that reads it, the fine MoE's shapes (64 experts of
   width 16, top-8, hidden 128), random weights and routing, as ms and GFLOP/s.
2. The routers' top-k for the same tokens: the C++ kernel (`engine.topk_kernel`) against torch.topk.
3. P3's measure (`moe.expert_change`) over 8 layers x 6,000 tokens: by bit sets (ids below 64) against the pairwise
   comparison it replaces where ids are not.
4. One decode step (`Decoder.step`, the whole-step kernel) of 128 rows at 60 and 140 cached positions: the fine MoE
   against the dense embedded model (random LoRA folded in), and their ratio.
Each figure is the best of `--repeats` means over 20 calls (`decode_step.best_mean`; the decode steps by
`decode_step.step_ms`), one thread, beside the fp32 matmul peak measured in the same run.

    python benchmarks/moe_parts.py [--repeats 7]
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a checkout without installing
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402

from decode_step import best_mean, step_ms  # noqa: E402  (this folder is on sys.path when run as a script)
from gpolib import moe  # noqa: E402
from gpolib.bench.common import cpu_model, matmul_peak_gflops  # noqa: E402
from gpolib.engine import experts_kernel as K  # noqa: E402
from gpolib.engine import topk_kernel  # noqa: E402
from gpolib.engine.weights import read  # noqa: E402
from gpolib.models import EMBEDDED, load_policy  # noqa: E402


def ms(fn, repeats: int, calls: int = 20) -> float:
    return 1e3 * best_mean(fn, repeats, calls)


def experts_and_top_k(repeats: int, N: int = 16 * 170, H: int = 128, E: int = 64, k: int = 8, I: int = 16) -> None:
    g = torch.Generator().manual_seed(0)
    x, dy = torch.randn(N, H, generator=g), torch.randn(N, H, generator=g)
    p = (torch.randn(N, E, generator=g) * 2).softmax(-1)  # (N, E) router probabilities
    w, idx = p.topk(k, dim=-1)
    gate_up, down = torch.randn(E, 2 * I, H, generator=g) * 0.1, torch.randn(E, H, I, generator=g) * 0.1
    packed, saved = K.pack(gate_up, down), torch.empty(N * k, 2 * I)
    flops = 2 * N * k * (H * 2 * I + I * H)  # the forward's matmuls; the backward's are twice as many
    fwd = ms(lambda: K.packed_swiglu(x, idx, w, packed, g_save=saved), repeats)
    bwd = ms(lambda: K.swiglu_backward(x, dy, idx, w, gate_up, down, packed, g_saved=saved), repeats)
    print(f"experts kernels, {N} tokens: forward {fwd:.2f} ms ({flops / fwd / 1e6:.0f} GFLOP/s), "
          f"backward {bwd:.2f} ms ({2 * flops / bwd / 1e6:.0f} GFLOP/s)")
    kernel, ref = ms(lambda: topk_kernel.top_k_indices(p, k), repeats), ms(lambda: p.topk(k, dim=-1), repeats)
    print(f"router top-{k} of {E}, {N} tokens: kernel {kernel:.2f} ms, torch.topk {ref:.2f} ms")


def expert_change(repeats: int, L: int = 8, n: int = 6000, E: int = 64, k: int = 8) -> None:
    g = torch.Generator().manual_seed(1)
    before = torch.rand(L, n, E, generator=g).topk(k, dim=-1).indices  # (L, n, k)
    after = torch.rand(L, n, E, generator=g).topk(k, dim=-1).indices
    mask = torch.ones(n)
    bits = ms(lambda: moe.expert_change(before, after, mask), repeats, calls=5)
    pairs = ms(lambda: moe.expert_change(before + 64, after + 64, mask), repeats, calls=5)  # ids >= 64: every pair
    print(f"expert_change, {L} layers x {n} tokens: bit sets {bits:.2f} ms, pairwise {pairs:.2f} ms")


def decode_steps(repeats: int, rows: int = 128) -> None:
    weights = {}
    for name, kw in (("dense", {}), ("moe-fine", {"train_router": True})):
        model, _ = load_policy(EMBEDDED[name], lora_r=16, lora_alpha=32, **kw)
        with torch.no_grad():
            for pname, prm in model.named_parameters():
                if "lora_B" in pname:
                    prm.normal_(0, 0.02, generator=torch.Generator().manual_seed(2))
        weights[name] = read(model, 300)
    for end in (60, 140):
        dense, fine = (step_ms(weights[name], rows, end, repeats, "all") for name in ("dense", "moe-fine"))
        print(f"decode step, {rows} rows at {end} positions: dense {dense:.2f} ms, fine MoE {fine:.2f} ms, "
              f"ratio {fine / dense:.2f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args(argv)
    peak = matmul_peak_gflops(threads=1)
    torch.set_num_threads(1)
    print(f"cpu: {cpu_model()}; fp32 matmul peak (1024^3, 1 thread, best of 8): {peak:.1f} GFLOP/s")
    experts_and_top_k(args.repeats)
    expert_change(args.repeats)
    decode_steps(args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
