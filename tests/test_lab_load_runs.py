"""`runs.load_runs`: every run folder as one tidy frame; `plots.runs_plot` draws a metric with seed bands."""
import json

import matplotlib
import numpy as np
import pandas as pd
import pytest

from gpolib.lab import plots, runs

matplotlib.use("Agg")


def _write_run(folder, config, steps, finished=None, record=True):
    folder.mkdir(parents=True)
    body = {"fingerprint": "f", "data": {}, "config": config} if record else config
    (folder / "config.json").write_text(json.dumps(body))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    if finished is not None:
        (folder / "summary.json").write_text(json.dumps({"finished": finished}))


def _config(name, seed, eps_high):
    return {"name": name, "seed": seed, "lr": 0.001, "loss": {"eps_low": 0.2, "eps_high": eps_high}}


@pytest.fixture
def root(tmp_path):
    nb = tmp_path / "04_gspo"
    _write_run(nb / "grpo-seed0-0123abcd", _config("grpo", 0, 0.28),
               [{"step": 0, "reward/mean": 0.25, "lr": 0.0005}, {"step": 1, "reward/mean": 0.5, "lr": 0.001}], True)
    _write_run(nb / "grpo-seed1-0123abcd", _config("grpo", 1, 0.28),
               [{"step": 0, "reward/mean": 0.75, "lr": 0.0005}, {"step": 1, "reward/mean": 1.0, "lr": 0.001}], True)
    _write_run(nb / "gspo-seed0-89abcdef", _config("gspo", 0, 0.0004),
               [{"step": 0, "reward/mean": 0.5, "clip/frac": 0.125}], False)
    _write_run(tmp_path / "06_dr_grpo" / "dr_grpo", _config("dr_grpo", 0, 0.2), [{"step": 0, "reward/mean": 0.0}],
               record=False)  # a bare config.json, no summary: unfinished
    (nb / "not-a-run").mkdir()  # no config.json / metrics.jsonl: skipped
    (nb / "not-a-run" / "metrics.jsonl").write_text("")
    return tmp_path


def test_frame_holds_every_step_with_its_configuration(root):
    df = runs.load_runs(root)
    assert list(df.columns) == ["notebook", "run", "arm", "finished", "config.name", "config.seed", "config.lr",
                                "config.loss.eps_low", "config.loss.eps_high", "step", "reward/mean", "lr",
                                "clip/frac"]
    expected = pd.DataFrame({
        "notebook": ["04_gspo"] * 5 + ["06_dr_grpo"],
        "run": ["grpo-seed0-0123abcd"] * 2 + ["grpo-seed1-0123abcd"] * 2 + ["gspo-seed0-89abcdef", "dr_grpo"],
        "arm": ["grpo"] * 4 + ["gspo", "dr_grpo"],
        "finished": [True] * 4 + [False, False],
        "config.name": ["grpo"] * 4 + ["gspo", "dr_grpo"],
        "config.seed": [0, 0, 1, 1, 0, 0],
        "config.lr": [0.001] * 6,
        "config.loss.eps_low": [0.2] * 6,
        "config.loss.eps_high": [0.28] * 4 + [0.0004, 0.2],
        "step": [0, 1, 0, 1, 0, 0],
        "reward/mean": [0.25, 0.5, 0.75, 1.0, 0.5, 0.0],
        "lr": [0.0005, 0.001, 0.0005, 0.001, np.nan, np.nan],
        "clip/frac": [np.nan] * 4 + [0.125, np.nan],
    })
    pd.testing.assert_frame_equal(df, expected)


def test_notebook_filter_empty_root_and_varying_config(root, tmp_path_factory):
    df = runs.load_runs(root, notebooks=["06_dr_grpo"])
    assert df["run"].tolist() == ["dr_grpo"]
    empty = runs.load_runs(tmp_path_factory.mktemp("none"))
    assert len(empty) == 0 and "step" in empty.columns
    assert runs.varying_config(runs.load_runs(root)) == ["config.name", "config.loss.eps_high"]


def test_runs_plot_draws_seed_mean_and_band(root):
    df = runs.load_runs(root)
    fig = plots.runs_plot(df, "reward/mean", runs=["grpo-seed0-0123abcd", "grpo-seed1-0123abcd", "gspo-seed0-89abcdef"])
    ax = fig.axes[0]
    drawn = [np.asarray(ln.get_ydata()).tolist() for ln in ax.get_lines() if len(ln.get_xdata())]
    assert drawn[:2] == [pytest.approx([0.5, 0.75]), [0.5]]  # grpo: mean of its two seeds per step; gspo
    band = ax.collections[0].get_paths()[0].vertices[:, 1]  # the ± sd band of grpo
    sd = np.std([0.25, 0.75], ddof=1)
    assert band.min() == pytest.approx(0.5 - sd) and band.max() == pytest.approx(0.75 + sd)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["grpo", "gspo"]
    smoothed = plots.runs_plot(df, "reward/mean", runs=["grpo-seed0-0123abcd"], smooth=2).axes[0]
    assert np.asarray(smoothed.get_lines()[0].get_ydata()).tolist() == pytest.approx([0.25, 0.375])
