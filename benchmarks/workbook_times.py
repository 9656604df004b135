"""The times the README quotes, measured on this machine and printed beside its fp32 matmul peak.

A reader on another machine scales by the ratio of the peaks (the RL step is compute-bound on CPU):
    python benchmarks/workbook_times.py                  # matmul peak, --help, an RL step now, committed step times
    python benchmarks/workbook_times.py --make test      # + wall time of `make test`
    python benchmarks/workbook_times.py --make reproduce # + wall time of `make reproduce` (reuses finished runs)
The step times of the committed full-profile runs are read from their metrics (time/rollout_s + time/train_s)
and printed with the peak of this machine; on a busy machine the peak is low and every time is long.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(argv: list) -> float:
    """Wall seconds of a command run from the repository root (its output discarded, its failure raised)."""
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def step_times(runs_dir: Path) -> dict:
    """Notebook -> (runs, median seconds per RL step) over the finished runs under reports/runs/<notebook>/."""
    out = {}
    for nb in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
        per_step = []
        for metrics in nb.glob("*/metrics.jsonl"):
            rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
            per_step += [r["time/rollout_s"] + r["time/train_s"] for r in rows if "time/rollout_s" in r]
        if per_step:
            out[nb.name] = (len(list(nb.glob("*/metrics.jsonl"))), statistics.median(per_step))
    return out


def fresh_step_s(tmp: Path) -> float:
    """Median seconds per RL step of a 3-step GRPO run at the full-profile batch (16 prompts x G = 8), here, now."""
    sets = ["steps=3", "prompts_per_step=16", "group_size=8", "eval_prompts=4", "eval_samples=1", "warmup_steps=0"]
    argv = [sys.executable, "-m", "gpolib", "train", "--preset", "grpo", "--out", str(tmp)]
    subprocess.run(argv + [a for s in sets for a in ("--set", s)], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = [json.loads(line) for line in (tmp / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return statistics.median(r["time/rollout_s"] + r["time/train_s"] for r in rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--make", action="append", default=[], choices=["test", "reproduce"],
                        help="also time `make <target>` (repeatable)")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from gpolib.bench.common import matmul_peak_gflops

    peak = matmul_peak_gflops(threads=2)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"fp32 matmul peak with 2 threads: {peak:.0f} GFLOP/s")
    print(f"python -m gpolib --help: {timed([sys.executable, '-m', 'gpolib', '--help']):.2f} s")
    for target in args.make:
        print(f"make {target}: {timed(['make', target]) / 60:.1f} min", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"RL step at the full-profile batch, measured now: {fresh_step_s(Path(tmp) / 'run'):.2f} s/step")
    print("median RL step of the committed full-profile runs (timed on the machine that ran them):")
    for nb, (n, s) in step_times(ROOT / "reports" / "runs").items():
        print(f"  {nb}: {n} runs, {s:.2f} s/step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
