"""The shape of the package (issues 12, 30): small core modules and functions, no import cycle, no process
change on import, the sampling engine reached through its entry point only, notebooks that take their helpers
from gpolib.lab only."""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "gpolib"
CORE_API = {"gpolib", "gpolib.config", "gpolib.presets", "gpolib.objectives", "gpolib.train", "gpolib.models",
            "gpolib.rollout", "gpolib.rewards", "gpolib.tasks", "gpolib.runtime", "gpolib.metrics",
            "gpolib.groups"}
"""core modules a notebook may use as a library user would; every notebook helper comes from gpolib.lab"""


def _modules() -> dict:
    out = {}
    for f in PKG.rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _imports(name: str, f: Path, known: dict) -> set:
    """gpolib modules imported anywhere in the file (functions and `if TYPE_CHECKING` blocks included)."""
    pkg = name if f.name == "__init__.py" else name.rsplit(".", 1)[0]
    deps = set()
    for node in ast.walk(ast.parse(f.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            deps |= {t for t in [target] + [f"{target}.{a.name}" for a in node.names] if t in known}
        elif isinstance(node, ast.Import):
            deps |= {a.name for a in node.names if a.name in known}
    return deps - {name}


def test_core_modules_and_functions_are_small():
    core = [*PKG.glob("*.py"), *(PKG / "engine").glob("*.py")]
    assert len(core) > 30 and PKG / "engine" / "__init__.py" in core
    assert [str(f.relative_to(ROOT)) for f in core if len(f.read_text().splitlines()) > 300] == []
    long = [(str(f.relative_to(ROOT)), n.name) for f in PKG.rglob("*.py") for n in ast.walk(ast.parse(f.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 50]
    assert long == []


def test_no_import_cycle():
    mods = _modules()
    graph = {m: _imports(m, f, mods) for m, f in mods.items()}
    packages = {m for m, f in mods.items() if f.name == "__init__.py"}  # a submodule always runs its package first

    def reach(start):
        seen, todo = set(), [start]
        while todo:
            for d in graph[todo.pop()] - packages:
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        return seen
    assert [m for m in graph if m not in packages and m in reach(m)] == []


def test_the_engine_is_imported_through_its_entry_point_only():
    """Outside gpolib/engine/ no gpolib module imports a module of the engine, only the package `gpolib.engine`
    (`sample`, `SampleSpec`, the vLLM backend): the loop (rollout, train, collect, update, value_loop, eval_cache,
    pretrain) and everything else."""
    mods = _modules()
    inner = {m for m in mods if m.startswith("gpolib.engine.")}
    outside = {m: f for m, f in mods.items() if m != "gpolib.engine" and m not in inner}
    assert len(inner) >= 8 and {"gpolib.rollout", "gpolib.train", "gpolib.bench.samplers"} <= set(outside)
    reaching_in = {m: sorted(_imports(m, f, mods) & inner) for m, f in outside.items()}
    assert {m: deps for m, deps in reaching_in.items() if deps} == {}
    users = {m for m, f in outside.items() if "gpolib.engine" in _imports(m, f, mods)}
    assert {"gpolib.rollout", "gpolib.train"} <= users  # the loop does sample through it


PHASES = ("collect", "update", "value_loop", "baseline", "policy")
"""the modules of a step's phases and the types they take"""


def test_no_phase_takes_the_trainer():
    """Every function of the phase modules names what it reads: no parameter called `trainer`, and none of them
    imports gpolib.train (the phases cannot reach the trainer at all)."""
    mods = _modules()
    found = []
    for name in PHASES:
        f = PKG / f"{name}.py"
        for n in ast.walk(ast.parse(f.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found += [f"{name}.{n.name}({a.arg})" for a in n.args.args + n.args.kwonlyargs if a.arg == "trainer"]
        assert "gpolib.train" not in _imports(f"gpolib.{name}", f, mods), name
    assert found == []
    assert len(PHASES) == 5 and all((PKG / f"{m}.py").exists() for m in PHASES)


def _environ_writes(tree) -> list:
    """Lines that write os.environ: item assignment or deletion, or a mutating method / os.putenv / os.unsetenv."""
    is_environ = lambda n: isinstance(n, ast.Attribute) and n.attr == "environ"  # noqa: E731
    out = []
    for n in ast.walk(tree):
        targets = getattr(n, "targets", None) or [getattr(n, "target", None)]  # Assign, Delete; AugAssign
        if any(isinstance(t, ast.Subscript) and is_environ(t.value) for t in targets):
            out.append(n.lineno)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and (
                (is_environ(n.func.value) and n.func.attr in ("setdefault", "pop", "update", "clear", "popitem"))
                or n.func.attr in ("putenv", "unsetenv")):
            out.append(n.lineno)
    return sorted(out)


def test_the_engine_never_writes_the_environment():
    """Kernel switches are arguments (`SampleSpec.kernels`) with a default read once from the environment
    (`native.kernels_setting`); no module of the engine writes os.environ."""
    written = "import os\nos.environ['A'] = '0'\nos.environ.pop('A')\ndel os.environ['B']\nos.environ.get('C')"
    assert _environ_writes(ast.parse(written)) == [2, 3, 4]
    engine = sorted((PKG / "engine").glob("*.py"))
    assert {f.name: _environ_writes(ast.parse(f.read_text())) for f in engine} == {f.name: [] for f in engine}


def test_import_changes_nothing_in_the_process():
    code = ("import os, sys; before = dict(os.environ); import gpolib, gpolib.presets, gpolib.config; "
            "print(dict(os.environ) == before, 'torch' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    assert out.stdout.split() == ["True", "False"]  # no environment change, torch not loaded


def test_notebooks_take_helpers_from_the_lab_only():
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = [c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
        used = set()
        for c in cells:
            for node in ast.walk(ast.parse("".join(c["source"]))):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpolib"):
                    used |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
                elif isinstance(node, ast.Import):
                    used |= {a.name for a in node.names if a.name.startswith("gpolib")}
        modules = {u for u in used if u in _modules()}
        assert all(m in CORE_API or m.startswith("gpolib.lab") for m in modules), (nb.name, modules - CORE_API)
        assert any(m.startswith("gpolib.lab") for m in modules), nb.name
        first = "".join(cells[1]["source"])  # the cell after `parameters`
        assert first.startswith("from gpolib.runtime import setup_threads\n\nsetup_threads()"), nb.name


def test_every_notebook_cell_has_an_id():
    """nbformat 4.5 requires cell ids (without them every reader warns, and a later nbformat refuses them)."""
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        ids = [c.get("id") for c in cells]
        assert all(ids) and len(set(ids)) == len(ids), nb.name
