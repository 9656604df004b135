"""Claims scoreboard: each criterion on both sides of its threshold, record and build."""
import json

import numpy as np
import pytest

from gpolib.lab import report
from gpolib.lab.report import NOT, NOT_RUN, PARTLY, REPRODUCED

# A passing evidence dict per claim; CASES below perturb one number at a time.
GOOD = {
    "G1": {"acc_before": 0.30, "acc_after": 0.36},
    "G2": {"k3_min": 0.0, "k3_rel_err": 0.01, "k3_var": 0.2, "k1_var": 1.0},
    "S1": {"slope": 0.02, "r2": 0.9, "seq_spread_slope": 0.001},
    "D1": {"entropy_high": [1.2, 1.1, 0.9], "entropy_base": [1.0, 1.0, 1.0], "pi_old_upclipped": 0.15},
    "D2": {"all_correct_first": 0.10, "all_correct_last": 0.25, "zero_var_groups_ds": 0, "gen_batches_per_step": 1.6},
    "D3": {"weight_ratio_seq_mean": 10.0, "weight_ratio_token_mean": 1.0},
    "D4": {"eq13_exact": True, "trunc_with_shaping": 0.02, "trunc_without_shaping": 0.08},
    "D5": {"ladder": {"grpo": [0.30, 0.32], "+clip": [0.35, 0.35], "+ds": [0.40, 0.42]}},
    "P1": {"seq_ratio_err": 1e-8, "token_eq_err_value": 0.0, "token_eq_err_grad": 1e-7, "one_token_err": 0.0},
    "P2": {"clip_gspo": [0.15, 0.17], "clip_grpo": [0.002, 0.003], "reward_gspo": [0.50, 0.52],
           "reward_grpo": [0.51, 0.53]},
    "P3": {"route_change_per_layer": [0.08, 0.12], "ratio_spread_moe": 0.3, "ratio_spread_dense": 0.1},
    "P4": {"reward_gspo": [0.5, 0.6], "reward_grpo_no_replay": [0.3, 0.4], "reward_grpo_replay": [0.5, 0.5]},
    "P5": {"reward_engine": [0.50, 0.54], "reward_recompute": [0.51, 0.53], "seq_mismatch": 0.01,
           "token_mismatch": 0.05},
    "F1": {"len_grpo": 100.0, "len_gfpo": 60.0, "acc_grpo": 0.50, "acc_gfpo": 0.48},
    "F2": {"reduction_k4_g16": 0.45, "reduction_k6_g8": 0.20},
    "R1": {"adv_err": 0.0, "weight_err": 1e-9},
    "R2": {"growth_grpo": [30.0, 20.0, 5.0], "growth_dr": [10.0, 5.0, 8.0]},
    "V1": {"mem_ppo": 2.0, "mem_grpo": 1.0, "time_ppo": 1.5, "time_grpo": 1.0},
    "V2": {"acc_vapo": [0.6, 0.6, 0.6], "acc_dapo": [0.5, 0.55, 0.6], "acc_grpo": [0.4, 0.4, 0.4]},
}

CASES = [  # (claim, changed evidence, expected verdict)
    ("G1", {"acc_after": 0.349}, PARTLY), ("G1", {"acc_after": 0.30}, NOT), ("G1", {"acc_after": 0.35}, REPRODUCED),
    ("G2", {"k3_rel_err": 0.021}, PARTLY), ("G2", {"k3_min": -1e-9, "k3_rel_err": 0.5}, NOT),
    ("S1", {"r2": 0.49}, PARTLY), ("S1", {"seq_spread_slope": 0.0021}, PARTLY), ("S1", {"slope": -0.01}, NOT),
    ("S1", {"seq_spread_slope": 0.002}, REPRODUCED),
    ("D1", {"entropy_high": [1.2, 0.9, 0.9]}, PARTLY), ("D1", {"entropy_high": [0.9, 0.9, 0.9]}, NOT),
    ("D1", {"entropy_high": [1.2, 1.1], "entropy_base": [1.0, 1.0]}, PARTLY),  # < 3 seeds
    ("D2", {"all_correct_last": 0.199}, PARTLY), ("D2", {"all_correct_last": 0.2, "zero_var_groups_ds": 1}, PARTLY),
    ("D2", {"all_correct_last": 0.1, "zero_var_groups_ds": 2}, NOT),
    ("D3", {"weight_ratio_seq_mean": 9.99}, NOT), ("D3", {"weight_ratio_token_mean": 1.01}, NOT),
    ("D4", {"trunc_with_shaping": 0.08}, NOT), ("D4", {"eq13_exact": False}, NOT),
    ("D5", {"ladder": {"a": [0.3], "b": [0.28], "c": [0.4]}}, PARTLY), ("D5", {"ladder": {"a": [0.3], "b": [0.2]}}, NOT),
    ("P1", {"token_eq_err_grad": 2e-6}, NOT),
    ("P2", {"clip_gspo": [0.02, 0.02]}, PARTLY), ("P2", {"reward_gspo": [0.30, 0.31]}, PARTLY),
    ("P2", {"clip_gspo": [0.002, 0.003], "reward_gspo": [0.1, 0.1]}, NOT),
    ("P3", {"route_change_per_layer": [0.005, 0.12]}, PARTLY),
    ("P3", {"route_change_per_layer": [0.005, 0.009], "ratio_spread_moe": 0.05}, NOT),
    ("P4", {"reward_gspo": [0.3, 0.38]}, PARTLY), ("P4", {"reward_gspo": [0.0, 0.01]}, NOT),
    ("P5", {"seq_mismatch": 0.06}, PARTLY), ("P5", {"reward_engine": [0.2, 0.21]}, PARTLY),
    ("P5", {"reward_engine": [0.2, 0.21], "seq_mismatch": 0.06}, NOT),
    ("F1", {"len_gfpo": 71.0}, PARTLY), ("F1", {"acc_gfpo": 0.46}, PARTLY), ("F1", {"len_gfpo": 101.0}, NOT),
    ("F1", {"len_gfpo": 70.0, "acc_gfpo": 0.47}, REPRODUCED), ("D2", {"all_correct_last": 0.2}, REPRODUCED),
    ("G2", {"k3_rel_err": 0.02}, REPRODUCED),
    ("F2", {"reduction_k4_g16": 0.20}, NOT),
    ("R1", {"adv_err": 1e-5}, NOT),
    ("R2", {"growth_dr": [10.0, 25.0, 8.0]}, PARTLY), ("R2", {"growth_dr": [40.0, 25.0, 8.0]}, NOT),
    ("V1", {"mem_grpo": 2.5}, PARTLY), ("V1", {"mem_grpo": 2.5, "time_grpo": 1.5}, NOT),
    ("V2", {"acc_vapo": [0.5, 0.5, 0.5]}, PARTLY), ("V2", {"acc_vapo": [0.3, 0.3, 0.3]}, NOT),
    ("V2", {"acc_vapo": [0.6, 0.6], "acc_dapo": [0.5, 0.5], "acc_grpo": [0.4, 0.4]}, PARTLY),  # < 3 seeds
]


def test_every_design_claim_is_registered():
    assert list(report.CLAIMS) == ["G1", "G2", "S1", "D1", "D2", "D3", "D4", "D5", "P1", "P2", "P3", "P4",
                                   "P5", "F1", "F2", "R1", "R2", "V1", "V2"]
    assert set(GOOD) == set(report.CLAIMS)
    for c in report.CLAIMS.values():
        assert set(c.evidence) <= set(GOOD[c.id]) and c.notebook[:2].isdigit()


@pytest.mark.parametrize("cid", list(GOOD))
def test_good_evidence_is_reproduced(cid):
    verdict, ours = report.judge(cid, GOOD[cid])
    assert verdict == REPRODUCED and ours


@pytest.mark.parametrize("cid,change,expected", CASES)
def test_threshold(cid, change, expected):
    assert report.judge(cid, {**GOOD[cid], **change})[0] == expected


def test_unknown_id_and_missing_keys_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown claim id 'Z9'"):
        report.record("Z9", {}, [], "smoke", root=tmp_path)
    with pytest.raises(ValueError, match="G1: evidence is missing acc_after"):
        report.record("G1", {"acc_before": 0.1}, [], "smoke", root=tmp_path)


def test_record_then_build(tmp_path, capsys):
    ev = {"acc_before": np.float32(0.25), "acc_after": np.array(0.5)}
    runs = [tmp_path / "reports/runs/01_grpo/grpo_s0", "reports/runs/01_grpo/grpo_s1"]
    rec = report.record("G1", ev, runs, "full", root=tmp_path)
    assert "G1 [full]: REPRODUCED" in capsys.readouterr().out
    assert rec["evidence"] == {"acc_before": 0.25, "acc_after": 0.5}
    assert json.loads((tmp_path / "reports/claims/G1.json").read_text())["verdict"] == REPRODUCED
    assert report.build("full", root=tmp_path) == ["claims.json", "claims.md"]
    assert report.build("full", root=tmp_path) == []  # same content: nothing rewritten
    rows = json.loads((tmp_path / "reports/claims.json").read_text())
    assert [r["id"] for r in rows] == list(report.CLAIMS)
    for r in rows:
        assert {"id", "verdict", "ours", "paper", "criterion", "notebook", "runs"} <= set(r)
    assert rows[0]["runs"] == ["reports/runs/01_grpo/grpo_s0", "reports/runs/01_grpo/grpo_s1"]
    assert {r["verdict"] for r in rows[1:]} == {NOT_RUN}
    md = (tmp_path / "reports/claims.md").read_text()
    assert md.count("\n| ") == 1 + len(report.CLAIMS) and "1/\\|o\\|" in md


def test_smoke_is_kept_apart(tmp_path):
    report.record("F2", GOOD["F2"], [], "smoke", root=tmp_path)
    report.build("smoke", root=tmp_path)
    assert (tmp_path / "reports/smoke/claims.json").exists()
    assert not (tmp_path / "reports/claims.json").exists()
    assert "not a replication" in (tmp_path / "reports/smoke/claims.md").read_text()
    assert "| F2 |" in report.scoreboard_markdown("smoke", root=tmp_path)
