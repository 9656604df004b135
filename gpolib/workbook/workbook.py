"""Run the workbook: execute `notebooks/NN_*.ipynb` in order with papermill.

Parameters come from `notebooks/params/<profile>.yaml`:

    common: {KEY: value}     # applied to every notebook
    "01": {KEY: value}       # applied to notebooks/01_*.ipynb only

Every key must be an assignment in that notebook's cell tagged `parameters`, and its
value must have the default's type (an int may widen to float; bool is not int).
The runner sets `PROFILE` itself. Everything is validated before any notebook runs.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import paths
from ..lab.parameters import check as check_parameter
from .execution import NotebookFailed, execute  # NotebookFailed: raised by reproduce, part of this API

_NB_RE = re.compile(r"^(\d\d)_.+\.ipynb$")
_MISSING = object()
TRAINS_NOTHING = ("90",)
"""notebooks whose cells train nothing and take seconds (90's explorer): a short cell timeout (`execution`)"""


class WorkbookError(ValueError):
    """Invalid profile, params file or --only selection; nothing was run."""


@dataclass
class Job:
    """One notebook to execute with its resolved parameters."""

    prefix: str
    """two-digit prefix, e.g. "01" """
    source: Path
    """the source notebook"""
    params: dict[str, Any] = field(default_factory=dict)
    """parameters injected by papermill (params file values + PROFILE)"""

    @property
    def name(self) -> str:
        """notebook file stem, e.g. "01_grpo" """
        return self.source.stem

    @property
    def trains(self) -> bool:
        """whether a cell may train runs for a long time (`execution.cell_timeout`)"""
        return self.prefix not in TRAINS_NOTHING

    @property
    def params_hash(self) -> str:
        """sha256 of the parameters, stored in the executed copy to detect changes"""
        blob = json.dumps(self.params, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


# ---------------------------------------------------------------- discovery and parsing

def list_notebooks(notebooks_dir: Path) -> dict[str, Path]:
    """Prefix -> notebook path for every `NN_*.ipynb`, in prefix order."""
    found = {}
    for p in sorted(Path(notebooks_dir).glob("*.ipynb")):
        m = _NB_RE.match(p.name)
        if m:
            if m.group(1) in found:
                raise WorkbookError(f"two notebooks share prefix {m.group(1)}: {found[m.group(1)].name}, {p.name}")
            found[m.group(1)] = p
    return found


def available_profiles(notebooks_dir: Path) -> list[str]:
    """Profile names = the `params/*.yaml` files."""
    return sorted(p.stem for p in (Path(notebooks_dir) / "params").glob("*.yaml"))


def notebook_defaults(path: Path) -> dict[str, Any]:
    """The literal assignments of the cell tagged `parameters` (parsed, never executed)."""
    import nbformat  # imported on use: it costs seconds, and `--help` must answer at once

    nb = nbformat.read(str(path), as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if not cells:
        raise WorkbookError(f"{path.name}: no cell tagged 'parameters'")
    defaults = {}
    for node in ast.parse(cells[0].source).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            try:
                value = ast.literal_eval(node.value)
            except ValueError as e:
                raise WorkbookError(f"{path.name}: parameter {ast.unparse(targets[0])} is not a literal") from e
            for t in targets:
                if isinstance(t, ast.Name):
                    defaults[t.id] = value
    return defaults


PRECISION = "precision"
"""the section of a params file that records the precision rule's seeds (gpolib.lab.precision), not parameters"""


def load_params_file(path: Path) -> dict[str, dict[str, Any]]:
    """Section name ("common" or "NN") -> mapping; empty sections become {}."""
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:  # a syntax error: the file and its line, in one line
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise WorkbookError(f"{path}{where}: not valid YAML ({getattr(err, 'problem', None) or err})") from None
    if not isinstance(raw, dict):
        raise WorkbookError(f"{path}: top level must be a mapping")
    out = {}
    for key, section in raw.items():
        name = f"{key:02d}" if isinstance(key, int) else str(key)
        if section is not None and not isinstance(section, dict):
            raise WorkbookError(f"{path}: section {name!r} must be a mapping")
        out[name] = dict(section or {})
    return out


# ---------------------------------------------------------------- validation

def _type_error(value: Any, default: Any) -> str | None:
    """None if `value` may replace `default`, else 'expected X, got Y'."""
    if isinstance(value, float) and not math.isfinite(value):
        return "expected a finite number"
    if default is None or value is None:
        return None
    want, got = type(default), type(value)
    if want is got or (want is float and got is int):
        return None
    return f"expected {want.__name__}, got {got.__name__}"


def _check_section(file: Path, nb: Path, section: dict, defaults: dict) -> None:
    for key, value in section.items():
        if key == "PROFILE":
            raise WorkbookError(f"{file.name}: PROFILE is set by the runner, remove it ({nb.name})")
        default = defaults.get(key, _MISSING)
        if default is _MISSING:
            raise WorkbookError(f"{file.name}: key {key!r} is not a parameter of {nb.name}")
        err = _type_error(value, default)
        if err:
            raise WorkbookError(f"{file.name}: {nb.name} parameter {key!r}: {err} ({value!r})")
        try:  # the notebook's own rule (lab.parameters.RULES), before any notebook runs
            check_parameter(**{key: value})
        except ValueError as bad:
            raise WorkbookError(f"{file.name}: {nb.name}: {bad}") from None


def plan(profile: str, only: list[str] | None, notebooks_dir: Path) -> list[Job]:
    """Validate profile, params file and selection; return the jobs in order."""
    profiles = available_profiles(notebooks_dir)
    if profile not in profiles:
        raise WorkbookError(f"unknown profile {profile!r}; available: {', '.join(profiles) or 'none'}")
    file = Path(notebooks_dir) / "params" / f"{profile}.yaml"
    sections, notebooks = load_params_file(file), list_notebooks(notebooks_dir)
    for name, section in sections.items():
        if name not in ("common", PRECISION) and name not in notebooks and section:
            raise WorkbookError(f"{file.name}: section {name!r} matches no notebook NN_*.ipynb")
    unknown = sorted(set(only or []) - set(notebooks))
    if unknown:
        raise WorkbookError(f"unknown --only prefix {', '.join(unknown)}; available: {', '.join(notebooks)}")
    jobs = []
    for prefix, nb in notebooks.items():
        defaults = notebook_defaults(nb)
        if "PROFILE" not in defaults:
            raise WorkbookError(f"{nb.name}: the parameters cell must define PROFILE")
        for sec in ("common", prefix):
            _check_section(file, nb, sections.get(sec, {}), defaults)
        params = {**sections.get("common", {}), **sections.get(prefix, {}), "PROFILE": profile}
        jobs.append(Job(prefix, nb, params))
    return [j for j in jobs if not only or j.prefix in only]


# ---------------------------------------------------------------- execution

def is_up_to_date(job: Job, executed: Path) -> bool:
    """Executed copy exists, is newer than the source and ran with the same parameters.

    The params file's mtime is not compared: the hash covers every parameter the
    notebook receives, so editing another notebook's section does not rerun this one.
    """
    if not executed.exists() or executed.stat().st_mtime < job.source.stat().st_mtime:
        return False
    import nbformat

    meta = nbformat.read(str(executed), as_version=4).metadata.get("gpolib", {})
    return meta.get("params_hash") == job.params_hash


def _verdicts(profile: str, root: Path) -> dict:
    """{claim id: verdict} of the scoreboard on disk (the committed one, before a run rewrites it)."""
    f = paths.reports_dir(profile, root) / "claims.json"
    if not f.exists():
        return {}
    try:
        return {r["id"]: r["verdict"] for r in json.loads(f.read_text())}
    except (ValueError, UnicodeDecodeError, TypeError, KeyError) as err:  # cut short or edited: rebuilt at the end
        print(f"warning: {paths.relative(f)} does not parse ({type(err).__name__}: {err}); the verdicts are not "
              "compared with it, and it is rebuilt from reports/claims/*.json", file=sys.stderr, flush=True)
        return {}


def _run_one(job: Job, tag: str, profile: str, root: Path) -> dict:
    """Execute one notebook with a progress bar per training run; print what was reused and computed."""
    from .progress import Watch, describe

    print(f"{tag} {job.name}: running ...", flush=True)
    t0 = time.time()
    with Watch(job.name) as watch:
        execute(job, paths.executed_dir(profile, root) / job.source.name,
                paths.html_dir(profile, root) / f"{job.name}.html")
    print(f"{tag} {job.name}: done in {time.time() - t0:.0f} s; {describe(watch.summary())}", flush=True)
    return watch.summary()


def _report(profile: str, root: Path, before: dict) -> None:
    """Rebuild the scoreboard, the report page (index.html) and, full profile, the generated blocks of the README
    and docs/ and the page's screenshot; say whether any verdict changed."""
    from ..lab import report  # the claims' verdicts import the lab modules: only when a report is built
    from . import index, readme, screenshot
    from .progress import verdict_changes

    changed_files = report.build(profile, root=root)
    print(f"scoreboard: {'updated ' + ', '.join(changed_files) if changed_files else 'unchanged'}", flush=True)
    if profile == "full":  # the README's and docs/'s tables read the full profile's claims.json
        written = readme.write(paths.repo_root() if root is None else Path(root))
        print(f"generated blocks updated in {', '.join(written)}" if written else "generated blocks unchanged",
              flush=True)
    print(f"report page: {paths.relative(index.build(profile, root=root))}", flush=True)
    if profile == "full":  # README's screenshot shows the full profile's page
        print(screenshot.retake(profile, root), flush=True)
    changes = verdict_changes(before, _verdicts(profile, root))
    if not before:
        print("verdicts: no earlier scoreboard to compare with", flush=True)
        return
    print("verdicts: " + ("; ".join(changes) if changes else
                          f"no verdict changed versus the committed scoreboard ({len(before)} claims)"), flush=True)


def reproduce(profile: str = "full", only: list[str] | None = None, recompute: bool = False,
              root: Path | str | None = None, notebooks_dir: Path | str | None = None,
              build_report: bool = True, skip_current: bool = False) -> list[str]:
    """Execute the selected notebooks in order; returns the names that were run.

    Every notebook is re-executed, so figures, tables and verdicts come from the run data; finished
    training runs of the same configuration and data are reused, unless `recompute` (then runs finished
    before this call are computed again, `gpolib.runlog`). `skip_current`: skip a notebook whose executed
    copy is newer than its source and ran with the same parameters. `root` holds `reports/` (default:
    the repository); `notebooks_dir` defaults to `<root>/notebooks`. Raises WorkbookError before running
    anything if the profile, params file or `only` is invalid, NotebookFailed on the first failing notebook.
    """
    from .. import runlog

    root = Path(root) if root is not None else paths.repo_root()
    notebooks_dir = Path(notebooks_dir) if notebooks_dir is not None else root / "notebooks"
    jobs, ran, start, totals = plan(profile, only, notebooks_dir), [], time.time(), {}
    before = _verdicts(profile, root)
    os.environ.pop(runlog.RECOMPUTE_ENV, None)
    if recompute:
        os.environ[runlog.RECOMPUTE_ENV] = str(start)
    try:
        for i, job in enumerate(jobs, 1):
            tag = f"[{i}/{len(jobs)}]"
            if skip_current and is_up_to_date(job, paths.executed_dir(profile, root) / job.source.name):
                print(f"{tag} {job.name}: up to date, skipped", flush=True)
                continue
            done = _run_one(job, tag, profile, root)
            totals = {k: totals.get(k, 0) + len(v) for k, v in done.items()}
            ran.append(job.name)
    finally:
        os.environ.pop(runlog.RECOMPUTE_ENV, None)
    print(f"workbook [{profile}]: executed {len(ran)} of {len(jobs)} notebooks in {time.time() - start:.0f} s; "
          f"runs {totals.get('reused', 0)} reused, {totals.get('computed', 0)} computed"
          + (" (--recompute)" if recompute else ""), flush=True)
    if build_report:
        _report(profile, root, before)
    return ran


# ---------------------------------------------------------------- command line

def _split_only(text: str | None) -> list[str] | None:
    """`--only 00,01` -> ["00", "01"]; None (no --only) -> None; a --only naming nothing is refused."""
    if text is None:
        return None
    only = [s.strip() for s in text.split(",") if s.strip()]
    if not only:
        raise WorkbookError(f"--only {text!r} names no notebook; give prefixes like 00,01 or leave --only out")
    return only


def _run_cli(args: argparse.Namespace) -> int:
    from ..errors import boundary

    try:
        return boundary(_reproduce_cli, args)  # bad data, locked or corrupt run folders, filesystem: exit 2
    except WorkbookError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except NotebookFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 2 if e.rejected_input else 1
    except KeyboardInterrupt:  # Ctrl-C: the committed executed copies and reports are as they were (`execute`)
        print("error: interrupted; every committed file is as it was (a partial notebook is left as "
              "reports/.../executed/NN_*.failed.ipynb)", file=sys.stderr)
        return 130


def _reproduce_cli(args: argparse.Namespace) -> int:
    reproduce(args.profile, _split_only(args.only), recompute=args.recompute, skip_current=args.skip_current)
    return 0


def add_cli(subparsers) -> argparse.ArgumentParser:
    """Add `reproduce` to an argparse subparsers object; dispatch with `args.func(args)`."""
    p = subparsers.add_parser("reproduce", help="execute the workbook notebooks in order")
    p.add_argument("--profile", choices=paths.PROFILES, default="full",
                   help="params profile: notebooks/params/<profile>.yaml (default: full)")
    p.add_argument("--only", default=None, help="comma-separated notebook prefixes, e.g. 00,01")
    p.add_argument("--recompute", action="store_true",
                   help="recompute the training runs too (default: reuse finished runs of the same configuration)")
    p.add_argument("--skip-current", action="store_true",
                   help="skip notebooks whose executed copy is newer than the source, with the same parameters")
    p.set_defaults(func=_run_cli)
    return p


def main(argv: list[str] | None = None) -> int:
    """`python -m gpolib.workbook.workbook reproduce ...`; returns the exit code."""
    parser = argparse.ArgumentParser(prog="gpolib")
    add_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
