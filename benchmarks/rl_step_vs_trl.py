"""`python benchmarks/rl_step_vs_trl.py ...` is `python -m gpolib bench ...`: the benchmark is the package
`gpolib/bench/` (see its docstring and benchmarks/README.md); this file only keeps the old command working."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a checkout without installing
from gpolib.bench import main  # noqa: E402

sys.exit(main())
