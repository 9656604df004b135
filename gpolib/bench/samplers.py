"""Sampler vs sampler: completion tokens per second of gpolib's samplers on one prompt batch, in one run.

Used by `python -m gpolib bench` (its sampler line, on the benchmark's model, prompts and budget) and by
`benchmarks/sampler_speed.py` (random-weight models, --no-eos, more repeats).

Configurations (`gpolib.engine.sample` with `SampleSpec(engine=..., plan=..., kernels=...)`), with n = the process's
threads:
  hf@1          the transformers forward with a DynamicCache, finished rows dropped, one thread: the
                default `hf` backend before issue 20 (TrainConfig.rollout_threads was 1);
  hf@n          the same with n threads;
  decoder       the engine's `Decoder` (preallocated KV cache, fused projections, LoRA folded in) with
                the plan measured by a `gpolib.engine.Planner` among the three below: the new default;
  decoder WxT   the decoder with W row shards of T threads each (1x1, 1xn, nx1);
  decoder WxT, per layer   the same without the whole-step kernel (kernels='attention'): torch per layer,
                attention by the fused kernel, listed where the kernels are built;
  decoder WxT, torch   without either kernel (kernels='none'): torch throughout (attention as bmm, softmax, bmm);
  generate@1    `transformers.generate` (optional).
Repeats are interleaved (hf@1, hf@n, decoder, ..., hf@1, ...) so that load from other jobs falls on all;
each repeat uses its own sampling seed, the same for every configuration (with an EOS the lengths still
differ between the two engines' samples, so rates are per token). Reported: median seconds, completion
tokens per second, and the speed-up vs hf@1 = median over repeats of the paired (hf@1 s/token) / (s/token).
Achieved GFLOP/s counts the model's own work: 2 N_active per token (matmul parameters a token passes
through; for MoE the top-k experts) plus 4 n_layers n_heads d_head per attended position; it is printed
beside the fp32 matmul peak measured with the same threads.
"""
from __future__ import annotations

import statistics
import time

import torch

from ..engine import Planner, SampleSpec, kernels_built, sample


def prompt_batch(tok, prompts: list, group_size: int) -> tuple:
    """Left-padded ids and mask, each prompt repeated group_size times. (B, P) each."""
    from ..rollout import tokenize_prompts

    ids, mask = tokenize_prompts(tok, prompts, "cpu")
    return ids.repeat_interleave(group_size, 0), mask.repeat_interleave(group_size, 0)


def model_flops(model, p_mask: torch.Tensor, lengths: torch.Tensor) -> float:
    """FLOPs of the model's own work for the generated tokens (see the module docstring)."""
    cfg = model.get_base_model().config if hasattr(model, "get_base_model") else model.config
    H, L, d, nq = cfg.hidden_size, cfg.num_hidden_layers, cfg.head_dim, cfg.num_attention_heads
    nkv = cfg.num_key_value_heads
    attn = H * (nq + 2 * nkv) * d + nq * d * H
    if getattr(cfg, "num_experts", 0):
        mlp = cfg.num_experts_per_tok * 3 * H * cfg.moe_intermediate_size + H * cfg.num_experts
    else:
        mlp = 3 * H * cfg.intermediate_size
    n_active = L * (attn + mlp) + H * cfg.vocab_size
    p_len = p_mask.sum(dim=1).double()  # (B,)
    T = lengths.double()
    attended = (T * p_len + T * (T + 1) / 2).sum()  # sum over new tokens of positions attended
    return float(2 * n_active * T.sum() + 4 * L * nq * d * attended)


def _lengths(c: torch.Tensor, eos: int) -> torch.Tensor:
    """(B,) tokens up to and including the first EOS (the whole width when eos never occurs)."""
    if eos < 0:
        return torch.full((c.shape[0],), c.shape[1])
    is_eos = (c == eos).long()
    return ((is_eos.cumsum(dim=1) - is_eos) == 0).sum(dim=1)


KERNEL_LABELS = {"per layer": "attention", "torch": "none"}
"""configuration label -> the decoder's kernels (`SampleSpec.kernels`): without the whole-step kernel; without any"""


def configurations(n: int, with_generate: bool) -> dict:
    """name -> (engine, torch threads, decoder plan[, kernels]): today's default first, then the new default.
    kernels (`KERNEL_LABELS`) 'attention': without the whole-step kernel; 'none': without any (listed where the
    kernels are built); absent: the process's setting."""
    out = {"hf@1": ("hf", 1, None), f"hf@{n}": ("hf", n, None), "decoder": ("decoder", n, None),
           "decoder 1x1": ("decoder", 1, (1, 1)), f"decoder 1x{n}": ("decoder", n, (1, n)),
           f"decoder {n}x1": ("decoder", n, (n, 1))}
    if n == 1:
        out = {k: out[k] for k in ("hf@1", "decoder")}
    if kernels_built():
        for label, kernels in KERNEL_LABELS.items():
            out[f"decoder 1x1, {label}"] = ("decoder", 1, (1, 1), kernels)
            if n > 1:
                out[f"decoder {n}x1, {label}"] = ("decoder", n, (n, 1), kernels)
    if with_generate:
        out["generate@1"] = ("generate", 1, None)
    return out


def run_engine(model, tok, ids, mask, conf: tuple, T: int, eos: int, seed: int, autocast: str | None = None,
               planner: Planner | None = None) -> dict:
    """One batch with one configuration: wall and process CPU seconds, completion tokens and lengths, the plan.
    autocast: 'bfloat16' / 'float16' samples under torch.autocast (a reduced-precision engine), None in fp32.
    planner: where the decoder's measured plans are kept (None: a new one, measured on this call)."""
    from ..rollout import autocast as autocast_ctx

    engine, threads, plan = conf[:3]
    planner = Planner() if planner is None else planner
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    t0, c0 = time.perf_counter(), time.process_time()
    with autocast_ctx(autocast, ids.device):
        c = _sample(model, tok, ids, mask, conf, T, eos, planner)
    lengths = _lengths(c, eos)
    return {"s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "tokens": int(lengths.sum()),
            "lengths": lengths, "plan": dict(planner.last) if engine == "decoder" and plan is None else None}


def _sample(model, tok, ids, mask, conf: tuple, T: int, eos: int, planner: Planner) -> torch.Tensor:
    """Completion ids (B, T') of one configuration."""
    from ..lora import merged_lora

    engine, _, plan = conf[:3]
    if engine == "generate":
        with merged_lora(model):
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=T, do_sample=True, top_k=0,
                                 eos_token_id=eos, pad_token_id=tok.pad_token_id)
        return out[:, ids.shape[1]:]
    spec = SampleSpec(max_new_tokens=T, eos_id=eos, pad_id=tok.pad_token_id, engine=engine, plan=plan,
                      kernels=conf[3] if len(conf) > 3 else None)
    return sample(model, ids, mask, spec, planner)[0]


def measure(model, tok, ids, mask, max_new_tokens: int, n: int, repeats: int, no_eos: bool = False,
            with_generate: bool = False, autocast: str | None = None) -> dict:
    """All configurations, interleaved `repeats` times after one short warm-up each (under torch.autocast in
    `autocast`'s dtype when given: the reduced-precision engine of `TrainConfig.rollout_autocast`)."""
    eos = -1 if no_eos else tok.eos_token_id
    confs = configurations(n, with_generate)
    planner = Planner()  # the measured plans of this measurement, re-measured as in training
    for c in confs.values():
        run_engine(model, tok, ids, mask, c, 8, eos, 0, autocast, planner)
    runs = {k: [] for k in confs}
    for rep in range(repeats):
        for k, c in confs.items():
            runs[k].append(run_engine(model, tok, ids, mask, c, max_new_tokens, eos, 1000 + rep, autocast, planner))
    out = {"threads": n, "autocast": autocast, "configurations": {}, "speedups": {}}
    for k, rs in runs.items():
        secs = sum(r["s"] for r in rs)
        out["configurations"][k] = {
            "s_median": statistics.median(r["s"] for r in rs), "s_all": [round(r["s"], 3) for r in rs],
            "tokens": [r["tokens"] for r in rs], "tokens_per_s": sum(r["tokens"] for r in rs) / secs,
            "gflops": sum(model_flops(model, mask, r["lengths"]) for r in rs) / secs / 1e9,
            "cpu_s_all": [round(r["cpu_s"], 3) for r in rs],
            "plans": [(r["plan"]["workers"], r["plan"]["threads"]) for r in rs if r["plan"]]}
    per_tok = {k: [r["s"] / r["tokens"] for r in rs] for k, rs in runs.items()}
    for k in runs:  # median over repeats of the paired ratio (s/token of hf@1) / (s/token of k)
        out["speedups"][k] = statistics.median(a / b for a, b in zip(per_tok["hf@1"], per_tok[k]))
    return out


def report(r: dict, peak: float) -> None:
    engine = f"; sampling under {r['autocast']} autocast" if r.get("autocast") else ""
    print(f"\n=== up to {r['threads']} thread(s){engine}; fp32 matmul peak {peak:.0f} GFLOP/s ({r['threads']} threads, "
          f"1024^3, best of 8) ===")
    print(f"{'configuration':14s} {'s median':>9s} {'tok/s':>8s} {'GFLOP/s':>8s} {'% peak':>7s} {'vs hf@1':>8s}"
          f"  s all / tokens")
    for k, v in r["configurations"].items():
        plans = f"  plans {v['plans']}" if v["plans"] else ""
        print(f"{k:14s} {v['s_median']:9.3f} {v['tokens_per_s']:8.0f} {v['gflops']:8.1f} "
              f"{100 * v['gflops'] / peak:6.1f}% {r['speedups'][k]:7.2f}x  {v['s_all']} {v['tokens']}{plans}")
