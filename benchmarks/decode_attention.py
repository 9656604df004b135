"""Where a decode step of the embedded models spends its attention time, on this CPU (issue 20: why the decoder
sampler stops near 2x the transformers loop, not 3x).

One decode step's attention over a KV cache, for the embedded dense model's shape (2 KV heads, 2 query heads per KV
head, head dim 32) and a batch of 128 rows, the way `gpolib.engine.decoder.Decoder.step` computes it:
    scores (B nkv, r, end) = q (B nkv, r, d) @ K (B nkv, d, end)      `bmm`, r = 2 rows per product
    probs = softmax(scores);  out (B nkv, r, d) = probs @ V (B nkv, end, d)
against the alternatives tried: the same products on a contiguous copy of the cache, `scaled_dot_product_attention`
(the CPU flash kernel, one query per row), and the products with K stored untransposed (end, d).
Each is timed at three cache lengths and printed as microseconds, GFLOP/s and GB/s of cache read, beside the
fp32 matmul peak and two read bandwidths (a sum over 256 MB, from memory, and over 8 MB, from cache) measured in
the same run. The batched products read their operands at a fraction of the bandwidth even when the cache fits
in L2 (`--rows 8`): with r = 2 rows per product the cost is per product, not per byte.

    python benchmarks/decode_attention.py [--threads 1] [--rows 128]
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from gpolib.engine import attention_kernel
from gpolib.bench.common import cpu_model, matmul_peak_gflops

N_KV, R, D = 2, 2, 32
"""the embedded dense model's KV heads, query heads per KV head and head dim (`gpolib.models.tiny_config`)"""


def seconds(fn, repeats: int = 50) -> float:
    """Mean seconds of fn() over `repeats` calls after one warm-up call."""
    fn()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats


def read_gbps(n_floats: int, repeats: int) -> float:
    """GB/s of summing an fp32 tensor of n_floats (best of `repeats`)."""
    x = torch.randn(n_floats)
    best = min(seconds(x.sum, 1) for _ in range(repeats))
    return n_floats * 4 / best / 1e9


def variants(rows: int, end: int, S: int) -> dict:
    """name -> a function computing one layer's decode attention for `rows` rows over `end` cached positions."""
    bn = rows * N_KV
    k_t = torch.randn(rows, N_KV, D, S)  # the decoder's cache: keys transposed, (B, nkv, d, S)
    v = torch.randn(rows, N_KV, S, D)
    k_rows = torch.randn(rows, N_KV, S, D)  # keys untransposed
    q = torch.randn(bn, R, D)
    keys, vals = k_t[..., :end].reshape(bn, D, end), v[:, :, :end].reshape(bn, end, D)
    keys_c, vals_c = keys.contiguous(), vals.contiguous()
    probs = torch.softmax(torch.bmm(q, keys), -1)
    P = min(16, end)
    bias = torch.zeros(bn, 1, P).masked_fill_(torch.rand(bn, 1, P) < 0.2, float("-inf"))  # left padding

    def whole():  # the decoder's torch path: scores, padding bias on the prompt columns, softmax, values
        s = torch.bmm(q, keys)
        s[:, :, :P] += bias
        return torch.bmm(torch.softmax(s, -1), vals)
    return {
        "decoder torch path (all four)": whole,
        "fused kernel (all four)": lambda: attention_kernel.attend(q, keys, vals, bias, torch.get_num_threads()),
        "decoder: bmm q K": lambda: torch.bmm(q, keys),
        "decoder: softmax": lambda: torch.softmax(probs, -1),
        "decoder: bmm p V": lambda: torch.bmm(probs, vals),
        "bmm q K, contiguous copy": lambda: torch.bmm(q, keys_c),
        "bmm p V, contiguous copy": lambda: torch.bmm(probs, vals_c),
        "bmm K q (keys untransposed)": lambda: torch.bmm(k_rows[:, :, :end].reshape(bn, end, D), q.transpose(1, 2)),
        "sdpa (flash, 1 query)": lambda: F.scaled_dot_product_attention(
            q.view(rows, N_KV * R, 1, D), k_rows[:, :, :end], v[:, :, :end], scale=1.0, enable_gqa=True),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rows", type=int, default=128, help="rows in the batch (8: the cache fits in L2)")
    p.add_argument("--ends", type=int, nargs="+", default=[40, 120, 200], help="cached positions")
    args = p.parse_args(argv)
    peak = matmul_peak_gflops(threads=args.threads)
    torch.set_num_threads(args.threads)
    print(f"cpu: {cpu_model()}; {args.threads} thread(s); fp32 matmul peak {peak:.0f} GFLOP/s; read bandwidth "
          f"{read_gbps(64 * 2 ** 20, 5):.0f} GB/s (256 MB), {read_gbps(2 * 2 ** 20, 50):.0f} GB/s (8 MB)")
    for end in args.ends:
        cache_mb = args.rows * N_KV * D * end * 4 / 2 ** 20
        print(f"\n{args.rows} rows, {end} cached positions: K (and V) of one layer {cache_mb:.2f} MB")
        print(f"  {'variant':30s} {'us':>8s} {'GFLOP/s':>8s} {'GB/s read':>10s} {'us per product':>15s}")
        flops = 2 * args.rows * N_KV * R * D * end  # one of the two products
        for name, fn in variants(args.rows, end, max(args.ends) + 24).items():
            s = seconds(fn)
            both = name.startswith("sdpa") or "all four" in name  # scores and values
            f = 2 * flops if both else 0.0 if "softmax" in name else flops
            read = 2 * cache_mb if both else 0.0 if "softmax" in name else cache_mb
            per = s / (args.rows * N_KV) * 1e6
            print(f"  {name:30s} {s * 1e6:8.0f} {f / s / 1e9:8.1f} {read * 2 ** 20 / s / 1e9:10.1f} {per:15.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
