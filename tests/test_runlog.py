"""The runner learns from the runs inside a kernel: reused or computed, progress per step, recompute on request."""
import json
import os
import time

from gpolib import presets, runlog
from gpolib.workbook import progress
from gpolib.rundir import RunDir


def _finished(tmp_path, name="run"):
    run = RunDir(tmp_path / name, presets.get("grpo", steps=2))
    run.check_config()
    run.append_metrics({"step": 0})
    run.append_metrics({"step": 1})
    run.save_checkpoint(1, {"step": 1})
    run.write_summary({"finished": True})
    return run


def test_watch_collects_what_the_runs_did(tmp_path):
    with progress.Watch("04_gspo", poll_s=0.05, show=False) as watch:
        assert os.environ[runlog.LOG_ENV] == str(watch.log)
        done = _finished(tmp_path, "a")  # computed: start is not noted (no reuse() call), steps and summary are
        assert RunDir(done.path, done.cfg).reuse()  # reused
        fresh = RunDir(tmp_path / "b", done.cfg)
        fresh.check_config()
        assert not fresh.reuse()
        time.sleep(0.2)
    assert runlog.LOG_ENV not in os.environ and not watch.log.exists()
    s = watch.summary()
    assert [os.path.basename(f) for f in s["reused"]] == ["a"] and [os.path.basename(f) for f in s["computed"]] == ["a"]
    steps = [d for e, f, d in watch.events if e == "step"]
    assert steps == ["1/2", "2/2"] and ("start", str(tmp_path / "b"), "0/2") in watch.events
    assert progress.describe(s) == "runs: 1 reused, 1 computed (a)"
    assert progress.describe({"reused": [], "computed": []}) == "no training runs"


def test_recompute_clears_runs_finished_before_the_request(tmp_path, monkeypatch):
    run = _finished(tmp_path)
    monkeypatch.setenv(runlog.RECOMPUTE_ENV, str(time.time() - 3600))  # asked before the run finished: reuse
    assert run.reuse()
    monkeypatch.setenv(runlog.RECOMPUTE_ENV, str(time.time() + 1))  # asked after: recompute from step 0
    assert not run.reuse()
    assert not (run.path / "summary.json").exists() and not (run.path / "metrics.jsonl").exists()
    assert run.checkpoints() == [] and json.loads((run.path / "config.json").read_text())["data"]


def test_verdict_changes():
    assert progress.verdict_changes({"G1": "reproduced", "S1": "partly"}, {"G1": "reproduced", "S1": "partly"}) == []
    assert progress.verdict_changes({"G1": "reproduced"}, {"G1": "partly", "P2": "reproduced"}) == \
        ["G1: reproduced -> partly", "P2: absent -> reproduced"]
