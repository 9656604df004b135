"""Wall time of one notebook, or of the whole workbook, of the full profile recomputed from nothing, without touching
this checkout's runs.

What `make reproduce JOBS=2 RECOMPUTE=...` would spend on one notebook: a temporary git worktree of HEAD, the
notebook's committed runs removed there, `python -m gpolib.workbook.prefetch --profile full --only NN --jobs J` (its
runs in J one-thread processes), then `python -m gpolib reproduce --profile full --only NN` (the notebook executed on
them). Runs another notebook owns (a `HOME` baseline, e.g. 07's GRPO arm in 01) are reused, as in the workbook,
where that notebook computes them. Step-0 evaluations go to an empty cache (`gpolib.eval_cache`), so the first run computes its own, as on a
fresh machine. Prints both times, the total and the fp32 matmul peak, and records the notebook's row (minutes, peak,
jobs) in `benchmarks/notebook_times.json` (`--no-record`: print only; README's table follows with
`python -m gpolib.workbook.readme --write`); the worktree is removed at the end.
With `all` in place of a prefix: every committed run removed, the whole workbook's runs prefetched in one queue
(`--jobs J`), then every notebook executed (`python -m gpolib reproduce --profile full`): what a fresh recompute of
the workbook costs, recorded as the row "all".
Measure on a quiet machine: every other process shares the cores.

    python benchmarks/notebook_time.py 05 [--jobs 2] [--keep DIR]
    python benchmarks/notebook_time.py all --jobs 2
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(argv: list, cwd: Path, env: dict, log: Path) -> float:
    """Wall seconds of a command (stdout and stderr to `log`); raises if it fails, naming the log."""
    t0 = time.perf_counter()
    with open(log, "w") as out:
        code = subprocess.run(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    if code:
        raise SystemExit(f"{' '.join(argv[1:4])} failed ({code}); see {log}")
    return time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebook", help="the notebook's prefix, e.g. 05, or all (the whole workbook)")
    p.add_argument("--jobs", type=int, default=2, help="one-thread training processes at once")
    p.add_argument("--keep", default="", help="make the worktree here and keep it (runs, logs, executed notebook)")
    p.add_argument("--no-record", action="store_true", help="do not write benchmarks/notebook_times.json")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from gpolib.bench.common import cpu_model, matmul_peak_gflops
    from gpolib.workbook.readme import record_time

    peak = matmul_peak_gflops(threads=2)
    where = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="notebook-time-")) / "tree"
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(where), "HEAD"], cwd=ROOT, check=True)
    try:
        whole = args.notebook == "all"
        runs = sorted((where / "reports" / "runs").glob("*_*" if whole else f"{args.notebook}_*"))
        only = [] if whole else ["--only", args.notebook]
        for r in runs:
            shutil.rmtree(r)
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(where),
               "GPOLIB_CACHE_DIR": str(where.parent / "cache")}
        py = sys.executable
        train = timed([py, "-m", "gpolib.workbook.prefetch", "--profile", "full", *only, "--jobs", str(args.jobs)],
                      where, env, where.parent / "prefetch.log")
        execute = timed([py, "-m", "gpolib", "reproduce", "--profile", "full", *only], where, env,
                        where.parent / "notebook.log")
    finally:
        if not args.keep:
            subprocess.run(["git", "worktree", "remove", "--force", str(where)], cwd=ROOT, check=False)
            shutil.rmtree(where.parent, ignore_errors=True)
    print(f"cpu: {cpu_model()}, {os.cpu_count()} CPUs; fp32 matmul peak with 2 threads: {peak:.0f} GFLOP/s")
    print(f"notebook {args.notebook} ({', '.join(r.name for r in runs) or 'no runs folder'} recomputed): training "
          f"({args.jobs} jobs) {train:.0f} s, executing the notebook {execute:.0f} s, in all {(train + execute) / 60:.1f} min")
    if not args.no_record:
        path = record_time(ROOT, args.notebook, minutes=(train + execute) / 60, peak_gflops=peak, jobs=args.jobs,
                           source="benchmarks/notebook_time.py")
        print(f"recorded in {path.relative_to(ROOT)}; README: python -m gpolib.workbook.readme --write")
    return 0


if __name__ == "__main__":
    sys.exit(main())
