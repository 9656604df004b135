"""Does `torch.compile` pay for the decoder's step on CPU? (issue 20, 'ways to look at')

The default rollout engine (`gpolib.engine.decoder.Decoder`) runs eagerly. This compares it with the same decoder
whose `step` is wrapped by `torch.compile(dynamic=True)` (the batch shrinks as rows finish and the attended
length grows by one per step, so static shapes would recompile every step), on the embedded dense model:
one batch of 16 held-out prompts x 8 at T = 1 and up to 192 new tokens, identical uniforms for both.
Prints the first compiled call (compilation included), then eager and compiled wall times interleaved,
whether the sampled ids are identical and the largest log-prob difference.

    python benchmarks/decode_compile.py [--repeats 3] [--threads 1]
    python benchmarks/decode_compile.py --profile    # the eager decoder's op profile only (torch.profiler)
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402

from gpolib.engine import SampleSpec  # noqa: E402
from gpolib.engine.decoder import Decoder  # noqa: E402
from gpolib.engine.loop import decode_loop  # noqa: E402
from gpolib.engine.weights import read  # noqa: E402
from gpolib.models import load_policy  # noqa: E402
from gpolib.rollout import _prompts  # noqa: E402
from gpolib.tasks import default_task_path, load_tasks, render_prompt  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=192)
    ap.add_argument("--profile", action="store_true", help="print the eager decoder's op profile and stop")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_policy("data/models/tiny-qwen3", lora_r=16)
    rows = load_tasks(default_task_path("heldout"))[:16]
    ids, mask = _prompts(tok, [render_prompt(tok, r["prompt"]) for r in rows], 8, "cpu")  # (128, P)
    T, width = args.max_new_tokens, ids.shape[1] + args.max_new_tokens
    weights = read(model, width)
    spec = SampleSpec(max_new_tokens=T, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id)

    @torch.inference_mode()
    def run(compiled: bool):
        torch.manual_seed(0)
        u = torch.rand(ids.shape[0], T)  # the same uniforms for both engines
        net = Decoder(weights, ids.shape[0], width)
        if compiled:
            net.step = compiled_step.__get__(net)
        t0 = time.perf_counter()
        out = decode_loop(net, ids, mask, spec, u)
        return time.perf_counter() - t0, out

    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        run(False)  # warm-up
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run(False)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
        return
    compiled_step = torch.compile(Decoder.step, dynamic=True)
    first, _ = run(True)
    print(f"first compiled call (compilation included): {first:.1f} s", flush=True)
    for _ in range(args.repeats):
        te, (ids_e, lp_e) = run(False)
        tc, (ids_c, lp_c) = run(True)
        print(f"eager {te:.3f} s, compiled {tc:.3f} s, eager/compiled {te / tc:.2f}; identical ids "
              f"{torch.equal(ids_e, ids_c)}, max |log-prob difference| {(lp_e - lp_c).abs().max():.1e}", flush=True)


if __name__ == "__main__":
    main()
