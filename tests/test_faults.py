"""Faults a user will hit (issue 36): a finished run with lost rows, a racing stale-lock takeover, bad task
data, broken model folders, and filesystem and run-folder errors that must end in one paragraph with exit 2."""
import errno
import json
import multiprocessing as mp
import os
import shutil
from pathlib import Path

import pytest

from gpolib import presets
from gpolib.errors import DataError, EXIT_USER, ModelFolderError, RunFolderError, message
from gpolib.rundir import RunDir, RunLockedError
from gpolib.taskfile import MAX_ANSWER_DIGITS, check_vocabulary, load_tasks
from gpolib.train import train

from conftest import read_metrics, stable

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(steps=3, prompts_per_step=2, group_size=2, max_new_tokens=24, eval_prompts=2, eval_samples=1,
            checkpoint_every=1, warmup_steps=0)
"""three steps of two groups of two: a finished run in a few seconds"""


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    rows = train(presets.get("grpo", **TINY), out, progress=False)
    return out, stable(rows)


def _copy(run: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(run, dst, ignore=shutil.ignore_patterns(".lock"))
    return dst


# --- 1. a finished run is reused only when it is complete ------------------------------------------
@pytest.mark.parametrize("damage", ["lost rows", "empty", "missing", "bad row"])
def test_finished_run_with_damaged_metrics_resumes_to_the_same_metrics(damage, finished_run, tmp_path):
    run, rows = finished_run
    run = _copy(run, tmp_path)
    metrics = run / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    if damage == "lost rows":
        metrics.write_text(lines[0] + "\n")
    elif damage == "empty":
        metrics.write_text("")
    elif damage == "missing":
        metrics.unlink()
    else:
        metrics.write_text("\n".join(lines[:-1] + ['{"step": 2, "acc/m']) + "\n")
    with pytest.warns(UserWarning, match="metrics.jsonl"):
        got = train(presets.get("grpo", **TINY), run, progress=False)
    assert stable(got) == rows  # resumed from the last good checkpoint, not read back with lost rows
    assert stable(read_metrics(run)) == rows


def test_complete_run_is_still_reused(finished_run, tmp_path, monkeypatch):
    import gpolib.train as T
    run = _copy(finished_run[0], tmp_path)
    monkeypatch.setattr(T, "Trainer", lambda cfg: pytest.fail("a complete run must be reused"))
    assert stable(train(presets.get("grpo", **TINY), run, progress=False)) == finished_run[1]


def test_every_committed_run_is_complete():
    """The committed runs stay reusable under the stricter check (rows = steps, every file parses)."""
    from gpolib.config import TrainConfig
    folders = sorted(p.parent for p in (ROOT / "reports" / "runs").glob("*/*/summary.json"))
    assert len(folders) > 50
    for folder in folders:
        cfg = TrainConfig.from_dict(json.loads((folder / "config.json").read_text())["config"])
        rd = RunDir(folder, cfg)
        results = ("ratios.csv",) if (folder / "ratios.csv").exists() else ("metrics.jsonl",)
        assert rd.finished() and rd.incomplete(results) is None, folder.name


def test_failed_run_without_results_does_not_block_its_folder(tmp_path):
    """A run that failed before its first step (e.g. on bad data) leaves only config.json: fixing the input
    and running again must not be refused as 'stale'."""
    tasks = tmp_path / "tasks.jsonl"
    shutil.copy(ROOT / "data" / "tasks" / "train.jsonl", tasks)
    cfg = presets.get("grpo", task_train=str(tasks), **TINY)
    RunDir(tmp_path / "run", cfg).check_config()
    tasks.write_text(tasks.read_text() + tasks.read_text().splitlines()[0] + "\n")  # the data changed
    RunDir(tmp_path / "run", cfg).check_config()  # no RunMismatchError
    recorded = json.loads((tmp_path / "run" / "config.json").read_text())["data"]["task_train"]
    from gpolib.identity import task_fingerprint
    assert recorded == task_fingerprint(str(tasks))


@pytest.mark.parametrize("name", ["config.json", "summary.json"])
def test_corrupt_run_file_is_named(name, finished_run, tmp_path):
    run = _copy(finished_run[0], tmp_path)
    (run / name).write_text('{"finished": tr')
    with pytest.raises(RunFolderError, match=f"{name} is corrupt"):
        train(presets.get("grpo", **TINY), run, progress=False)


# --- 2. the lock -------------------------------------------------------------------------------------
def _contender(path, start, done, out):
    rd = RunDir(path, presets.get("grpo", steps=1))
    start.wait()
    try:
        rd.acquire()
        out.put(os.getpid())
        done.wait()  # hold it until every contender has tried
        rd.release()
    except RunLockedError:
        out.put(0)
        done.wait()


@pytest.mark.parametrize("stale", ["dead pid", "empty"])
def test_stale_lock_takeover_has_exactly_one_winner(stale, tmp_path):
    ctx = mp.get_context("fork")
    n, trials = 4, 200
    for trial in range(trials):
        path = tmp_path / f"r{trial}"
        path.mkdir()
        (path / ".lock").write_text("999999999" if stale == "dead pid" else "")
        start, done, out = ctx.Barrier(n), ctx.Barrier(n), ctx.Queue()
        procs = [ctx.Process(target=_contender, args=(path, start, done, out)) for _ in range(n)]
        for p in procs:
            p.start()
        holders = [out.get(timeout=30) for _ in range(n)]
        for p in procs:
            p.join(timeout=30)
        assert sum(1 for h in holders if h) == 1, (trial, holders)


def test_lock_is_free_after_release_and_after_a_kill(tmp_path):
    rd = RunDir(tmp_path / "r", presets.get("grpo", steps=1))
    rd.acquire()
    other = RunDir(tmp_path / "r", presets.get("grpo", steps=1))
    with pytest.raises(RunLockedError, match=f"process {os.getpid()}"):
        other.acquire()
    rd.release()
    other.acquire()
    other.release()
    child = mp.get_context("fork").Process(target=lambda: (RunDir(tmp_path / "r", presets.get("grpo")).acquire(),
                                                           os._exit(9)))
    child.start()
    child.join()
    rd.acquire()  # the killed holder's lock went with its process
    rd.release()


# --- 3. task data -------------------------------------------------------------------------------------
def _task_file(tmp_path, *rows, raw: bytes | None = None) -> Path:
    p = tmp_path / "t.jsonl"
    good = '{"prompt": "1+2=?\\n", "answer": 3}'
    if raw is not None:
        p.write_bytes(good.encode() + b"\n" + raw + b"\n")
    else:
        p.write_text("\n".join([good, *rows]) + "\n")
    return p


@pytest.mark.parametrize("row,needle", [
    ('{"prompt": "", "answer": 1}', "t.jsonl:2: the prompt is empty"),
    ('{"prompt": "  \\n", "answer": 1}', "t.jsonl:2: the prompt is empty"),
    ('{"prompt": "9*9=?", "answer": 1234567890123}', f"more than {MAX_ANSWER_DIGITS} digits"),
    ('{"prompt": "9*9=?", "answer": -1234567890123}', f"more than {MAX_ANSWER_DIGITS} digits"),
    ('{"prompt": "9*9=?", "answer": "81"}', "t.jsonl:2: 'prompt' must be a str and 'answer' an int"),
    ('{"prompt": "9*9=?", "answer": true}', "t.jsonl:2: 'prompt' must be a str"),
    ('{"prompt": 7, "answer": 1}', "t.jsonl:2: 'prompt' must be a str"),
    ('[1, 2]', "t.jsonl:2: expected an object"),
    ('{"prompt": "x"}', "t.jsonl:2: expected an object"),
    ('{"prompt": "x", answer: 1}', "t.jsonl:2: malformed JSON"),
])
def test_bad_task_rows_name_file_and_line(row, needle, tmp_path):
    with pytest.raises(DataError, match=needle.replace("*", r"\*").replace("?", r"\?")):
        load_tasks(_task_file(tmp_path, row))


def test_non_utf8_byte_names_file_and_line(tmp_path):
    with pytest.raises(DataError, match=r"t.jsonl:2: not UTF-8 \(byte 0xff\)"):
        load_tasks(_task_file(tmp_path, raw=b'{"prompt": "1+1=?\xff", "answer": 2}'))


def test_directory_as_task_file(tmp_path):
    with pytest.raises(DataError, match="is a directory"):
        load_tasks(tmp_path)


def test_answer_digits_agree_with_the_parser():
    from gpolib.rewards import MAX_ANSWER_DIGITS as PARSER
    assert MAX_ANSWER_DIGITS == PARSER


def test_characters_outside_the_vocabulary_are_refused(tmp_path):
    from gpolib.tokenizer import build_tokenizer
    tok = build_tokenizer()
    p = _task_file(tmp_path, '{"prompt": "\u0663+\u0664=?\\n", "answer": 7}')  # Arabic-Indic 3 and 4
    with pytest.raises(DataError, match=r"t.jsonl:2: the prompt has characters the tokenizer does not know"):
        check_vocabulary(p, tok)
    check_vocabulary(ROOT / "data" / "tasks" / "train.jsonl", tok)  # the shipped data passes


# --- 4. model folders --------------------------------------------------------------------------------
@pytest.fixture()
def model_copy(tmp_path):
    dst = tmp_path / "m"
    shutil.copytree(ROOT / "data" / "models" / "tiny-qwen3", dst)
    return dst


@pytest.mark.parametrize("remove,needle", [("tokenizer_config.json", "lacks tokenizer_config.json"),
                                           ("model.safetensors", "lacks weights"),
                                           ("tokenizer.json", "lacks tokenizer")])
def test_model_folder_missing_a_file_is_named(remove, needle, model_copy):
    from gpolib.models import load_policy
    (model_copy / remove).unlink()
    with pytest.raises(ModelFolderError, match=needle):
        load_policy(str(model_copy))


def test_truncated_weights_name_the_file(model_copy):
    from gpolib.models import load_policy
    w = model_copy / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    with pytest.raises(ModelFolderError, match="model.safetensors is truncated"):
        load_policy(str(model_copy))


# --- 5. one boundary: exit 2, one paragraph, the path named -----------------------------------------------
def _cli(argv, capsys):
    from gpolib.__main__ import main
    code = main(argv)
    err = capsys.readouterr().err
    return code, err


def _one_paragraph(err: str) -> bool:
    """The message is the last line of stderr (progress bars may come before it), one paragraph, no traceback."""
    last = err.strip().splitlines()[-1] if err.strip() else ""
    return last.startswith("error: ") and err.count("error: ") == 1 and "Traceback" not in err


def test_second_train_on_a_locked_folder(tmp_path, capsys):
    out = tmp_path / "r"
    rd = RunDir(out, presets.get("grpo", **TINY))
    rd.check_config()
    rd.acquire()
    try:
        code, err = _cli(["train", "--preset", "grpo", "--out", str(out)] + _sets(TINY), capsys)
    finally:
        rd.release()
    assert code == EXIT_USER and _one_paragraph(err) and "being written by process" in err


def _sets(d: dict) -> list:
    return [a for k, v in d.items() for a in ("--set", f"{k}={v}")]


BOUNDARY = [
    ("malformed task file", lambda t: ["--set", f"task_train={_write(t, 'x.jsonl', 'oops')}"], "x.jsonl:1: malformed JSON"),
    ("non-utf8 task file", lambda t: ["--set", f"task_eval={_write(t, 'y.jsonl', None)}"], "y.jsonl:1: not UTF-8"),
    ("task file is a directory", lambda t: ["--set", f"task_train={t}"], "is a directory"),
    ("a README as task file", lambda t: ["--set", "task_eval=README.md"], "README.md:1: malformed JSON"),
    ("out is a regular file", lambda t: ["--out", _write(t, "plain", "x")], "plain"),
    ("model folder without config", lambda t: ["--set", f"model={_empty_dir(t)}"], "not a loadable causal LM"),
    ("train_router on a dense model", lambda t: ["--set", "train_router=True"], "train_router=True is invalid"),
]


def _write(folder: Path, name: str, text) -> str:
    p = folder / name
    p.write_bytes(b"\xff\xfe" if text is None else text.encode())
    return str(p)


def _empty_dir(folder: Path) -> str:
    (folder / "m").mkdir()
    return str(folder / "m")


@pytest.mark.parametrize("case,extra,needle", BOUNDARY, ids=[c for c, _, _ in BOUNDARY])
def test_expected_failures_end_in_one_paragraph(case, extra, needle, tmp_path, capsys):
    argv = ["train", "--preset", "grpo"] + _sets(TINY) + extra(tmp_path)
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "run")]
    code, err = _cli(argv, capsys)
    assert code == EXIT_USER and _one_paragraph(err) and needle in err, err


@pytest.mark.parametrize("code_", [errno.EROFS, errno.ENOSPC, errno.EEXIST, errno.ENOTDIR, errno.EACCES])
def test_filesystem_errors_name_the_path(code_):
    err = OSError(code_, os.strerror(code_), "/some/run/metrics.jsonl")
    text = message(err)
    assert text and "/some/run/metrics.jsonl" in text and "\n" not in text


def test_unexpected_errors_keep_their_traceback():
    assert message(KeyError("x")) is None and message(OSError(errno.EIO, "I/O error")) is None
    from gpolib.errors import boundary
    with pytest.raises(ZeroDivisionError):
        boundary(lambda: 1 / 0)


def test_disk_full_while_checkpointing_leaves_no_temporary(tmp_path, monkeypatch, capsys):
    import gpolib.rundir as R
    real = os.fsync

    def full(fd):
        if ".pt.tmp" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)
    monkeypatch.setattr(R.os, "fsync", full)
    out = tmp_path / "r"
    code, err = _cli(["train", "--preset", "grpo", "--out", str(out)] + _sets(TINY), capsys)
    assert code == EXIT_USER and _one_paragraph(err) and "the disk is full" in err
    assert list(out.glob("*.tmp*")) == []


def test_read_only_folder_is_reported(tmp_path, monkeypatch, capsys):
    import gpolib.rundir as R

    def read_only(path, data):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
    monkeypatch.setattr(R, "_atomic_write", read_only)
    code, err = _cli(["train", "--preset", "grpo", "--out", str(tmp_path / "r")] + _sets(TINY), capsys)
    assert code == EXIT_USER and _one_paragraph(err) and "read-only" in err and "config.json" in err


def test_reproduce_only_empty_is_refused(capsys):
    code, err = _cli(["reproduce", "--profile", "smoke", "--only", ""], capsys)
    assert code == EXIT_USER and "names no notebook" in err


# --- 6. notebook parameters ------------------------------------------------------------------------------
@pytest.mark.parametrize("name,value", [("SEEDS", 0), ("SEEDS", -1), ("SEEDS", 1.5), ("SEEDS", "3"), ("SEEDS", True),
                                        ("STEPS", 0), ("GROUP", 1), ("MU", 0), ("EVAL_PROMPTS", -4),
                                        ("PROFILE", "huge"), ("DEVICE", "tpu"), ("DTYPE", "int8"), ("SEED", -1)])
def test_bad_notebook_parameter_is_named(name, value):
    from gpolib.lab.parameters import ParameterError, check
    with pytest.raises(ParameterError, match=f"notebook parameter {name}={value!r} is invalid; allowed: "):
        check(**{name: value, "STEPS": 3} if name != "STEPS" else {name: value})


def test_good_notebook_parameters_pass():
    from gpolib.lab.parameters import check
    params = dict(PROFILE="full", SEEDS=3, STEPS=100, GROUP=8, MU=4, DEVICE="cpu", DTYPE="float32", OTHER=[1])
    assert check(**params) == params


def test_trainer_refuses_a_prompt_the_tokenizer_cannot_read(tmp_path, capsys):
    """Arabic-Indic digits became <unk> and the run finished with accuracy 0.0, cached as valid."""
    rows = (ROOT / "data" / "tasks" / "train.jsonl").read_text().splitlines()[:8]
    bad = tmp_path / "arabic.jsonl"
    bad.write_text("\n".join(rows + ['{"prompt": "\u0663+\u0664=?\\n", "answer": 7}']) + "\n")
    code, err = _cli(["train", "--preset", "grpo", "--out", str(tmp_path / "r"), "--set", f"task_train={bad}"]
                     + _sets(TINY), capsys)
    assert code == EXIT_USER and _one_paragraph(err) and "arabic.jsonl:9: the prompt has characters" in err
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


def test_more_prompts_per_step_than_the_file_has(tmp_path, capsys):
    rows = (ROOT / "data" / "tasks" / "train.jsonl").read_text().splitlines()[:3]
    few = tmp_path / "few.jsonl"
    few.write_text("\n".join(rows) + "\n")
    code, err = _cli(["train", "--preset", "grpo", "--out", str(tmp_path / "r"), "--set", f"task_train={few}",
                      "--set", "prompts_per_step=4"] + _sets({k: v for k, v in TINY.items() if k != "prompts_per_step"}),
                     capsys)
    assert code == EXIT_USER and _one_paragraph(err) and "prompts_per_step=4 is invalid" in err
