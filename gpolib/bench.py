"""`python -m gpolib bench`: runs benchmarks/rl_step_vs_trl.py (one RL step, gpolib vs TRL's GRPOTrainer).

The benchmark lives in the repository's `benchmarks/` folder and is the only place that imports TRL;
this module just loads it, so `import gpolib` never pulls TRL in. Needs a source checkout and the
`bench` extra (`pip install -e ".[bench]"`).
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "rl_step_vs_trl.py"


def load_benchmark():
    """The benchmark script as a module (its functions are used by tests/test_bench.py)."""
    if "rl_step_vs_trl" in sys.modules:
        return sys.modules["rl_step_vs_trl"]
    if not SCRIPT.exists():
        raise FileNotFoundError(f"{SCRIPT} not found: the benchmark needs a source checkout of gpolib")
    spec = importlib.util.spec_from_file_location("rl_step_vs_trl", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["rl_step_vs_trl"] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark with command-line arguments `argv` (see `--help`)."""
    return load_benchmark().main(list(sys.argv[1:] if argv is None else argv))
