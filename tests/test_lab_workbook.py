"""The workbook runner: params validation, execution, failures, re-execution, what the runs inside did."""
import json
import os

import nbformat
import pytest
import yaml

from gpolib.workbook import workbook
from gpolib.workbook.workbook import NotebookFailed, WorkbookError

PARAMS = 'PROFILE = "smoke"\nSTEPS = 2\nLR = 1e-3\nUSE_KL = False\nNAME = "x"\nMAX_LEN = None'


def _notebook(path, params=PARAMS, body=("import gpolib", "print(STEPS * 2)")):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell("# test"),
                nbformat.v4.new_code_cell(params, metadata={"tags": ["parameters"]})]
    nb.cells += [nbformat.v4.new_code_cell(src) for src in body]
    nbformat.write(nb, str(path))


@pytest.fixture
def repo(tmp_path):
    """A throwaway repo: notebooks/00_a, 01_b and params/{smoke,full}.yaml."""
    nbs = tmp_path / "notebooks"
    (nbs / "params").mkdir(parents=True)
    _notebook(nbs / "00_a.ipynb")
    _notebook(nbs / "01_b.ipynb")
    for prof in ("smoke", "full"):
        _params(tmp_path, prof, {"common": {}, "00": {}, "01": {}})
    return tmp_path


def _params(root, profile, data):
    (root / "notebooks" / "params" / f"{profile}.yaml").write_text(yaml.safe_dump(data))


def _plan(root, profile="full", only=None):
    return workbook.plan(profile, only, root / "notebooks")


def test_plan_merges_common_and_section(repo):
    _params(repo, "full", {"common": {"STEPS": 5}, "01": {"LR": 1, "NAME": "y"}, "02": {}})
    jobs = _plan(repo)
    assert [j.name for j in jobs] == ["00_a", "01_b"]
    assert jobs[0].params == {"STEPS": 5, "PROFILE": "full"}
    assert jobs[1].params == {"STEPS": 5, "LR": 1, "NAME": "y", "PROFILE": "full"}  # int widens to float


def test_unknown_profile_lists_available(repo):
    with pytest.raises(WorkbookError, match=r"unknown profile 'gpu'; available: full, smoke"):
        _plan(repo, "gpu")


def test_unknown_key_names_file_notebook_key(repo):
    _params(repo, "full", {"common": {}, "01": {"STPES": 3}})
    with pytest.raises(WorkbookError, match=r"full.yaml: key 'STPES' is not a parameter of 01_b.ipynb"):
        _plan(repo)


@pytest.mark.parametrize("key,value,expected,got", [
    ("STEPS", 2.5, "int", "float"), ("USE_KL", 1, "bool", "int"), ("STEPS", True, "int", "bool"),
    ("NAME", 3, "str", "int"),
])
def test_wrong_type(repo, key, value, expected, got):
    _params(repo, "full", {"common": {key: value}})
    with pytest.raises(WorkbookError, match=rf"'{key}': expected {expected}, got {got}"):
        _plan(repo)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_parameter_rejected(repo, value):
    _params(repo, "full", {"00": {"LR": value}})
    with pytest.raises(WorkbookError, match=r"'LR': expected a finite number"):
        _plan(repo)


def test_value_refused_by_a_config_check_exits_2(repo, capsys, monkeypatch):
    """A params value of the right type that the notebook's config refuses: one line naming it, exit 2 (LR: a
    parameter of no real notebook, so no rule of lab.parameters catches it first)."""
    _notebook(repo / "notebooks" / "01_b.ipynb", body=("from gpolib import presets", "presets.get('grpo', lr=LR)"))
    _params(repo, "full", {"01": {"LR": -1.0}})
    monkeypatch.setattr(workbook.paths, "repo_root", lambda: repo)
    assert workbook.main(["reproduce", "--profile", "full", "--only", "01"]) == 2
    err = capsys.readouterr().err
    assert "lr=-1.0 is invalid; allowed: > 0" in err and "Traceback" not in err


def test_value_outside_a_notebook_rule_is_refused_before_any_notebook_runs(repo, capsys, monkeypatch):
    _params(repo, "full", {"01": {"STEPS": -1}})
    monkeypatch.setattr(workbook.paths, "repo_root", lambda: repo)
    monkeypatch.setattr(workbook, "execute", lambda *a: pytest.fail("nothing runs"))
    assert workbook.main(["reproduce", "--profile", "full", "--only", "01"]) == 2
    err = capsys.readouterr().err
    assert "STEPS=-1 is invalid; allowed: an int >= 1" in err and "Traceback" not in err


def test_none_default_accepts_any_type(repo):
    _params(repo, "full", {"common": {"MAX_LEN": 64}})
    assert _plan(repo)[0].params["MAX_LEN"] == 64


def test_unknown_only_and_section(repo):
    with pytest.raises(WorkbookError, match="unknown --only prefix 07"):
        _plan(repo, only=["00", "07"])
    assert [j.prefix for j in _plan(repo, only=["01"])] == ["01"]
    _params(repo, "full", {"05": {"STEPS": 1}})
    with pytest.raises(WorkbookError, match="section '05' matches no notebook"):
        _plan(repo)


def test_profile_param_is_required_and_reserved(repo):
    _params(repo, "full", {"common": {"PROFILE": "x"}})
    with pytest.raises(WorkbookError, match="PROFILE is set by the runner"):
        _plan(repo)
    _notebook(repo / "notebooks" / "02_c.ipynb", params="STEPS = 1")
    with pytest.raises(WorkbookError, match="02_c.ipynb: the parameters cell must define PROFILE"):
        _plan(repo, "smoke")


def test_non_literal_parameter_rejected(repo):
    _notebook(repo / "notebooks" / "02_c.ipynb", params='PROFILE = "smoke"\nSTEPS = int("3")')
    with pytest.raises(WorkbookError, match="STEPS is not a literal"):
        _plan(repo)


def test_cli_exits_2_on_invalid(repo, capsys, monkeypatch):
    monkeypatch.setattr(workbook.paths, "repo_root", lambda: repo)
    assert workbook.main(["reproduce", "--profile", "smoke", "--only", "09"]) == 2
    assert "unknown --only prefix 09" in capsys.readouterr().err


def test_run_writes_executed_and_html_then_skips(repo, capsys):
    ran = workbook.reproduce("smoke", only=["00"], root=repo)
    executed = repo / "reports/smoke/executed/00_a.ipynb"
    assert ran == ["00_a"] and (repo / "reports/smoke/html/00_a.html").exists()
    nb = nbformat.read(str(executed), as_version=4)
    assert nb.metadata["gpolib"]["parameters"] == {"PROFILE": "smoke"}
    assert any("4" in o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert json.loads((repo / "reports/smoke/claims.json").read_text())[0]["verdict"] == "not yet run"
    out = capsys.readouterr().out
    assert "00_a: done in" in out and "no training runs" in out and "scoreboard: updated claims.json" in out
    assert workbook.reproduce("smoke", only=["00"], root=repo) == ["00_a"]  # re-executed by default
    out = capsys.readouterr().out
    assert "scoreboard: unchanged" in out and "no verdict changed versus the committed scoreboard" in out
    assert workbook.reproduce("smoke", only=["00"], root=repo, skip_current=True) == []
    assert "up to date, skipped" in capsys.readouterr().out
    _params(repo, "smoke", {"00": {"STEPS": 3}})  # changed parameters -> stale
    job = workbook.plan("smoke", ["00"], repo / "notebooks")[0]
    assert not workbook.is_up_to_date(job, executed)
    _params(repo, "smoke", {})
    job = workbook.plan("smoke", ["00"], repo / "notebooks")[0]
    assert workbook.is_up_to_date(job, executed)
    os.utime(repo / "notebooks/00_a.ipynb", (executed.stat().st_mtime + 5,) * 2)  # newer source -> stale
    assert not workbook.is_up_to_date(job, executed)


def test_failing_notebook_reports_name_and_cell(repo):
    _notebook(repo / "notebooks" / "01_b.ipynb", body=("x = 1", "1 / 0"))
    with pytest.raises(NotebookFailed, match=r"01_b.ipynb failed at cell \d+ `1 / 0` \(ZeroDivisionError") as err:
        workbook.reproduce("full", only=["01"], root=repo, build_report=False)
    assert err.value.notebook == "01_b.ipynb" and err.value.cell_index >= 3


def test_papermill_reads_every_parameter_of_every_notebook(caplog):
    """papermill parses each parameters-cell line itself; a line it cannot parse makes `-p NAME` an 'unknown
    parameter' (was: `GROUP = 8  # ... mu = 4` in notebook 04)."""
    import logging

    from papermill.translators import PythonTranslator

    from gpolib.paths import repo_root

    import subprocess

    tracked = subprocess.run(["git", "ls-files", "notebooks"], cwd=repo_root(), capture_output=True, text=True).stdout
    for nb_path in workbook.list_notebooks(repo_root() / "notebooks").values():
        if f"notebooks/{nb_path.name}" not in tracked.split():
            continue  # committed notebooks only: another's work in progress is theirs to finish
        nb = nbformat.read(str(nb_path), as_version=4)
        cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
        with caplog.at_level(logging.WARNING, logger="papermill"):
            names = [p.name for p in PythonTranslator.inspect(cell)]
        assert names == list(workbook.notebook_defaults(nb_path)), nb_path.name
    assert "Unable to parse" not in caplog.text
