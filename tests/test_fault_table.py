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
