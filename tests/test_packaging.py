"""pyproject.toml and environment.yml declare the same dependencies; torch is pinned to the CPU build; every
package and the engine's C++ sources are shipped."""
import pathlib
import re
import tomllib

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _norm(spec: str) -> str:
    return re.sub(r"\s+", "", spec).lower()


def test_dependency_lists_agree():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert sorted(map(_norm, deps)) == sorted(_norm(p) for p in pip if not p.startswith("-e"))


def test_torch_pinned():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "torch==2.13.0" in deps


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text().splitlines()
    commands = [l.strip() for l in readme[:40] if l.strip().startswith("make ")]
    assert commands[:2] == ["make reproduce", "make test"]
    assert (ROOT / ".ci/run").read_text().strip().splitlines()[-1] == "make test"


def test_every_package_and_the_kernel_sources_are_shipped():
    """setuptools lists every folder of gpolib, each one a package Python can import (gpolib/engine/kernels, C++
    sources without an __init__.py, as a namespace package: a folder left out makes setuptools print a
    BuildBackendWarning on install), and the kernels' package data covers every file the native build compiles."""
    from gpolib.engine import native

    tools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = [ROOT / "gpolib", *(d for d in (ROOT / "gpolib").rglob("*") if d.is_dir() and d.name != "__pycache__")]
    packages = {".".join(d.relative_to(ROOT).parts) for d in folders}
    assert sorted(tools["packages"]) == sorted(packages) and "gpolib.engine.kernels" in packages
    assert native.KERNELS_DIR == ROOT / "gpolib" / "engine" / "kernels" and native.sources()
    patterns = tools["package-data"]["gpolib.engine.kernels"]
    shipped = {f for pattern in patterns for f in native.KERNELS_DIR.glob(pattern)}
    assert shipped == set(native.KERNELS_DIR.iterdir()) and set(native.sources()) < shipped
