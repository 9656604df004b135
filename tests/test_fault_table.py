"""Faults of issue 55, one table per class: nothing a user points the tools at is destroyed, nothing half-written
is trusted, no run hangs, every expected failure ends in one line with exit 2. Each row can fail: it was checked
by breaking its guard once (the commit that added it says how)."""
import hashlib
import json
import math
import os
import shutil
from pathlib import Path

import pytest

from gpolib import folders, presets
from gpolib.errors import EXIT_USER
from gpolib.rundir import RunDir, is_run_folder

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(steps=2, prompts_per_step=2, group_size=2, max_new_tokens=24, eval_prompts=2, eval_samples=1,
            checkpoint_every=1, warmup_steps=0)


def tree(path: Path) -> dict:
    """relative name -> sha256 of every file under `path` (what 'untouched' means)."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def cli(argv, capsys):
    from gpolib.__main__ import main
    code = main(argv)
    return code, capsys.readouterr().err


def one_line(err: str) -> bool:
    lines = [l for l in err.strip().splitlines() if l.startswith("error: ")]
    return len(lines) == 1 and "Traceback" not in err


def sets(d: dict) -> list:
    return [a for k, v in d.items() for a in ("--set", f"{k}={v}")]


# --- 1. a folder the tools did not make is never modified ------------------------------------------------------
def _model_copy(t: Path) -> Path:
    shutil.copytree(ROOT / "data" / "models" / "tiny-qwen3", t / "f")
    return t / "f"


def _user_results(t: Path) -> Path:
    (t / "f").mkdir()
    (t / "f" / "metrics.jsonl").write_text('{"step": 0, "mine": 1}\n')
    (t / "f" / "summary.json").write_text('{"mine": true}\n')
    return t / "f"


def _user_config_only(t: Path) -> Path:
    (t / "f").mkdir()
    (t / "f" / "config.json").write_text('{"learning_rate": 3}\n')
    return t / "f"


def _hidden_file_only(t: Path) -> Path:
    (t / "f").mkdir()
    (t / "f" / ".notes").write_text("mine\n")
    return t / "f"


def _subfolder_only(t: Path) -> Path:
    (t / "f" / "sub").mkdir(parents=True)
    (t / "f" / "sub" / "x.txt").write_text("mine\n")
    return t / "f"


def _marker_is_a_folder(t: Path) -> Path:
    (t / "f" / folders.MARKER).mkdir(parents=True)
    (t / "f" / "x.txt").write_text("mine\n")
    return t / "f"


def _gpolib_config_shape_but_list(t: Path) -> Path:
    (t / "f").mkdir()
    (t / "f" / "config.json").write_text('{"fingerprint": "x", "config": [1, 2]}\n')
    return t / "f"


FOREIGN = [("a copy of a model folder", _model_copy), ("a user's metrics and summary", _user_results),
           ("a user's config.json", _user_config_only), ("a hidden file only", _hidden_file_only),
           ("a subfolder only", _subfolder_only), ("a marker that is a folder", _marker_is_a_folder),
           ("a config.json of another layout", _gpolib_config_shape_but_list)]


@pytest.mark.parametrize("case,make", FOREIGN, ids=[c for c, _ in FOREIGN])
def test_train_out_on_a_foreign_folder_is_refused_untouched(case, make, tmp_path, capsys):
    folder = make(tmp_path)
    before = tree(folder)
    code, err = cli(["train", "--preset", "grpo", "--out", str(folder)] + sets(TINY), capsys)
    assert code == EXIT_USER and one_line(err) and "gpolib did not make" in err and str(folder) in err, err
    assert tree(folder) == before and not (folder / folders.MARKER).is_file()


@pytest.mark.parametrize("case,make", FOREIGN, ids=[c for c, _ in FOREIGN])
def test_run_dir_refuses_a_foreign_folder(case, make, tmp_path):
    folder = make(tmp_path)
    before = tree(folder)
    with pytest.raises(folders.FolderNotOursError, match="gpolib did not make"):
        RunDir(folder, presets.get("grpo", **TINY)).check_config()
    assert tree(folder) == before


@pytest.mark.parametrize("case,make", FOREIGN, ids=[c for c, _ in FOREIGN])
def test_pretrain_out_on_a_foreign_folder_is_refused_untouched(case, make, tmp_path, capsys):
    folder = make(tmp_path)
    before = tree(folder) if case != "a copy of a model folder" else None
    if before is None:  # a model folder gpolib made carries train_log.json: without it, it is a user's model
        (folder / "train_log.json").unlink()
        before = tree(folder)
    code, err = cli(["pretrain", "--arch", "dense", "--steps", "1", "--out", str(folder)], capsys)
    assert code == EXIT_USER and one_line(err) and "gpolib did not make" in err, err
    assert tree(folder) == before


@pytest.mark.parametrize("out", ["", " ", "  \t"])
def test_empty_out_is_refused_and_the_current_directory_untouched(out, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text('{"mine": 1}\n')
    before = tree(tmp_path)
    code, err = cli(["train", "--preset", "grpo", "--out", out] + sets(TINY), capsys)
    assert code == EXIT_USER and one_line(err) and "current directory" in err, err
    assert tree(tmp_path) == before


def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "plain").write_text("x")
    code, err = cli(["train", "--preset", "grpo", "--out", str(tmp_path / "plain")] + sets(TINY), capsys)
    assert code == EXIT_USER and one_line(err) and "is a file" in err
    assert (tmp_path / "plain").read_text() == "x"


@pytest.mark.parametrize("state", ["missing", "empty", "nested missing"])
def test_new_or_empty_folder_is_claimed_marker_first(state, tmp_path, monkeypatch):
    folder = tmp_path / ("a/b/run" if state == "nested missing" else "run")
    if state == "empty":
        folder.mkdir()
    written = []
    real = folders.write_bytes
    monkeypatch.setattr(folders, "write_bytes", lambda p, d: (written.append(Path(p).name), real(p, d))[1])
    RunDir(folder, presets.get("grpo", **TINY)).check_config()
    assert written[0] == folders.MARKER and (folder / folders.MARKER).read_text() == "run\n"
    assert (folder / "config.json").is_file()
    RunDir(folder, presets.get("grpo", **TINY)).check_config()  # ours now: checked again without complaint


def test_committed_runs_are_recognised_without_a_marker():
    runs = sorted(p.parent for p in (ROOT / "reports" / "runs").glob("*/*/summary.json"))
    assert len(runs) > 50 and all(is_run_folder(r) for r in runs)
    assert not is_run_folder(ROOT / "data" / "models" / "tiny-qwen3")


def test_claim_never_writes_into_a_legacy_folder(tmp_path):
    run = ROOT / "reports" / "runs"
    src = sorted(p.parent for p in run.glob("*/*/summary.json"))[0]
    dst = tmp_path / "legacy"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".lock", "ckpt-*", "adapter"))
    before = tree(dst)
    folders.claim(dst, "run", legacy=is_run_folder)
    assert tree(dst) == before


# --- 4. reuse only of complete, valid data ------------------------------------------------------------------
@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    from gpolib.train import train
    out = tmp_path_factory.mktemp("finished") / "run"
    train(presets.get("grpo", **TINY), out, progress=False)
    return out


def _damage_metrics(run: Path, how: str) -> None:
    p = run / "metrics.jsonl"
    rows = [json.loads(l) for l in p.read_text().splitlines()]
    if how == "NaN value":
        p.write_text(p.read_text().replace('"acc/mean": ', '"acc/mean": NaN, "x": ', 1))
    elif how == "Infinity value":
        p.write_text(p.read_text().replace('"loss/policy": ', '"loss/policy": -Infinity, "x": ', 1))
    elif how == "a row that is a list":
        p.write_text("[1, 2]\n" + "\n".join(json.dumps(r) for r in rows[1:]) + "\n")
    elif how == "steps out of order":
        p.write_text("\n".join(json.dumps(r) for r in reversed(rows)) + "\n")
    elif how == "a row repeated":
        p.write_text("\n".join(json.dumps(r) for r in [rows[0], rows[0]]) + "\n")


@pytest.mark.parametrize("how", ["NaN value", "Infinity value", "a row that is a list", "steps out of order",
                                 "a row repeated"])
def test_finished_run_with_invalid_metrics_is_not_reused(how, finished, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(finished, run, ignore=shutil.ignore_patterns(".lock"))
    _damage_metrics(run, how)
    rd = RunDir(run, presets.get("grpo", **TINY))
    assert rd.incomplete() is not None


@pytest.mark.parametrize("text,needle", [('{"finished": NaN}', "NaN"), ('{"finished": true, "steps": Infinity}', "Infinity"),
                                         ("[true]", "not an object"), ('"finished"', "not an object"), ("", "corrupt")])
def test_summary_that_is_not_a_strict_object_is_named(text, needle, finished, tmp_path):
    from gpolib.errors import RunFolderError
    run = tmp_path / "run"
    shutil.copytree(finished, run, ignore=shutil.ignore_patterns(".lock"))
    (run / "summary.json").write_text(text)
    with pytest.raises(RunFolderError, match=needle):
        RunDir(run, presets.get("grpo", **TINY)).finished()


def test_complete_finished_run_passes(finished):
    assert RunDir(finished, presets.get("grpo", **TINY)).incomplete() is None


# --- 2. committed reports are replaced only by complete ones; 3. no hang, an interrupt is one line ----------------
RUNNER = """
import sys
from gpolib.workbook import workbook as W
root, nbs = sys.argv[1], sys.argv[2]
W._reproduce_cli = lambda a: (W.reproduce("smoke", ["90"], root=root, notebooks_dir=nbs, build_report=False), 0)[1]
sys.exit(W.main(["reproduce", "--profile", "smoke", "--only", "90"]))
"""


def _seeded_reports(tmp_path: Path):
    """A root whose smoke executed copy and HTML of notebook 90 hold known bytes (stand-ins for committed ones)."""
    from gpolib import paths
    ex, html = paths.executed_dir("smoke", tmp_path), paths.html_dir("smoke", tmp_path)
    ex.mkdir(parents=True)
    html.mkdir(parents=True)
    (ex / "90_objectives_explorer.ipynb").write_bytes(b'{"committed": "executed copy"}\n')
    (html / "90_objectives_explorer.html").write_bytes(b"<html>committed</html>\n")
    return ex, html


def _start_runner(tmp_path: Path, notebooks: Path = ROOT / "notebooks"):
    import subprocess
    import sys
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", RUNNER, str(tmp_path), str(notebooks)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _slow_notebooks(tmp_path: Path) -> Path:
    """A notebooks folder whose notebook 90 sleeps 10 minutes after its parameters: a signal sent once its run has
    started always lands mid-run (the real notebook 90 can finish, HTML included, before a SIGINT is handled)."""
    import nbformat
    nbs = tmp_path / "slow_notebooks"
    (nbs / "params").mkdir(parents=True)
    (nbs / "params" / "smoke.yaml").write_text('"90": {}\n')
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "language": "python",
                                                           "display_name": "Python 3"}})
    nb.cells = [nbformat.v4.new_code_cell('PROFILE = "smoke"', metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("import time\ntime.sleep(600)")]
    nbformat.write(nb, nbs / "90_objectives_explorer.ipynb")
    return nbs


def _wait_for(cond, proc, seconds=240):
    import time
    end = time.time() + seconds
    while time.time() < end and proc.poll() is None:
        if cond():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("signal_", ["SIGKILL", "SIGINT"])
def test_a_notebook_stopped_mid_run_leaves_the_committed_copy_and_html_as_they_were(signal_, tmp_path):
    import signal
    ex, html = _seeded_reports(tmp_path)
    before = tree(tmp_path / "reports")
    proc = _start_runner(tmp_path, _slow_notebooks(tmp_path))
    started = _wait_for(lambda: any(ex.glob(".90_objectives_explorer.tmp*")), proc)
    assert started, proc.communicate()
    if signal_ == "SIGKILL":  # the runner and its kernel, as a machine's OOM killer or a closed terminal would
        os.killpg(proc.pid, signal.SIGKILL)
    else:  # Ctrl-C reaches the runner (the kernel runs in its own session under jupyter_client)
        os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    after = {k: v for k, v in tree(tmp_path / "reports").items() if not k.endswith((".failed.ipynb",))
             and not Path(k).name.startswith(".")}
    assert after == before
    if signal_ == "SIGINT":
        assert proc.returncode == 130 and one_line(err) and "interrupted" in err, err


def test_a_finished_notebook_replaces_both_files_and_leaves_no_temporary(tmp_path):
    ex, html = _seeded_reports(tmp_path)
    proc = _start_runner(tmp_path)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    text = (ex / "90_objectives_explorer.ipynb").read_text()
    nb = json.loads(text)
    assert nb["metadata"]["papermill"]["output_path"].endswith("reports/smoke/executed/90_objectives_explorer.ipynb")
    assert "<html>committed" not in (html / "90_objectives_explorer.html").read_text()
    assert sorted(p.name for p in ex.iterdir()) == ["90_objectives_explorer.ipynb"]


@pytest.mark.parametrize("prefix,profile,want", [("90", "full", 120), ("90", "smoke", 120), ("01", "full", 4 * 3600),
                                                 ("09", "gpu", 4 * 3600), ("01", "smoke", 900)])
def test_every_notebook_runs_under_a_cell_timeout(prefix, profile, want):
    from gpolib.workbook.execution import cell_timeout
    from gpolib.workbook.workbook import Job
    assert cell_timeout(Job(prefix, Path(f"{prefix}_x.ipynb"), {"PROFILE": profile})) == want


def test_a_cell_past_its_timeout_fails_the_notebook_instead_of_hanging(tmp_path, monkeypatch):
    import nbformat
    from gpolib.workbook import execution
    from gpolib.workbook.workbook import Job
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "language": "python",
                                                           "display_name": "Python 3"}})
    nb.cells = [nbformat.v4.new_code_cell('PROFILE = "smoke"', metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("import time\ntime.sleep(600)")]
    src = tmp_path / "91_sleep.ipynb"
    nbformat.write(nb, str(src))
    monkeypatch.setattr(execution, "QUIET_CELL_TIMEOUT_S", 3)
    monkeypatch.setattr("gpolib.workbook.workbook.TRAINS_NOTHING", ("91",))
    import time
    t0 = time.time()
    with pytest.raises(execution.NotebookFailed, match="ran past the cell timeout of 3 s"):
        execution.execute(Job("91", src, {"PROFILE": "smoke"}), tmp_path / "ex" / "91_sleep.ipynb",
                          tmp_path / "html" / "91_sleep.html")
    assert time.time() - t0 < 120
    assert not (tmp_path / "ex" / "91_sleep.ipynb").exists() and (tmp_path / "ex" / "91_sleep.failed.ipynb").exists()


def test_atomic_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    import errno
    f = tmp_path / "claims.json"
    f.write_text("old\n")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(folders.os, "fsync", full)
    with pytest.raises(OSError, match="claims.json"):
        folders.write_text(f, "new\n")
    assert f.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["claims.json"]


@pytest.mark.parametrize("writer", ["jsonio.write", "plots.save", "report._write_if_changed", "panel.write_table"])
def test_every_report_writer_goes_through_the_atomic_write(writer, tmp_path, monkeypatch):
    """Each writer of a file under reports/ fails as a whole when the write fails: the old file stays."""
    import errno

    import pandas as pd

    def refuse(fd):  # the disk fills at the atomic write's fsync: only a writer that goes through it fails
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(folders.os, "fsync", refuse)
    target = tmp_path / "reports" / "x"
    target.parent.mkdir()
    if writer == "jsonio.write":
        from gpolib import jsonio
        target.write_text("old")
        call = lambda: jsonio.write(target, {"a": 1})  # noqa: E731
    elif writer == "plots.save":
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from gpolib.lab import plots
        target = tmp_path / "figures" / "f.png"
        target.parent.mkdir()
        target.write_text("old")
        monkeypatch.setattr(plots.paths, "figures_dir", lambda profile, root=None: target.parent)
        call = lambda: plots.save(plt.figure(), "f", "smoke")  # noqa: E731
    elif writer == "report._write_if_changed":
        from gpolib.lab import report
        target.write_text("old")
        call = lambda: report._write_if_changed(target, "new")  # noqa: E731
    else:
        from gpolib.lab import panel
        target = tmp_path / "reports" / panel.TABLE
        target.write_text("old")
        call = lambda: panel.write_table(pd.DataFrame({"a": [1.0]}), target.parent)  # noqa: E731
    with pytest.raises(OSError, match="disk is full|No space"):
        call()
    assert target.read_text() == "old"


# --- 4 (cont.). reuse of cached artefacts only when complete ----------------------------------------------------
def _entry(**kw):
    e = {"step": 0, "acc/sample": 0.25, "acc/greedy": 0.5, "len/mean": 40.0, "len/correct": 30.0,
         "len/incorrect": 44.0, "trunc/frac": 0.0}
    e.update(kw)
    return e


@pytest.mark.parametrize("entry,ok", [
    (_entry(), True), ({}, False), ([], False), (None, False), (_entry(step=1), False),
    ({k: v for k, v in _entry().items() if k != "acc/greedy"}, False), (_entry(**{"acc/sample": 1.5}), False),
    (_entry(**{"acc/sample": float("nan")}), False), (_entry(**{"len/mean": -1.0}), False),
    (_entry(**{"trunc/frac": "0"}), False), (_entry(**{"acc/greedy": True}), False),
    (_entry(**{"len/mean": float("inf")}), False), (_entry(**{"len/correct": None}), True),
])
def test_step0_cache_entry_is_reused_only_when_complete(entry, ok):
    from gpolib import eval_cache
    assert eval_cache.valid(entry) is ok


def test_step0_cache_entry_of_an_empty_object_is_computed_again(tmp_path, monkeypatch):
    from gpolib import eval_cache
    monkeypatch.setenv("GPOLIB_CACHE_DIR", str(tmp_path))
    cfg = presets.get("grpo", **TINY)

    class FakeTrainer:
        def __init__(self):
            self.cfg, self.calls = cfg, 0

        def evaluate(self, step):
            self.calls += 1
            return _entry()
    tr = FakeTrainer()
    path = eval_cache.cache_dir() / f"{eval_cache.key(cfg)}.json"
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    with pytest.warns(UserWarning, match="incomplete"):
        assert eval_cache.step0(tr) == _entry()
    assert tr.calls == 1 and json.loads(path.read_text()) == _entry()
    assert eval_cache.step0(tr) == _entry() and tr.calls == 1  # the good entry is now reused


def _panel_file(tmp_path, counts, **meta_over):
    from gpolib.lab import panel
    meta = {**panel._meta(4, tmp_path), **meta_over}
    (tmp_path / panel.FILE).write_text(json.dumps({**meta, "counts": counts}))
    return tmp_path / panel.FILE


@pytest.mark.parametrize("counts,keep", [
    ({"0": [0, 8, 3, 4], "10": [1, 1, 1, 1]}, ["0", "10"]),
    ({"0": [0, 8, 3]}, []),  # cut short
    ({"0": [0, 8, 3, 9]}, []),  # above the samples
    ({"0": [0, 8, 3, -1]}, []),
    ({"0": [0, 8, 3, 2.5]}, []),
    ({"0": [0, 8, 3, True]}, []),
    ({"0": "0,8,3,4"}, []),
    ({"0": [0, 8, 3, 4], "10": [1, 1]}, ["0"]),
])
def test_panel_counts_are_reused_only_when_complete(counts, keep, tmp_path):
    import warnings as W
    from gpolib.lab import panel
    path = _panel_file(tmp_path, counts)
    with W.catch_warnings(record=True) as caught:
        W.simplefilter("always")
        got = panel.kept_counts(path, 4, tmp_path)
    assert sorted(got) == keep and (len(caught) > 0) == (len(keep) < len(counts))


@pytest.mark.parametrize("text", ['{"prompts": 4, "counts": {"0": [NaN', '{"counts": {"0": [NaN, 1, 1, 1]}}', "", "[]"])
def test_panel_file_that_does_not_parse_is_computed_again(text, tmp_path):
    from gpolib.lab import panel
    (tmp_path / panel.FILE).write_text(text)
    with pytest.warns(UserWarning) if text not in ("[]",) else _nothing():
        assert panel.kept_counts(tmp_path / panel.FILE, 4, tmp_path) == {}


def _nothing():
    import contextlib
    return contextlib.nullcontext()


@pytest.fixture(scope="module")
def ratio_run(tmp_path_factory):
    """A ratio run's two files as notebook 02 writes them: 3 steps x 4 responses."""
    import numpy as np
    import pandas as pd
    from gpolib.lab import ratio_prefix
    d = tmp_path_factory.mktemp("ratio")
    lengths = np.array([3, 1, 2, 4] * 3)
    df = pd.DataFrame({"step": np.repeat([0, 1, 2], 4), "prompt": [0, 0, 1, 1] * 3, "length": lengths,
                       "log_prod_rho": 0.1, "log_s": 0.01, "advantage": [1.0, -1.0] * 6})
    df.to_csv(d / "ratios.csv", index=False)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    ratio_prefix.save_tokens(d / ratio_prefix.TOKENS_FILE, np.zeros(offsets[-1], np.float32), offsets,
                             df["step"].to_numpy(), df["prompt"].to_numpy(), df["advantage"].to_numpy())
    return d


RATIO_DAMAGE = ["cut to 3 rows", "a step missing", "NaN value", "empty csv", "a column missing", "npz cut",
                "npz of other responses", "csv not text"]


@pytest.mark.parametrize("damage", RATIO_DAMAGE)
def test_ratio_run_files_are_reused_only_when_complete(damage, ratio_run, tmp_path):
    from gpolib.lab import ratio_decay, ratio_prefix
    d = tmp_path / "r"
    shutil.copytree(ratio_run, d)
    assert ratio_decay.records_problem(d, 3) is None
    csv, npz = d / "ratios.csv", d / ratio_prefix.TOKENS_FILE
    lines = csv.read_text().splitlines()
    if damage == "cut to 3 rows":
        csv.write_text("\n".join(lines[:4]) + "\n")
    elif damage == "a step missing":
        csv.write_text("\n".join(lines[:9]) + "\n")
    elif damage == "NaN value":
        csv.write_text("\n".join([lines[0], lines[1].replace("0.1", "nan")] + lines[2:]) + "\n")
    elif damage == "empty csv":
        csv.write_text("")
    elif damage == "a column missing":
        csv.write_text("\n".join(",".join(l.split(",")[:-1]) for l in lines) + "\n")
    elif damage == "npz cut":
        npz.write_bytes(npz.read_bytes()[:40])
    elif damage == "npz of other responses":
        import numpy as np
        ratio_prefix.save_tokens(npz, np.zeros(5, np.float32), np.array([0, 5]), np.array([0]), np.array([0]),
                                 np.array([1.0]))
    else:
        csv.write_bytes(b"\xff\xfe\x00")
    assert ratio_decay.records_problem(d, 3) is not None


# --- 5. exit codes: an expected failure inside a notebook is exit 2, as on the command line ----------------------
class _KernelError(Exception):
    def __init__(self, ename, evalue):
        super().__init__(evalue)
        self.ename, self.evalue, self.cell_index, self.source = ename, evalue, 3, "train(cfg, out)"


@pytest.mark.parametrize("ename,evalue,rejected", [
    ("RunLockedError", "reports/runs/x is being written by process 12", True),
    ("RunMismatchError", "reports/runs/x holds a stale run", True),
    ("ModelFolderError", "data/models/m lacks weights", True),
    ("FolderNotOursError", "--out x is a folder gpolib did not make", True),
    ("DataError", "t.jsonl:2: malformed JSON", True),
    ("ConfigError", "eval_prompts=600 is invalid; allowed: <= 512", True),
    ("RunFolderError", "summary.json is corrupt", True),
    ("ParameterError", "notebook parameter GROUP=1 is invalid; allowed: an int >= 2", True),
    ("ValueError", "group_size=1 is invalid; allowed: >= 2", True),
    ("ZeroDivisionError", "division by zero", False),
    ("KeyError", "'grpo/seed0'", False),
    ("RuntimeError", "CUDA error", False),
])
def test_expected_failures_in_a_notebook_are_rejected_input(ename, evalue, rejected, tmp_path):
    from gpolib.workbook.execution import _failure
    from gpolib.workbook.workbook import Job
    got = _failure(Job("01", Path("01_grpo.ipynb"), {}), _KernelError(ename, evalue), tmp_path / "x.ipynb")
    assert got.rejected_input is rejected and "cell 3" in str(got)


# --- every notebook parameter has a rule; the runner applies them before any notebook runs ----------------------
def test_every_notebook_parameter_has_a_rule_and_every_default_passes():
    from gpolib.lab.parameters import RULES, check
    from gpolib.workbook.workbook import list_notebooks, notebook_defaults
    for nb in list_notebooks(ROOT / "notebooks").values():
        defaults = notebook_defaults(nb)
        assert sorted(set(defaults) - set(RULES)) == [], nb.name
        check(**defaults)


@pytest.mark.parametrize("section,value", [("02", {"GROUP": 1}), ("90", {"GROUP_SIZE": 1}), ("90", {"EPS_LOW": 1.5}),
                                           ("90", {"EPS_HIGH": 0.0}), ("90", {"RATIO_LEVEL": "tokens"}),
                                           ("90", {"AGGREGATION": "sum"}), ("90", {"ADV_SCALE": "std"}),
                                           ("00", {"GRPO_EVAL_EVERY": 0}), ("00", {"PREFIX_STEPS": 0}),
                                           ("01", {"MODEL": " "}), ("01", {"EVAL_SAMPLES": 0}),
                                           ("90", {"N_CORRECT": -1}), ("90", {"MAX_LEN": 0}),
                                           ("09", {"KL_SAMPLES": 1}), ("00", {"N_PROMPTS": 0})])
def test_params_file_outside_the_rules_is_refused_before_anything_runs(section, value, tmp_path):
    import yaml
    from gpolib.workbook.workbook import WorkbookError, list_notebooks, notebook_defaults, plan
    nbs = list_notebooks(ROOT / "notebooks")
    if not set(value) <= set(notebook_defaults(nbs[section])):
        section = next(p for p, nb in nbs.items() if set(value) <= set(notebook_defaults(nb)))
    d = tmp_path / "notebooks"
    (d / "params").mkdir(parents=True)
    for nb in nbs.values():
        shutil.copy(nb, d / nb.name)
    (d / "params" / "smoke.yaml").write_text(yaml.safe_dump({section: value}))
    name = next(iter(value))
    with pytest.raises(WorkbookError, match=f"{name}=.* is invalid; allowed"):
        plan("smoke", None, d)


# --- 4 (cont.). model folders are checked against the architecture their weights hold --------------------------
def _edit_config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("changes,needle", [
    (dict(model_type="llama", architectures=["LlamaForCausalLM"]), "no place for: model.layers.0.self_attn.k_norm"),
    (dict(num_hidden_layers=+1), "parameters the weights lack"),
    (dict(num_hidden_layers=-1), "no place for"),
    (dict(vocab_size=+7), "do not fit|shapes that differ"),
    (dict(hidden_size=2), "do not fit|shapes that differ"),
])
def test_model_config_that_does_not_match_its_weights_is_refused(changes, needle, tmp_path):
    from gpolib.errors import ModelFolderError
    from gpolib.models import load_policy
    folder = _model_copy(tmp_path)
    base = json.loads((folder / "config.json").read_text())
    _edit_config(folder, **{k: (base[k] + v if isinstance(v, int) and k != "hidden_size" else v)
                            for k, v in changes.items()})
    if "num_hidden_layers" in changes:  # one layer type per layer, else the config itself is refused
        n = base["num_hidden_layers"] + changes["num_hidden_layers"]
        _edit_config(folder, layer_types=base["layer_types"][:1] * n, max_window_layers=n)
    with pytest.raises(ModelFolderError, match=needle):
        load_policy(str(folder), lora_r=0)


def test_model_mismatch_through_train_is_one_line_exit_2(tmp_path, capsys):
    folder = _model_copy(tmp_path)
    _edit_config(folder, model_type="llama", architectures=["LlamaForCausalLM"])
    code, err = cli(["train", "--preset", "grpo", "--out", str(tmp_path / "r"), "--set", f"model={folder}"]
                    + sets(TINY), capsys)
    assert code == EXIT_USER and one_line(err) and "does not match its weights" in err, err


@pytest.mark.parametrize("n", [513, 600, 10**6])
def test_eval_prompts_beyond_the_file_is_refused_not_capped(n, tmp_path, capsys):
    code, err = cli(["train", "--preset", "grpo", "--out", str(tmp_path / "r")] + sets({**TINY, "eval_prompts": n}),
                    capsys)
    assert code == EXIT_USER and one_line(err) and f"eval_prompts={n} is invalid; allowed: <= the 512" in err, err
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


# --- 5 (cont.). the runner's own files and settings: one line, never a traceback -------------------------------
@pytest.mark.parametrize("text", ["[", '[{"id": "G1", "verdict": "reproduced"', "not json", '{"a": 1}', '[{"id": "G1"}]',
                                  "[1]"])
def test_a_damaged_scoreboard_does_not_block_the_next_reproduce(text, tmp_path, capsys):
    from gpolib import paths
    from gpolib.workbook.workbook import _verdicts
    f = paths.reports_dir("smoke", tmp_path) / "claims.json"
    f.parent.mkdir(parents=True)
    f.write_text(text)
    assert _verdicts("smoke", tmp_path) == {}
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not parse" in err


@pytest.mark.parametrize("text", ['{"id": "G1", "verdict": "reprod', "[1, 2]", '{"id": NaN}'])
def test_a_damaged_claim_record_is_named(text, tmp_path):
    from gpolib import paths
    from gpolib.errors import UserError
    from gpolib.lab import report
    d = paths.claims_dir("smoke", tmp_path)
    d.mkdir(parents=True)
    (d / "G1.json").write_text(text)
    with pytest.raises(UserError, match="G1.json"):
        report.collect("smoke", tmp_path)


def test_a_damaged_claims_json_is_named_by_the_report_page(tmp_path):
    from gpolib.errors import UserError
    from gpolib.workbook import index
    (tmp_path / "claims.json").write_text("[{")
    with pytest.raises(UserError, match="claims.json does not parse"):
        index._claims(tmp_path)


@pytest.mark.parametrize("text,line", [("common: {STEPS: 2\n", 2), ('"01": [1, 2\n', 2), ("a: b: c\n", 1),
                                       ("common:\n\t- 1\n", 2)])
def test_params_file_with_a_yaml_syntax_error_is_one_line(text, line, tmp_path):
    from gpolib.workbook.workbook import WorkbookError, load_params_file
    f = tmp_path / "smoke.yaml"
    f.write_text(text)
    with pytest.raises(WorkbookError, match=rf"smoke.yaml line {line}: not valid YAML"):
        load_params_file(f)


@pytest.mark.parametrize("length,falls_back", [(20, False), (60, False), (80, True), (300, True)])
def test_a_long_tmpdir_does_not_put_the_kernel_sockets_past_the_os_limit(length, falls_back):
    import tempfile
    from gpolib.workbook.execution import SOCKET_PATH_MAX, socket_folder
    base = tempfile.mkdtemp(prefix="s", dir="/tmp")
    try:
        folder = base
        while len(folder) < length:  # nested names: a path component is at most 255 bytes
            folder = os.path.join(folder, "x" * min(100, length - len(folder) - 1))
        os.makedirs(folder, exist_ok=True)
        assert len(folder) == length
        chosen = socket_folder(folder)
        assert chosen == ("/tmp" if falls_back else folder)
        assert len(chosen) + len("/gpolib-kernel-") + 12 + 3 <= SOCKET_PATH_MAX
    finally:
        shutil.rmtree(base)


# --- 5 (cont.). prefetch: its workers die with it, a locked run is one line --------------------------------------
PREFETCH_PARENT = """
import multiprocessing as mp, os, sys, time
from gpolib.workbook.prefetch import _die_with_parent
def nap(_):
    open(os.path.join(sys.argv[2], str(os.getpid())), "w").close()
    time.sleep(300)
if __name__ == "__main__":
    pool = mp.get_context("spawn").Pool(2, initializer=_die_with_parent if sys.argv[1] == "1" else None)
    pool.map_async(nap, range(2))
    time.sleep(300)
"""


@pytest.mark.parametrize("guard", [True])
def test_prefetch_workers_die_with_a_killed_prefetch(guard, tmp_path):
    """guard False (no `_die_with_parent`): the workers outlive their killed parent, and this fails."""
    import signal
    import subprocess
    import sys
    import time
    script, marks = tmp_path / "parent.py", tmp_path / "pids"
    script.write_text(PREFETCH_PARENT)
    marks.mkdir()
    proc = subprocess.Popen([sys.executable, str(script), "1" if guard else "0", str(marks)],
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert _wait_for(lambda: len(list(marks.iterdir())) == 2, proc, 120)
    pids = [int(p.name) for p in marks.iterdir()]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    end = time.time() + 30
    while time.time() < end and any(_state(p) != "Z" for p in pids):
        time.sleep(0.1)
    alive = [p for p in pids if _state(p) != "Z"]
    for p in alive:
        os.kill(p, signal.SIGKILL)
    assert alive == []


PREFETCH_CLOSE = """
import multiprocessing as mp
from gpolib.workbook.prefetch import _die_with_parent
if __name__ == "__main__":
    for _ in range(6):
        with mp.get_context("spawn").Pool(2, initializer=_die_with_parent, maxtasksperchild=1) as pool:
            assert sorted(pool.imap_unordered(abs, range(-6, 0))) == [1, 2, 3, 4, 5, 6]
            pool.close()
            pool.join()
    print("joined")
"""


def test_prefetch_pool_joins_after_its_last_run(tmp_path):
    """Six pools of one-task workers close and join: with the worker's death tied to the pool's forking thread
    (`prctl(PR_SET_PDEATHSIG)`), a replacement worker died at `close` and `join` hung in about 2 of 5 pools."""
    import subprocess
    import sys
    script = tmp_path / "close.py"
    script.write_text(PREFETCH_CLOSE)
    out = subprocess.run([sys.executable, str(script)], env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0 and out.stdout.strip() == "joined", out.stderr[-2000:]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][:1]
    except (OSError, IndexError):
        return "Z"


def test_prefetch_worker_reports_a_locked_run_in_one_line(tmp_path):
    from gpolib.workbook.prefetch import _train_one
    cfg = presets.get("grpo", **TINY)
    rd = RunDir(tmp_path / "run", cfg)
    rd.check_config()
    rd.acquire()
    try:
        label, secs, why = _train_one(("01 grpo/seed0", cfg, tmp_path / "run"))
    finally:
        rd.release()
    assert secs is None and "being written by process" in why and "\n" not in why


# --- 5 (cont.). settings this machine cannot run: one line, exit 2 -------------------------------------------------
@pytest.mark.parametrize("threads,ok", [(0, True), (1, True), (4, True), (5, False), (100000, False)])
def test_rollout_threads_beyond_a_sampling_batch_is_refused(threads, ok):
    if ok:
        assert presets.get("grpo", **TINY, rollout_threads=threads).rollout_threads == threads
    else:
        with pytest.raises(ValueError, match=f"rollout_threads={threads} is invalid; allowed: 0 .* 4 "):
            presets.get("grpo", **TINY, rollout_threads=threads)


def test_cuda_asked_for_on_a_machine_without_it_is_one_line(tmp_path, capsys, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, err = cli(["train", "--preset", "grpo", "--out", str(tmp_path / "r"), "--set", "device=cuda"] + sets(TINY),
                    capsys)
    assert code == EXIT_USER and one_line(err) and "no CUDA device here" in err, err


def test_vllm_missing_is_one_line(tmp_path, monkeypatch):
    import builtins
    from gpolib.engine import vllm_backend
    from gpolib.errors import message
    real = builtins.__import__

    def no_vllm(name, *a, **k):
        if name.split(".")[0] == "vllm":
            raise ModuleNotFoundError("No module named 'vllm'")
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_vllm)
    with pytest.raises(ImportError) as caught:
        vllm_backend._import_vllm()
    text = message(caught.value)
    assert text and "gpolib[vllm]" in text and "\n" not in text


def test_bench_without_trl_is_one_line(capsys, monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trl" else real(name, *a))
    from gpolib import bench
    code = bench.main(["--steps", "1"])
    err = capsys.readouterr().err
    assert code == EXIT_USER and one_line(err) and "bench" in err and "pip install" in err, err


@pytest.mark.parametrize("err,needle", [(MemoryError(), "out of memory"), (MemoryError("cannot allocate 9 GiB"), "9 GiB"),
                                        (type("SafetensorError", (Exception,), {})("I/O error: No space left on device"),
                                         "disk is full")])
def test_memory_and_safetensors_disk_full_are_expected_failures(err, needle):
    from gpolib.errors import message
    text = message(err)
    assert text and needle in text and "\n" not in text
