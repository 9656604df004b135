"""TrainConfig.report_to="tensorboard" (gpolib/reporting.py): every step's metrics read back from the event file."""
import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from gpolib.config import TrainConfig
from gpolib.reporting import TB_DIR, reporter


def _scalars(log_dir) -> dict:
    """tag -> [(step, value)] of every event file in log_dir."""
    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_rows_read_back_exactly(tmp_path):
    rep = reporter("tensorboard", tmp_path)
    rep.log({"step": 0, "reward/mean": 0.25, "clip/frac": 0.125, "clip/high_pi_old": None, "note": "text",
             "kl/mean": float("nan"),
             "update/skipped": 1, "lr": 0.0009765625})
    rep.log({"step": 1, "reward/mean": 0.75, "clip/frac": 0.0, "update/skipped": 0, "lr": 0.001953125})
    rep.close()
    assert _scalars(tmp_path / TB_DIR) == {  # dyadic values: exact in float32
        "reward/mean": [(0, 0.25), (1, 0.75)], "clip/frac": [(0, 0.125), (1, 0.0)],
        "update/skipped": [(0, 1.0), (1, 0.0)], "lr": [(0, 0.0009765625), (1, 0.001953125)]}


def test_resumed_writer_replaces_the_steps_after_the_checkpoint(tmp_path):
    first = reporter("tensorboard", tmp_path)
    for step in range(3):
        first.log({"step": step, "reward/mean": step / 4})
    first.close()
    resumed = reporter("tensorboard", tmp_path, start_step=1)  # killed after step 2, checkpoint at step 1
    for step in (1, 2):
        resumed.log({"step": step, "reward/mean": 0.5 + step / 4})
    resumed.close()
    assert _scalars(tmp_path / TB_DIR)["reward/mean"] == [(0, 0.0), (1, 0.75), (2, 1.0)]


def test_report_to_is_validated_and_not_part_of_the_run_identity():
    cfg = TrainConfig(report_to="tensorboard")
    assert cfg.identity() == TrainConfig().identity() == {}
    assert cfg.fingerprint() == TrainConfig().fingerprint()
    assert TrainConfig.same_run({**TrainConfig().to_dict(), "report_to": "none"}, cfg) == []
    with pytest.raises(ValueError, match="report_to"):
        TrainConfig(report_to="wandb")
    with pytest.raises(ValueError, match="report_to"):
        reporter("wandb", ".")


def test_train_writes_every_step_to_tensorboard(tiny_cfg, tmp_path):
    from gpolib.train import train

    train(tiny_cfg(report_to="tensorboard"), tmp_path, progress=False)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    scalars = _scalars(tmp_path / TB_DIR)
    expected = {k: [(r["step"], float(r[k])) for r in rows if isinstance(r.get(k), (int, float))]
                for k in rows[0] if k != "step"}
    expected = {k: v for k, v in expected.items() if v}
    assert set(scalars) == set(expected)
    for k, points in expected.items():
        assert [s for s, _ in scalars[k]] == [s for s, _ in points], k
        assert [v for _, v in scalars[k]] == pytest.approx([v for _, v in points], rel=1e-6, abs=1e-30), k
