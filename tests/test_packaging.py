"""pyproject.toml and environment.yml declare the same dependencies; torch is pinned to the CPU build."""
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
