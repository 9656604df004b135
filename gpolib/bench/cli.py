"""The benchmark's command line and report: `python -m gpolib bench --help`."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from pathlib import Path

from .. import jsonio
from ..runtime import setup_threads
from .common import G, MAX_NEW, MODEL, PROMPTS, environment, like_for_like_loss_check, matmul_peak_gflops
from .trl_side import random_qwen_05b, run_ab, run_side, side_in_subprocess, trl_mapping


def print_report(r: dict, sides: dict) -> None:
    a, b = r["gpolib"], r["trl"]
    fmt = lambda xs: "[" + ", ".join(f"{x:.2f}" for x in xs) + "]"
    print(f"\n=== mu = {r['mu']} ({r['steps']} timed steps each, after 1 warm-up; TRL {trl_mapping(r['mu'])}) ===")
    print(f"{'':8s} {'s/step median':>14s} {'completion tok/s':>17s}  s/step all / tokens per step")
    print(f"{'gpolib':8s} {a['s_per_step_median']:14.2f} {a['completion_tokens_per_s']:17.0f}  "
          f"{fmt(a['s_per_step_all'])} {a['completion_tokens_per_step']}")
    print(f"{'trl':8s} {b['s_per_step_median']:14.2f} {b['completion_tokens_per_s']:17.0f}  "
          f"{fmt(b['s_per_step_all'])} {b['completion_tokens_per_step']}")
    print("TRL settings:", json.dumps(r["trl_settings"]))
    print(f"ratio gpolib / TRL  s/step median: {r['ratio_gpolib_over_trl_s']:.3f}   "
          f"tok/s: {a['completion_tokens_per_s'] / b['completion_tokens_per_s']:.3f}")
    print(f"peak RSS, one process with both (shared): {r['peak_rss_mb_shared']:.0f} MB")
    for side, s in sides.items():
        extra = f", CUDA peak {s['cuda_peak_mb']:.0f} MB" if "cuda_peak_mb" in s else ""
        print(f"peak RSS, {side} alone: {s['peak_rss_mb']:.0f} MB (after imports {s['rss_start_mb']:.0f}, after load "
              f"{s['rss_after_load_mb']:.0f}){extra}; s/step alone {fmt(s['s_per_step_alone'])}")
    if len(sides) == 2:
        print(f"ratio gpolib / TRL  peak RSS alone: {sides['gpolib']['peak_rss_mb'] / sides['trl']['peak_rss_mb']:.3f}")
    total = sum(r["gpolib_breakdown_s_median"].values())
    print("gpolib step breakdown (median s per step; share of their sum):")
    for p, s in r["gpolib_breakdown_s_median"].items():
        print(f"  {p:14s} {s:7.3f}  {100 * s / total:5.1f}%")
    total = sum(r["trl_breakdown_s_median"].values())
    print("TRL step breakdown (median s per step; share of their sum):")
    for p, s in r["trl_breakdown_s_median"].items():
        print(f"  {p:36s} {s:7.3f}  {100 * s / total:5.1f}%")
    f = r["gpolib_flops"]
    g = lambda x: "n/a" if x is None else f"{x:.1f}"
    print(f"gpolib achieved GFLOP/s (N = {f['n_params']:,} params, {f['train_positions_per_step']:.0f} positions "
          f"trained per step): train fwd+bwd {g(f['train_gflops_6N'])} (6N) / {g(f['train_gflops_4N'])} (4N, frozen "
          f"base); old-logps fwd {g(f['old_logps_gflops_2N'])} (2N); rollout {g(f['rollout_gflops_2N_per_new_token'])} "
          f"(2N per new token)")


def sampler_line(model: str, max_new: int, threads: int, repeats: int, peak: float) -> dict:
    """gpolib's samplers on the benchmark's model (LoRA r = 16 as trained), first PROMPTS x G training prompts."""
    from ..models import load_policy
    from ..tasks import default_task_path, load_tasks
    from .samplers import measure, prompt_batch, report

    policy, tok = load_policy(model, lora_r=16)
    prompts = [t["prompt"] for t in load_tasks(str(default_task_path("train")))[:PROMPTS]]
    ids, mask = prompt_batch(tok, prompts, G)  # (B, P)
    r = measure(policy.eval(), tok, ids, mask, max_new, threads, repeats)
    print(f"\nsampler vs sampler ({len(prompts)} prompts x G = {G}, up to {max_new} new tokens, {repeats} repeats):")
    report(r, peak)
    return r


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m gpolib bench", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5, help="timed steps per side (after one warm-up each)")
    p.add_argument("--mu", type=int, nargs="+", default=[1, 4], help="policy updates per rollout batch")
    p.add_argument("--side", choices=["both", "gpolib", "trl"], default="both",
                   help="'both': A/B in one process (+ each side alone in a subprocess for peak RSS)")
    p.add_argument("--rss-steps", type=int, default=2, help="timed steps of each side-alone subprocess run")
    p.add_argument("--no-side-runs", action="store_true", help="skip the side-alone subprocess runs")
    p.add_argument("--device", default="cpu", help="'cpu' or 'cuda'")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads for both sides")
    p.add_argument("--model", default=MODEL, help="local path or hub name (default: the embedded tiny Qwen3)")
    p.add_argument("--random-qwen-0.5b", dest="random_qwen", action="store_true",
                   help="a Qwen2.5-0.5B-shaped model with random weights (timing only; the char tokenizer)")
    p.add_argument("--max-new-tokens", type=int, default=MAX_NEW, help="generation budget of both sides")
    p.add_argument("--sampler-repeats", type=int, default=3,
                   help="repeats of the sampler-vs-sampler line (gpolib.bench.samplers); 0 skips it")
    p.add_argument("--json", default="", help="also write the results to this JSON file")
    return p.parse_args(argv)


def run(argv) -> int:
    """Parse the arguments and run: one side per --mu (--side), or the whole comparison."""
    args = parse_args(argv)
    setup_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with contextlib.ExitStack() as stack:
        model = args.model
        if args.random_qwen:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            model = random_qwen_05b(tmp / "qwen2.5-0.5b-random")
        if args.side != "both":
            for mu in args.mu:
                print("SIDE_RESULT " + json.dumps(run_side(args.side, model, mu, args.steps, args.device, args.threads,
                                                           args.max_new_tokens)), flush=True)
            return 0
        return _main_both(args, model)


def _main_both(args, model: str) -> int:
    print("environment:", json.dumps(environment()))
    peak = matmul_peak_gflops(threads=args.threads, device=args.device)
    print(f"fp32 matmul peak (1024^3, {args.threads} threads, best of 8): {peak:.1f} GFLOP/s")
    check = like_for_like_loss_check()
    print("like-for-like loss check (gpolib policy_loss vs TRL GRPOTrainer._compute_loss, loss_type='grpo'):",
          json.dumps(check))
    if not check["ok"]:
        raise AssertionError(f"gpolib and TRL GRPO losses differ: {check}")
    results = {"environment": environment(), "matmul_peak_gflops": peak, "loss_check": check, "runs": []}
    if args.sampler_repeats and args.device == "cpu":
        results["sampler"] = sampler_line(model, args.max_new_tokens, args.threads, args.sampler_repeats, peak)
    for mu in args.mu:
        r = run_ab(model, mu, args.steps, args.device, args.threads, args.max_new_tokens)
        sides = {}
        if not args.no_side_runs:
            common = ["--mu", str(mu), "--steps", str(args.rss_steps), "--device", args.device,
                      "--threads", str(args.threads), "--model", model, "--max-new-tokens", str(args.max_new_tokens)]
            sides = {s: side_in_subprocess(s, common) for s in ("gpolib", "trl")}
        r["sides_alone"] = sides
        r["train_gflops_share_of_peak"] = (r["gpolib_flops"]["train_gflops_6N"] or 0) / peak
        print_report(r, sides)
        print(f"gpolib train fwd+bwd at {100 * r['train_gflops_share_of_peak']:.1f}% of the matmul peak (6N count)")
        results["runs"].append(r)
    print("\nRESULTS_JSON " + json.dumps(results))
    if args.json:
        jsonio.write(args.json, results)  # strict JSON: a NaN timing is null with its reason
    return 0
