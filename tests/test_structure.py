"""The shape of the package (issues 12, 30, 49): small core modules and functions, no import cycle, no process
change on import, the sampling engine reached through its entry point only, notebooks that take their helpers
from gpolib.lab only; each surrogate one module that nothing else branches on, and a new one (a toy defined here)
reaching the loss, the diagnostics, a preset, validation and both exports by its module alone."""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    core = [*PKG.glob("*.py"), *(PKG / "engine").glob("*.py"), *(PKG / "objectives").glob("*.py")]
    assert len(core) > 30 and PKG / "engine" / "__init__.py" in core and PKG / "objectives" / "loss.py" in core
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
            "import gpolib.objectives; print(dict(os.environ) == before, 'torch' in sys.modules)")
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


# ---------------------------------------------------------------- an objective is one module (issue 49)

def _surrogate_branches(tree, names: set, classes: set) -> list:
    """Lines that branch on a surrogate outside its module: a comparison with a surrogate's name or with an expression
    that reads `.surrogate`, a `match` on one, a lookup keyed by one (`TABLE[loss.surrogate]`, `.get(...)`), an
    `isinstance` against a surrogate class."""
    def reads_surrogate(n) -> bool:
        return any(isinstance(m, ast.Attribute) and m.attr == "surrogate" for m in ast.walk(n))

    def is_name(n) -> bool:
        return isinstance(n, ast.Constant) and n.value in names or (
            isinstance(n, (ast.Tuple, ast.List, ast.Set)) and any(is_name(e) for e in n.elts))

    def is_class(n) -> bool:
        return any(getattr(m, "id", getattr(m, "attr", None)) in classes for m in ast.walk(n))
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare) and any(is_name(o) or reads_surrogate(o) for o in [n.left, *n.comparators]):
            out.append(n.lineno)
        elif isinstance(n, ast.Match) and reads_surrogate(n.subject):
            out.append(n.lineno)
        elif isinstance(n, ast.Subscript) and reads_surrogate(n.slice):
            out.append(n.lineno)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get" and any(
                reads_surrogate(a) for a in n.args):
            out.append(n.lineno)
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "isinstance"
              and len(n.args) == 2 and is_class(n.args[1])):
            out.append(n.lineno)
    return sorted(out)


def test_no_branch_on_the_surrogate_outside_its_module():
    """The loss, the exports, validation, the presets and the lab read a surrogate's members (`terms`, `trl`,
    `clipping`, ...); only its own module knows its name. The check finds what the code held before (issue 49)."""
    import inspect

    from gpolib.objectives import SURROGATES

    names, classes = set(SURROGATES), {c.__name__ for c in SURROGATES.values()}
    own = {Path(inspect.getfile(c)).resolve() for c in SURROGATES.values()}
    assert {"clip", "cispo", "gmpo"} <= names and len(own) == len(SURROGATES)
    before = ('if cfg.loss.surrogate == "cispo":\n    pass\n'
              'mode = {"cispo": "cispo", "gmpo": "geo_mean"}[loss.surrogate]\n'
              'eps = r if cfg.surrogate == "gmpo" else q\nok = isinstance(s, Cispo)\nok = name in ("clip", "gmpo")\n'
              'if lc.surrogate.name != x:\n    pass\nmatch cfg.loss.surrogate:\n    case _:\n        pass\n'
              'row = NOTEBOOK.get(cfg.loss.surrogate.name)\ncolors = {"gmpo": "#A6761D"}  # a table keyed by preset')
    assert _surrogate_branches(ast.parse(before), names, classes) == [1, 3, 4, 5, 6, 7, 9, 12]
    found = {str(f.relative_to(ROOT)): lines for f in sorted(PKG.rglob("*.py")) if f.resolve() not in own
             for lines in [_surrogate_branches(ast.parse(f.read_text()), names, classes)] if lines}
    assert found == {}


def _toy_class():
    """A surrogate that is no paper's: f = tanh(tau (r - 1)) / tau * A, a soft bound of the update (a contributor's
    new module, written here)."""
    from dataclasses import dataclass
    from typing import ClassVar

    from gpolib.metrics import Metric, Share
    from gpolib.objectives.surrogate import Surrogate, per_token
    from gpolib.validation import positive

    @dataclass(frozen=True, kw_only=True)
    class Toy(Surrogate):
        name: ClassVar[str] = "toy"
        metrics: ClassVar[dict] = {"toy/saturated": Metric("tanh saturated (fraction)", update=True, missing=0.0)}
        ratio_levels: ClassVar[tuple] = ("token",)

        temperature: float = 2.0
        """tau: how fast the soft bound saturates"""

        def check(self):
            positive("temperature", self.temperature, 0)

        def terms(self, logps, old_logps, ratio, advantages, mask):
            # f = tanh(tau (r - 1)) / tau * A
            return (self.temperature * (ratio - 1)).tanh() / self.temperature * per_token(advantages)

        def diagnostics(self, ratio, old_logps, advantages, mask):
            return {"toy/saturated": Share.of((self.temperature * (ratio - 1)).abs() > 2, mask)}, None

        def trl(self, loss):
            return {"loss_type": "toy", "toy_temperature": self.temperature}

        def trl_missing(self, loss):
            return []

        def verl(self, loss):
            return {"policy_loss.loss_mode": "toy", "policy_loss.toy_temperature": self.temperature}

        def verl_missing(self, loss):
            return [] if loss.aggregation == "token_mean" else ["surrogate='toy' with another aggregation (verl's "
                                                                "toy is token-mean)"]

        def clipping(self, loss):
            return f"soft: tanh at temperature {self.temperature:g}"
    return Toy


@pytest.fixture
def toy():
    """The toy surrogate registered and its preset added, as a new module and its preset would; undone after."""
    from gpolib import metrics, presets
    from gpolib.objectives import SURROGATES, register

    saved = [(d, dict(d)) for d in (SURROGATES, metrics.METRICS, presets.RECIPES)]
    try:
        cls = register(_toy_class())

        @presets.recipe("toy")
        def _toy(base):  # a preset cites its source; the toy has none
            return base.replace(name="toy", loss_surrogate="toy", loss_aggregation="token_mean")
        yield cls
    finally:
        for d, before in saved:
            d.clear()
            d.update(before)


def test_a_new_surrogate_is_one_module_and_one_preset(toy, tiny_cfg, tmp_path):
    """Registered from this file alone, the toy reaches the loss, its diagnostics, a preset, validation errors and
    both exports, and a training step."""
    import math

    import torch

    from gpolib import LossConfig, TrainConfig, presets
    from gpolib.export import UnsupportedFeature, to_trl, to_verl
    from gpolib.lab import beyond
    from gpolib.metrics import METRICS, update_defaults
    from gpolib.objectives import policy_loss
    from gpolib.train import train

    cfg = presets.get("toy")
    assert cfg.loss.surrogate == toy(temperature=2.0) and cfg.loss.aggregation == "token_mean"
    # the loss, by hand: ratios e^0.8 (saturated: tau (r - 1) = 2.45 > 2) and e^-0.1 (A = 1), e^0.05 (A = -2)
    logps = torch.tensor([[0.8, -0.1], [0.05, 0.0]], requires_grad=True)
    old, mask, adv = torch.zeros(2, 2), torch.tensor([[1.0, 1.0], [1.0, 0.0]]), torch.tensor([1.0, -2.0])
    loss, info = policy_loss(logps, old, adv, mask, cfg.loss)
    f = [math.tanh(2 * (math.exp(0.8) - 1)) / 2, math.tanh(2 * (math.exp(-0.1) - 1)) / 2,
         -2 * math.tanh(2 * (math.exp(0.05) - 1)) / 2]
    assert loss.item() == pytest.approx(-sum(f) / 3, rel=1e-6)
    loss.backward()
    assert float(logps.grad.abs().max()) > 0
    # its diagnostics only: no clip/*; registered in the one list of metrics
    assert info["toy/saturated"].value == pytest.approx(1 / 3) and not any(k.startswith("clip/") for k in info)
    assert "toy/saturated" in METRICS and update_defaults(toy.metrics)["toy/saturated"] == 0.0
    # the preset's overrides, identity and storage
    hot = presets.get("toy", loss_temperature=4.0)
    assert hot.identity()["loss"] == {"surrogate": "toy", "temperature": 4.0, "aggregation": "token_mean"}
    assert TrainConfig.from_dict(hot.to_dict()) == hot and TrainConfig.same_run(hot.to_dict(), hot) == []
    assert hot.fingerprint() != cfg.fingerprint()
    # validation: its parameter, its ratio levels, its name among the allowed
    with pytest.raises(ValueError, match="temperature=0.0 is invalid; allowed: > 0"):
        presets.get("toy", loss_temperature=0.0)
    with pytest.raises(ValueError, match="ratio_level='sequence' is invalid; allowed: 'token' with surrogate='toy'"):
        LossConfig(surrogate="toy", ratio_level="sequence")
    with pytest.raises(ValueError, match="surrogate='nope' is invalid; allowed: .*'toy'"):
        LossConfig(surrogate="nope")
    # both exports, and what a target lacks
    assert (to_trl(cfg)["loss_type"], to_trl(cfg)["toy_temperature"]) == ("toy", 2.0)
    assert to_verl(cfg)["actor_rollout_ref.actor.policy_loss.loss_mode"] == "toy"
    with pytest.raises(UnsupportedFeature, match="verl's toy is token-mean"):
        to_verl(presets.get("toy", loss_aggregation="seq_mean_token_mean"))
    # the workbook's table of objectives, and a training step
    assert beyond.axes_table().loc["toy", "clipping"] == "soft: tanh at temperature 2"
    rows = train(tiny_cfg("toy", steps=1), tmp_path / "toy", progress=False)
    assert "toy/saturated" in rows[0] and not any(k.startswith("clip/") for k in rows[0])
