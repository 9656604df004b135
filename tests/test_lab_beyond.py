"""Notebook 09's measurements on hand-computed numbers: one token's gradient per surrogate, RLOO's identity, the
axes table, the engines' mismatch file, and the sentences the notebook may print (never stronger than a verdict)."""
import math

import pytest

from gpolib import presets
from gpolib.lab import beyond, report, runs, stats
from test_lab_report import GOOD


def test_token_gradients_by_hand():
    g = beyond.token_gradients([0.5, 1.25, 6.0], [1.0, -1.0])
    # PPO's clip [0.8, 1.2] binds on the advantage's side: r = 1.25 with A > 0, r = 0.5 with A < 0 -> no gradient
    assert g.loc[(1.25, 1.0), "grpo"] == 0.0 and g.loc[(0.5, -1.0), "grpo"] == 0.0
    assert g.loc[(1.25, 1.0), "dapo"] == pytest.approx(1.25)  # inside Clip-Higher's 1.28: r A
    assert g.loc[(6.0, -1.0), "grpo"] == pytest.approx(-6.0)  # the other side: never clipped
    # CISPO: sg(clip(r, 0, 1 + 4)) A, every token keeps a gradient
    assert list(g["cispo"]) == pytest.approx([0.5, -0.5, 1.25, -1.25, 5.0, -5.0])
    # GMPO on one token: exp(clip(log r)) A, log-space bounds -0.4 / 0.4 on the advantage's side
    assert g.loc[(0.5, -1.0), "gmpo"] == 0.0 and g.loc[(1.25, 1.0), "gmpo"] == pytest.approx(1.25)


def test_rloo_table_is_dr_grpo_scaled():
    t = beyond.rloo_table([1.0, 0.0, 0.0, 0.0], 4)
    assert t["RLOO (hand)"].tolist() == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3])
    assert t["abs err"].max() <= 1e-6
    with pytest.raises(ValueError, match="G=4"):
        beyond.rloo_table([1.0, 0.0], 4)


def test_axes_table_reads_every_preset():
    t = beyond.axes_table()
    assert list(t.index) == [*presets.PRESETS, "rloo"]
    assert t.loc["cispo", "clipping"] == "IS weight at 5 (stop-gradient); no gradient zeroed"
    assert t.loc["gmpo", "granularity"].startswith("sequence") and t.loc["dapo", "sampling"].startswith("dynamic")
    assert t.loc["rloo", "advantage"] == "r - mean of the other G - 1" and t.loc["ppo", "advantage"].startswith("GAE")
    assert t.loc["gspo", "clipping"] == "PPO clip of the response ratio, [0.9997, 1.0004]"
    assert t["aggregation"].nunique() == 3 and t.map(len).max().max() <= 50  # pandas shows 50 characters a cell


def test_engine_mismatch_file():
    m = beyond.engine_mismatch()
    assert set(m) >= {"fp32", "bf16", "w8a8"} and all(len(v["kl"]) == 3 for v in m.values())
    assert list(beyond.mismatch_table(m).columns) == ["k3 KL per token", "max |log ratio|", "mean |log ratio|"]


def test_tables_beside_the_verdict():
    one = beyond.paired_table({"a": [0.5], "b": [0.4]}, {"a - b": ("a", "b")})
    assert one.loc["a - b", "mean"] == pytest.approx(0.1) and math.isnan(one.loc["a - b", "95% lo"])
    e = beyond.evidence_table({"acc": [0.5, 0.6, 0.7], "kl": [1e-4]})
    assert e.shape == (3, 2) and math.isnan(e.loc[2, "kl"])
    assert runs.relabel({"grpo_w8a8/seed1": 1, "x": 2}, beyond.LABELS) == {"W8A8 engine/seed1": 1, "x": 2}


def _said(cid: str, change: dict, profile: str = "full") -> str:
    e = {**GOOD[cid], **change}
    return beyond.statements({cid: stats.for_profile(report.judge(cid, e), profile)}, {cid: e})[0]


def test_statements_are_no_stronger_than_the_verdicts():
    assert "above DAPO" in _said("C1", {})
    assert "do not tell" in _said("C1", {"acc_cispo": [0.48, 0.53, 0.52]}) and "above" not in _said(
        "C1", {"acc_cispo": [0.48, 0.53, 0.52]})
    assert "narrower" in _said("C2", {}) and "wider" in _said("C2", {"range_gmpo": [0.40, 0.41, 0.40]})
    assert "(partly)" in _said("C3", {"acc_w8a8": [0.50, 0.51, 0.50]})
    assert "do not tell TIS from no correction" in _said("C3", {"acc_w8a8": [0.50, 0.51, 0.50]})
    assert _said("C3", {"kl_w8a8": [5e-5, 6e-5, 7e-5]}).startswith("C3 (not tested): the W8A8 engine's mismatch is not "
                                                                  "larger than the bf16 engine's on both measures: k3 KL 0.86x")
    # the committed measurement: KL larger (1.62x) but max |log ratio| smaller (0.455 vs 0.537): not tested
    smaller_max = _said("C3", {"max_log_ratio_w8a8": [0.45, 0.46, 0.455], "max_log_ratio_bf16": [0.53, 0.54, 0.537]})
    assert smaller_max.startswith("C3 (not tested)") and "max |log ratio| 0.85x" in smaller_max
    assert _said("C1", {}, "smoke") == "C1: smoke run, no statement (the full profile is the replication)."
    assert _said("C4", {}).startswith("C4 (reproduced): max |RLOO")
