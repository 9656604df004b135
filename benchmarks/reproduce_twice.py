"""`python benchmarks/reproduce_twice.py`: a reproduce that changes no byte, checked on a fresh clone (issue 35).

Clones this checkout's HEAD into a temporary folder, runs `make reproduce` there twice (every notebook executed on
the committed runs, the scoreboard, report page and screenshot rebuilt) and prints `git status --porcelain` after
each. Exit status 0 when both leave the clone clean, 1 otherwise (the changed paths are listed). The clone builds
its own virtual environment (about 1.5 min); `--make-args` passes more to make (e.g. `PROFILE=smoke`).

    python benchmarks/reproduce_twice.py [--keep] [--make-args "PROFILE=full"]
"""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def changed(clone: Path) -> list[str]:
    """`git status --porcelain` lines of the clone (untracked files included)."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=clone, check=True,
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", action="store_true", help="keep the clone (its path is printed)")
    ap.add_argument("--make-args", default="", help="extra arguments of `make reproduce`")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gpolib-twice-"))
    clone = tmp / "repo"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True).stdout
    print(f"fresh clone of {head.strip()}", flush=True)
    dirty = {}
    for run in (1, 2):
        t0 = time.perf_counter()
        proc = subprocess.run(["make", "reproduce", *shlex.split(args.make_args)], cwd=clone,
                              capture_output=True, text=True)
        if proc.returncode:
            print(proc.stdout[-4000:], proc.stderr[-4000:], sep="\n")
            print(f"make reproduce {run}: exit status {proc.returncode}")
            return 1
        dirty[run] = changed(clone)
        print(f"make reproduce {run}: {time.perf_counter() - t0:.0f} s, {len(dirty[run])} path(s) changed"
              + "".join(f"\n  {line}" for line in dirty[run]), flush=True)
    if args.keep:
        print(f"clone kept: {clone}")
    else:
        subprocess.run(["rm", "-rf", str(tmp)], check=True)
    return 0 if not dirty[1] and not dirty[2] else 1


if __name__ == "__main__":
    sys.exit(main())
