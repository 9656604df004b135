"""Sampler vs sampler: completion tokens per second of gpolib's samplers on the same prompts, in one run.

Run: `python benchmarks/sampler_speed.py [--model random-dense|random-moe|PATH] [--max-new-tokens 256]
[--rows 128] [--threads 1 2] [--repeats 5] [--no-eos]`.

Configurations (`gpolib.sampler.sample(engine=..., plan=...)`), each timed on the same prompt batch, with
n = --threads:
  hf@1          the transformers forward with a DynamicCache, finished rows dropped, one thread: the
                default `hf` backend before issue 20 (TrainConfig.rollout_threads was 1);
  hf@n          the same with n threads;
  decoder       `gpolib.decode.Decoder` (preallocated KV cache, fused projections, LoRA folded in) with
                the plan measured by `gpolib.sampling_plan` among the three below: the new default;
  decoder WxT   the decoder with W row shards of T threads each (1x1, 1xn, nx1);
  generate@1    `transformers.generate` (with --with-generate).
Repeats are interleaved (hf@1, hf@n, decoder, ..., hf@1, ...) so that load from other jobs falls on all;
each repeat uses its own sampling seed, the same for every configuration (with an EOS the lengths still
differ between the two engines' samples, so rates are per token). Reported: median seconds, completion
tokens per second, and the speed-up vs hf@1 = median over repeats of the paired (hf@1 s/token) / (s/token).
`--no-eos` passes an EOS id that never occurs, so every row runs the whole budget.

Models: `random-dense` / `random-moe` are the embedded architectures (`gpolib.models.tiny_config`,
max_position_embeddings 512) with random weights, seeded: their near-uniform next-token distribution over
99 symbols ends a row with probability ~1/99 per token (mean length ~80 at a budget of 256, a few percent
truncated), like the harder regime's 80-250-token answers. A LoRA (r = 16, B random) is attached.
Achieved GFLOP/s counts the model's own work: 2 N_active per token (matmul parameters a token passes
through; for MoE the top-k experts) plus 4 n_layers n_heads d_head per attended position; it is printed
beside the fp32 matmul peak measured with the same threads.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402

from gpolib.rollout import tokenize_prompts  # noqa: E402
from gpolib.sampler import sample  # noqa: E402
from gpolib.tasks import load_tasks  # noqa: E402

TOKENIZER = "data/models/tiny-qwen3"


def build_model(name: str, lora_r: int = 16, seed: int = 0):
    """(model with LoRA, tokenizer): a random-weight embedded architecture or a local path / hub name."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gpolib.models import load_policy, lora_config, tiny_config

    torch.manual_seed(seed)
    if not name.startswith("random-"):
        model, tok = load_policy(name, lora_r=lora_r)
    else:
        tok = AutoTokenizer.from_pretrained(ROOT / TOKENIZER)
        cfg = tiny_config(name[len("random-"):], len(tok), tok.pad_token_id, tok.eos_token_id)
        cfg.max_position_embeddings = 512
        base = AutoModelForCausalLM.from_config(cfg)
        model = get_peft_model(base, lora_config(base, lora_r, 2 * lora_r))
    for n, p in model.named_parameters():
        if "lora_B" in n:  # a trained adapter, not the zero init
            torch.nn.init.normal_(p, std=0.02)
    return model.eval(), tok


def matmul_peak_gflops(threads: int, n: int = 1024, repeats: int = 8) -> float:
    """Best fp32 GFLOP/s of an (n x n) @ (n x n) product with `threads` threads."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    best = float("inf")
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best / 1e9


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


def configurations(n: int, with_generate: bool) -> dict:
    """name -> (engine, torch threads, decoder plan): today's default first, then the new default."""
    out = {"hf@1": ("hf", 1, None), f"hf@{n}": ("hf", n, None), "decoder": ("decoder", n, None),
           "decoder 1x1": ("decoder", 1, (1, 1)), f"decoder 1x{n}": ("decoder", n, (1, n)),
           f"decoder {n}x1": ("decoder", n, (n, 1))}
    if n == 1:
        out = {k: out[k] for k in ("hf@1", "decoder")}
    if with_generate:
        out["generate@1"] = ("generate", 1, None)
    return out


def run_engine(model, tok, ids, mask, conf: tuple, T: int, eos: int, seed: int) -> dict:
    """One batch with one configuration: wall and process CPU seconds, completion tokens and lengths."""
    from gpolib import sampling_plan
    from gpolib.lora import merged_lora

    engine, threads, plan = conf
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    t0, c0 = time.perf_counter(), time.process_time()
    if engine == "generate":
        with merged_lora(model):
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=T, do_sample=True, top_k=0,
                                 eos_token_id=eos, pad_token_id=tok.pad_token_id)
        c = out[:, ids.shape[1]:]
    else:
        c, _ = sample(model, ids, mask, T, eos, tok.pad_token_id, engine=engine, plan=plan)
    lengths = _lengths(c, eos)
    return {"s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "tokens": int(lengths.sum()),
            "lengths": lengths, "plan": dict(sampling_plan.LAST) if engine == "decoder" and plan is None else None}


def measure(args, n: int, model, tok, ids, mask) -> dict:
    """All configurations, interleaved `args.repeats` times after one short warm-up each."""
    eos = -1 if args.no_eos else tok.eos_token_id
    confs = configurations(n, args.with_generate)
    for c in confs.values():
        run_engine(model, tok, ids, mask, c, 8, eos, 0)
    runs = {k: [] for k in confs}
    for rep in range(args.repeats):
        for k, c in confs.items():
            runs[k].append(run_engine(model, tok, ids, mask, c, args.max_new_tokens, eos, 1000 + rep))
    out = {"threads": n, "configurations": {}, "speedups": {}}
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
    print(f"\n=== up to {r['threads']} thread(s); fp32 matmul peak {peak:.0f} GFLOP/s ({r['threads']} threads, "
          f"1024^3, best of 8) ===")
    print(f"{'configuration':14s} {'s median':>9s} {'tok/s':>8s} {'GFLOP/s':>8s} {'% peak':>7s} {'vs hf@1':>8s}"
          f"  s all / tokens")
    for k, v in r["configurations"].items():
        plans = f"  plans {v['plans']}" if v["plans"] else ""
        print(f"{k:14s} {v['s_median']:9.3f} {v['tokens_per_s']:8.0f} {v['gflops']:8.1f} "
              f"{100 * v['gflops'] / peak:6.1f}% {r['speedups'][k]:7.2f}x  {v['s_all']} {v['tokens']}{plans}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="random-dense", help="random-dense | random-moe | a local path or hub name")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--rows", type=int, default=128, help="completions per batch (16 prompts x 8 by default)")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--threads", type=int, default=2, help="n: the process's threads (configurations use 1 or n)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--no-eos", action="store_true", help="rows never end early: every row runs the whole budget")
    p.add_argument("--with-generate", action="store_true", help="also time transformers.generate")
    p.add_argument("--json", default="", help="also write the results to this JSON file")
    args = p.parse_args(argv)
    model, tok = build_model(args.model)
    prompts = [t["prompt"] for t in load_tasks(str(ROOT / "data/tasks/train.jsonl"))[: args.rows // args.group_size]]
    ids, mask = tokenize_prompts(tok, prompts, "cpu")
    ids, mask = ids.repeat_interleave(args.group_size, 0), mask.repeat_interleave(args.group_size, 0)  # (B, P)
    env = {"torch": torch.__version__, "cpu_count": os.cpu_count(), "model": args.model,
           "rows": ids.shape[0], "prompt_len_max": ids.shape[1], "max_new_tokens": args.max_new_tokens,
           "no_eos": args.no_eos, "loadavg_1_5_15": [round(x, 2) for x in os.getloadavg()]}
    print("environment:", json.dumps(env))
    peak = matmul_peak_gflops(args.threads)
    r = measure(args, args.threads, model, tok, ids, mask)
    r.update(matmul_peak_gflops=peak, environment=env, loadavg_end=[round(x, 2) for x in os.getloadavg()])
    report(r, peak)
    print("\nRESULTS_JSON " + json.dumps(r))
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
