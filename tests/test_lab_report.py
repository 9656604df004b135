"""Claims scoreboard: each criterion on both sides of its threshold, record and build."""
import json

import numpy as np
import pytest

from gpolib.lab import gfpo, grpo, report, stats
from gpolib.lab.report import NOT, NOT_RUN, PARTLY, REPRODUCED

LEN = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]  # S1: mean length of six buckets
BALANCED = {"uniform_share": 0.0156, "expert_share_min": [0.010, 0.012]}  # x 64 experts: 0.64, 0.77 of uniform
DEAD = {"uniform_share": 0.0156, "expert_share_min": [0.0, 0.012]}  # one layer with an expert never routed
CELL = {"cell": "c", "collapsed": False}

# A passing evidence dict per claim; CASES below perturb one number at a time.
GOOD = {  # F2 shares F1's evidence (below)
    # training claims: three seeds, paired by position (rules of evidence, gpolib/lab/stats.py)
    "G1": {"acc_before": [0.30, 0.30, 0.30], "acc_after": [0.36, 0.37, 0.35], "greedy_before": [0.3, 0.3, 0.3],
           "greedy_after": [0.4, 0.4, 0.4], "len_before": [97.0, 98.0, 96.0], "len_after": [120.0, 125.0, 121.0]},
    "G2": {"k3_min": 0.0, "k3_rel_err": 0.01, "k3_var": 0.2, "k1_var": 1.0},
    "S1": {"bucket_len": LEN, "var_log_prod_rho": [0.01, 0.03, 0.02, 0.05, 0.04, 0.06], "var_log_s": [0.01] * 6,
           "bucket_n": [60] * 6},
    "D1": {"entropy_high": [1.2, 1.1, 1.15], "entropy_base": [1.0, 1.0, 1.0], "acc_high": [0.50, 0.51, 0.50],
           "acc_base": [0.5] * 3, "pi_old_upclipped": [0.15, 0.10, 0.12], "base_entropy": 1.0},
    "D2": {"all_correct_first": [0.10, 0.12, 0.10], "all_correct_last": [0.30, 0.28, 0.35], "ds_clean_steps": [1.0] * 3,
           "gen_batches_per_step": [1.5, 1.6, 1.4], "panel_rise": [0.05, 0.04, 0.06], "panel_first": [0.1] * 3,
           "panel_last": [0.15] * 3, "panel_acc_rise": [0.05] * 3, "panel_predicted_rise": [0.04] * 3,
           "panel_steps": [0, 50, 100]},
    "D3": {"weight_ratio_seq_mean": 10.0, "weight_ratio_token_mean": 1.0},
    "D4": {"eq13_exact": True, "trunc_base": [0.05] * 3, "trunc_with_shaping": [0.02, 0.03, 0.02],
           "trunc_without_shaping": [0.08, 0.09, 0.07]},
    "D5": {"ladder": {"grpo": [0.30, 0.32, 0.31], "clip_higher": [0.33, 0.33, 0.34], "overlong": [0.35, 0.34, 0.36],
                      "token_mean": [0.36, 0.36, 0.37], "dapo": [0.40, 0.42, 0.41]}},
    "P1": {"seq_ratio_err": 1e-8, "token_eq_err_value": 0.0, "token_eq_err_grad": 1e-7, "one_token_err": 0.0},
    "P2": {"clip_gspo": [0.15, 0.16, 0.17], "clip_grpo": [0.002, 0.003, 0.002], "acc_gspo": [0.50, 0.51, 0.52],
           "acc_grpo": [0.51, 0.51, 0.51], "reward_gspo": [0.5] * 3, "reward_grpo": [0.5] * 3},
    "P3": {"expert_change_runs": [0.05, 0.06, 0.07], "expert_change_per_layer": [0.05, 0.07],
           "expert_change_frozen": [0.01, 0.02], "expert_change_coarse": [0.004, 0.006], "moe_experts": 64,
           "routing": BALANCED, "grid": [{"cell": "LoRA + router, lr x5, mu 4", "run_mean": 0.06, "deepest": 0.08,
                                          "collapsed": False}]},
    "P4": {"acc_grpo": [0.40, 0.42, 0.41], "acc_grpo_replay": [0.50, 0.51, 0.52], "acc_gspo": [0.51, 0.50, 0.52],
           "reward_grpo": [0.4] * 3, "reward_grpo_replay": [0.5] * 3, "reward_gspo": [0.5] * 3,
           "collapsed_grpo": [True, False, False], "collapsed_grpo_replay": [False] * 3, "collapsed_gspo": [False] * 3,
           "expert_change": 0.05, "routing": BALANCED},
    "P5": {"acc_engine": [0.50, 0.51, 0.52], "acc_recompute": [0.51, 0.51, 0.51], "reward_engine": [0.5] * 3,
           "reward_recompute": [0.5] * 3, "seq_mismatch": 0.01, "token_mismatch": 0.05, "seq_clipped": 0.9},
    "F1": {"len_base": [80.0] * 3, "len_grpo": [100.0, 101.0, 99.0], "len_gfpo": [60.0, 62.0, 61.0],
           "acc_grpo": [0.5] * 3, "acc_gfpo": [0.49, 0.50, 0.51], "acc_k4_g24": [0.50, 0.51, 0.50],
           "elr": {"gfpo-k4-g24-short": [0.55, 0.60, 0.58], "gfpo-k4-g8-short": [0.20, 0.25, 0.22],
                   "gfpo-k8-g16-short": [0.30, 0.28, 0.31]}},
    "R1": {"adv_err": 0.0, "weight_err": 1e-9},
    "R2": {"growth_grpo": [30.0, 20.0, 25.0], "growth_dr": [10.0, 5.0, 8.0]},
    "V1": {"mem_ppo": 2.0, "mem_grpo": 1.0, "time_ppo": 1.5, "time_grpo": 1.0},
    "V2": {"acc_vapo": [0.6, 0.6, 0.6], "acc_dapo": [0.55, 0.56, 0.57], "acc_grpo": [0.4, 0.4, 0.4]},
    "C1": {"acc_cispo": [0.55, 0.56, 0.57], "acc_dapo": [0.50, 0.50, 0.51], "clip_share_dapo": [0.002] * 3,
           "clip_share_cispo": [0.0001] * 3},
    "C2": {"range_grpo": [0.30, 0.32, 0.31], "range_gmpo": [0.20, 0.21, 0.20], "acc_grpo": [0.50] * 3,
           "acc_gmpo": [0.50, 0.51, 0.49], "log_std_grpo": [0.02] * 3, "log_std_gmpo": [0.01] * 3},
    "C3": {"acc_fp32": [0.50, 0.51, 0.50], "acc_w8a8": [0.40, 0.41, 0.42], "acc_tis": [0.50, 0.50, 0.51],
           "kl_w8a8": [1.2e-4, 0.9e-4, 1.3e-4], "kl_bf16": [6e-5, 8e-5, 7e-5], "max_log_ratio_w8a8": [0.7, 0.6, 0.7],
           "max_log_ratio_bf16": [0.3, 0.9, 0.4], "run_kl_w8a8": [1e-4] * 3, "run_kl_tis": [1e-4] * 3,
           "run_capped_tis": [1e-4] * 3},
    "C4": {"rloo_err": 2e-8},
    "C5": {"acc_sapo": [0.55, 0.56, 0.55], "acc_gspo": [0.50, 0.50, 0.51], "acc_grpo": [0.54, 0.55, 0.55],
           "zeroed_sapo": [0.0, 0.0, 0.0]},
    "C6": {"len_luspo": [110.0, 112.0, 111.0], "len_gspo": [90.0, 91.0, 92.0], "len_grpo": [100.0, 101.0, 102.0],
           "acc_luspo": [0.50, 0.51, 0.50], "acc_gspo": [0.50, 0.50, 0.50]},
    "C7": {"acc_top_entropy": [0.55, 0.55, 0.56], "acc_grpo": [0.55, 0.55, 0.55]},
}

GOOD["F2"] = GOOD["F1"]
I, NT = stats.INCONCLUSIVE, stats.NOT_TESTED

CASES = [  # (claim, changed evidence, expected verdict)
    ("G1", {"acc_after": [0.34, 0.35, 0.33]}, I),  # interval above 0, mean 4 points < 5, upper end above 5
    ("G1", {"acc_after": [0.32, 0.325, 0.33]}, NOT),  # interval [+0.013, +0.037]: below the claimed 5 points
    ("G1", {"acc_after": [0.30, 0.29, 0.30]}, NOT),  # interval below 0
    ("G1", {"acc_before": [0.3, 0.3], "acc_after": [0.36, 0.37]}, I),  # < 3 seeds
    ("G2", {"k3_rel_err": 0.021}, PARTLY), ("G2", {"k3_min": -1e-9, "k3_rel_err": 0.5}, NOT),
    ("D1", {"entropy_high": [1.2, 0.9, 0.95]}, I),  # entropy inconclusive; the accuracy guard never earns partly
    ("D1", {"entropy_high": [0.9, 0.9, 0.9]}, NOT),  # entropy lower (not reproduced), accuracy holds: a guard
    ("D1", {"entropy_high": [1.01, 0.99, 1.0]}, NOT),  # 90% interval within +-0.1 (10% of the base's 1.0): equivalent
    ("D1", {"entropy_high": [0.9, 0.9, 0.9], "acc_high": [0.40, 0.41, 0.42]}, NOT),  # both refuted
    ("D1", {"acc_high": [0.40, 0.41, 0.42]}, PARTLY),  # accuracy worse, entropy higher
    ("D1", {k: v[:2] for k, v in GOOD["D1"].items() if isinstance(v, list)}, I),  # < 3 seeds
    ("D2", {"panel_rise": [0.05, -0.02, 0.01]}, I),  # rise inconclusive; dynamic sampling is a check, not a part
    ("D2", {"panel_rise": [0.01, -0.01, 0.0]}, NOT),  # 90% interval within +-0.03: equivalent
    ("D2", {"ds_clean_steps": [1.0, 0.95, 1.0]}, NOT),  # the check failed: a step trained a zero-variance group
    ("D3", {"weight_ratio_seq_mean": 9.99}, NOT), ("D3", {"weight_ratio_token_mean": 1.01}, NOT),
    ("D4", {"trunc_with_shaping": [0.08, 0.09, 0.07]}, NOT),  # no difference at all: equivalent within +-0.03
    ("D4", {"eq13_exact": False}, NOT),  # the check failed
    ("D4", {"trunc_with_shaping": [0.08, 0.09, 0.07], "eq13_exact": False}, NOT),
    ("D4", {"trunc_with_shaping": [0.07, 0.10, 0.06]}, NOT),  # mean +0.003, 90% [-0.016, +0.023]: equivalent
    ("D4", {"trunc_with_shaping": [0.02, 0.13, 0.01]}, I),  # spans 0, 90% interval wider than +-0.03
    ("D4", {"trunc_base": [0.02] * 3}, NOT),  # premise: the base truncates < 3%
    ("D5", {"ladder": {"grpo": [0.30, 0.32, 0.31], "clip_higher": [0.31, 0.31, 0.32], "overlong": [0.31, 0.32, 0.31],
                       "token_mean": [0.31, 0.32, 0.32], "dapo": [0.33, 0.31, 0.32]}}, PARTLY),  # gain spans 0
    ("D5", {"ladder": {k: v[:2] for k, v in GOOD["D5"]["ladder"].items()}}, PARTLY),  # < 3 seeds: gain inconclusive
    ("D5", {"ladder": {**GOOD["D5"]["ladder"], "overlong": [0.25, 0.26, 0.25]}}, PARTLY),  # one rung loses
    ("D5", {"ladder": {**GOOD["D5"]["ladder"], "dapo": [0.29, 0.30, 0.29]}}, NOT),
    ("P1", {"token_eq_err_grad": 2e-6}, NOT),
    ("P2", {"clip_gspo": [0.15, 0.02, 0.17]}, PARTLY),  # ratio 6.7 in one seed; accuracy holds
    ("P2", {"acc_gspo": [0.46, 0.49, 0.50]}, PARTLY),  # accuracy inconclusive
    ("P2", {"acc_gspo": [0.40, 0.41, 0.42], "clip_gspo": [0.15, 0.02, 0.17]}, NOT),
    ("P3", {"grid": [{**CELL, "run_mean": 0.03, "deepest": 0.06}]}, PARTLY),  # only the deepest layer reaches 5%
    ("P3", {"grid": [{**CELL, "run_mean": 0.03, "deepest": 0.04}]}, NOT),
    ("P3", {"grid": [{**CELL, "run_mean": 0.09, "deepest": 0.2, "collapsed": True},
                     {**CELL, "run_mean": 0.01, "deepest": 0.02}]}, NOT),  # the collapsing cell does not count
    ("P3", {"grid": [{**CELL, "run_mean": 0.03, "deepest": 0.04}, {**CELL, "run_mean": 0.05, "deepest": 0.05}]},
     REPRODUCED),
    ("P3", {"moe_experts": 8}, NT),  # the 8-expert MoE: not the criterion's model
    ("P3", {"routing": DEAD}, NT),  # premise: not load-balanced
    ("P3", {"routing": None}, NT),  # premise unmeasured
    ("P3", {"grid": None}, stats.NOT_RUN),
    ("P4", {"acc_grpo": [0.47, 0.51, 0.51]}, PARTLY),  # replay ahead inconclusive, GSPO not worse
    ("P4", {"acc_grpo": [0.55, 0.56, 0.57], "acc_gspo": [0.40, 0.41, 0.42]}, NOT),
    ("P4", {"expert_change": 0.0064}, NT),  # routing hardly changes: the condition did not occur
    ("P4", {"routing": DEAD}, NT),  # P3's premise, P4's condition too
    ("P5", {"acc_engine": [0.46, 0.49, 0.50]}, I),  # accuracy inconclusive; the mismatch is a check, not a part
    ("P5", {"seq_mismatch": 0.06}, NOT),  # the check failed: sequence-level mismatch above token-level
    ("P5", {"acc_engine": [0.50, 0.51], "acc_recompute": [0.51, 0.51]}, I),  # < 3 seeds
    ("F1", {"elr": {"gfpo-k4-g24-short": [0.30, 0.32, 0.31]}}, PARTLY),  # ELR below 0.46, accuracy holds
    ("F1", {"acc_k4_g24": [0.40, 0.41, 0.42]}, PARTLY),  # accuracy worse
    ("F1", {"len_grpo": [75.0, 76.0, 74.0]}, NOT),  # premise: GRPO shortens answers
    ("F1", {"len_grpo": [70.0, 90.0, 95.0]}, I),  # premise spans 0
    ("F1", {"elr": {"gfpo-k8-g16-short": [0.3, 0.3, 0.3]}}, stats.NOT_RUN),  # no 4/24 arm: the premise alone
    ("F2", {"elr": {**GOOD["F1"]["elr"], "gfpo-k4-g8-short": [0.6, 0.4, 0.7]}}, I),
    ("F2", {"elr": {"gfpo-k8-g16-short": [0.3, 0.3, 0.3]}}, stats.NOT_RUN),
    ("D2", {"gen_batches_per_step": [3.0] * 3}, REPRODUCED),  # reported, not judged
    ("G2", {"k3_rel_err": 0.02}, REPRODUCED),
    ("R1", {"adv_err": 1e-5}, NOT),
    ("R2", {"growth_dr": [10.0, 25.0, 8.0]}, PARTLY),  # GRPO grows; more than Dr. GRPO inconclusive
    ("R2", {"growth_dr": [40.0, 25.0, 38.0]}, PARTLY),  # only one half holds
    ("R2", {"growth_grpo": [-0.75, -5.28, -1.41], "growth_dr": [-4.46, -5.75, -0.09]}, I),  # neither half settles
    ("V1", {"mem_grpo": 2.5}, PARTLY), ("V1", {"time_grpo": 1.45}, PARTLY),
    ("V1", {"mem_grpo": 2.5, "time_grpo": 1.45}, NOT),  # both ratios must reach 1.05
    ("V1", {"mem_grpo": 1.9, "time_grpo": 1.42}, REPRODUCED),
    ("V2", {"acc_vapo": [0.54, 0.56, 0.55]}, PARTLY),  # VAPO - DAPO inconclusive, VAPO > GRPO holds
    ("V2", {"acc_vapo": [0.3, 0.3, 0.3]}, NOT),
    ("V2", {"acc_vapo": [0.6, 0.6], "acc_dapo": [0.5, 0.5], "acc_grpo": [0.4, 0.4]}, I),  # < 3 seeds
    ("C1", {"acc_cispo": [0.48, 0.53, 0.52]}, I),  # mean +0.007, interval spans 0
    ("C1", {"acc_cispo": [0.45, 0.46, 0.45]}, NOT),
    ("C2", {"range_gmpo": [0.40, 0.41, 0.40]}, PARTLY),  # GMPO's range wider, accuracy not worse
    ("C2", {"acc_gmpo": [0.40, 0.41, 0.42]}, PARTLY),  # narrower, but less accurate
    ("C2", {"range_gmpo": [0.40, 0.41, 0.40], "acc_gmpo": [0.40, 0.41, 0.42]}, NOT),
    ("C3", {"kl_w8a8": [5e-5, 6e-5, 7e-5]}, NT),  # the 8-bit engine no further off than bf16: not tested
    ("C3", {"acc_w8a8": [0.50, 0.51, 0.50]}, PARTLY),  # TIS not worse than fp32, no better than no correction
    ("C3", {"acc_tis": [0.40, 0.40, 0.41]}, NOT),  # TIS worse than fp32, no better than without
    ("C4", {"rloo_err": 2e-6}, NOT),
    ("C5", {"acc_sapo": [0.50, 0.50, 0.51]}, NOT),  # SAPO no better than GSPO (equivalent), worse than GRPO
    ("C5", {"acc_gspo": [0.56, 0.57, 0.55]}, PARTLY),  # not above GSPO, not worse than GRPO
    ("C5", {"zeroed_sapo": [0.0, 1e-4, 0.0]}, NOT),  # the gate zeroed some gradient: a failed check
    ("C6", {"len_gspo": [101.0, 102.0, 103.0]}, NT),  # GSPO no shorter than GRPO: the condition did not occur
    ("C6", {"acc_luspo": [0.40, 0.41, 0.40]}, PARTLY),  # longer, but less accurate
    ("C7", {"acc_top_entropy": [0.45, 0.46, 0.45]}, NOT),
]


def test_s1_and_d2_say_what_is_not_yet_run():
    s1 = report.judge("S1", GOOD["S1"])
    assert s1.word == stats.NOT_RUN and "0.99^200 = 0.134" in s1.text and "confounded by the advantage" in s1.text
    d2 = report.judge("D2", {k: v for k, v in GOOD["D2"].items() if k != "panel_rise"})
    assert d2.word == stats.NOT_RUN and "check: share of dynamic-sampling steps" in d2.text
    assert "not an independent prediction" in report.judge("D2", {**GOOD["D2"], **{
        "panel_first": [0.1] * 3, "panel_last": [0.15] * 3, "panel_acc_rise": [0.05] * 3,
        "panel_predicted_rise": [0.04] * 3, "panel_steps": [0, 50, 100]}}).text


def test_criterion_history_is_recorded_for_good(tmp_path, capsys):
    """A claim whose criterion changed after its data carries its history and ends its text with one sentence; one
    that never changed carries an empty history (DESIGN, "Criterion history")."""
    rec = report.record("F1", GOOD["F1"], [], "full", root=tmp_path)
    assert rec["criterion_history"] and rec["criterion_history"][0]["commit"] == "8ae88b8f4d"
    assert rec["ours"].endswith("each with the verdict it gave in criterion_history).")
    assert "criterion changed after its data were seen" in rec["ours"].lower().replace("its criterion", "criterion")
    plain = report.record("C4", GOOD["C4"], [], "full", root=tmp_path)
    assert plain["criterion_history"] == [] and "criterion_history)" not in plain["ours"]
    for cid in ("S1", "D2", "P3", "P4", "F1", "F2"):  # DESIGN names these
        assert report.history.of(cid), cid


def test_family_claims_are_judged_by_notebook_09():
    for cid in ("C1", "C2", "C3", "C4"):
        assert report.CLAIMS[cid].notebook == "09_beyond" and report.judge(cid, GOOD[cid]).word == REPRODUCED
    c3 = report.judge("C3", {**GOOD["C3"], "kl_w8a8": [5e-5, 6e-5, 7e-5]})
    assert "condition not met" in c3.text and "W8A8 engine / bf16 engine" in c3.text and "0.86 < 1.00" in c3.text


def test_every_design_claim_is_registered():
    assert list(report.CLAIMS) == ["G1", "G2", "S1", "D1", "D2", "D3", "D4", "D5", "P1", "P2", "P3", "P4",
                                   "P5", "F1", "F2", "R1", "R2", "V1", "V2", "C1", "C2", "C3", "C4", "C5", "C6",
                                   "C7"]
    assert set(GOOD) == set(report.CLAIMS)
    # C5-C7 (notebook 10): "not yet run" while their runs are absent (the committed records stay as they are)
    assert {report.judge(c, {k: [] for k in report.CLAIMS[c].evidence}).word for c in ("C5", "C6", "C7")} == {NOT_RUN}
    for c in (c for c in report.CLAIMS.values() if c.id in GOOD):
        assert set(c.evidence) <= set(GOOD.get(c.id, {})) and c.notebook[:2].isdigit()


@pytest.mark.parametrize("cid", [c for c in GOOD if c != "S1"])
def test_good_evidence_is_reproduced(cid):
    v = report.judge(cid, GOOD[cid])
    assert v.word == REPRODUCED and v.text and v.criterion == report.CLAIMS[cid].criterion


@pytest.mark.parametrize("cid,change,expected", CASES)
def test_threshold(cid, change, expected):
    assert report.judge(cid, {**GOOD[cid], **change}).word == expected


def test_unknown_id_and_missing_keys_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown claim id 'Z9'"):
        report.record("Z9", {}, [], "smoke", root=tmp_path)
    with pytest.raises(ValueError, match="G1: evidence is missing acc_after, greedy_before, greedy_after"):
        report.record("G1", {"acc_before": [0.1]}, [], "smoke", root=tmp_path)


def test_record_then_build(tmp_path, capsys):
    ev = {**GOOD["G1"], "acc_before": np.full(3, 0.25, dtype=np.float32), "acc_after": np.array([0.5, 0.5, 0.5])}
    runs = [tmp_path / "reports/runs/01_grpo/grpo_s0", "reports/runs/01_grpo/grpo_s1"]
    rec = report.record("G1", ev, runs, "full", root=tmp_path)
    out = capsys.readouterr().out
    assert "G1 [full]: REPRODUCED — " in out and f"\n  criterion: {grpo.G1_RULE.criterion}" in out
    assert "held-out length 97.0 -> 122.0 tokens" in out  # G1 records the length before and after (seed means)
    assert rec["evidence"]["acc_before"] == [0.25] * 3 and rec["criterion"] == grpo.G1_RULE.criterion
    assert rec["judgement"]["interval"] == [pytest.approx(0.25), pytest.approx(0.25)] and rec["judgement"]["n"] == 3
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


def test_a_rerun_with_the_same_result_leaves_the_record_alone(tmp_path):
    """Only the timestamp would differ: the file (and so claims.json) is not rewritten; a new number is."""
    f = tmp_path / "reports/claims/G1.json"
    report.record("G1", GOOD["G1"], [], "full", root=tmp_path)
    f.write_text(f.read_text().replace(json.loads(f.read_text())["timestamp"], "2000-01-01T00:00:00+00:00"))
    report.build("full", root=tmp_path)
    report.record("G1", GOOD["G1"], [], "full", root=tmp_path)
    assert json.loads(f.read_text())["timestamp"] == "2000-01-01T00:00:00+00:00"
    assert report.build("full", root=tmp_path) == []
    report.record("G1", {**GOOD["G1"], "acc_after": [0.9, 0.9, 0.9]}, [], "full", root=tmp_path)
    assert json.loads(f.read_text())["timestamp"] != "2000-01-01T00:00:00+00:00"
    assert report.build("full", root=tmp_path) == ["claims.json", "claims.md"]


def test_smoke_is_kept_apart(tmp_path):
    report.record("F2", GOOD["F2"], [], "smoke", root=tmp_path)
    report.build("smoke", root=tmp_path)
    assert (tmp_path / "reports/smoke/claims.json").exists()
    assert not (tmp_path / "reports/claims.json").exists()
    assert "not a replication" in (tmp_path / "reports/smoke/claims.md").read_text()
    assert "| F2 |" in report.scoreboard_markdown("smoke", root=tmp_path)


def test_training_criteria_come_from_their_rules():
    assert report.CLAIMS["F1"].criterion == gfpo.F1_RULE.criterion
    assert "premise: GRPO's held-out length" in report.CLAIMS["F1"].criterion
    assert report.CLAIMS["G2"].criterion.startswith("on a small vocab")  # an exact check keeps claims.yaml's


def test_smoke_records_no_verdict_and_nan_gets_its_reason(tmp_path, capsys):
    ev = {**GOOD["F1"], "elr": {"gfpo-k8-g16-short": [float("nan"), 0.5, 0.4]}}
    rec = report.record("F1", ev, [], "smoke", root=tmp_path, why={"elr": gfpo.ELR_WHY})
    assert capsys.readouterr().out.startswith("F1 [smoke]: smoke: no verdict — ")
    assert rec["verdict"] == stats.SMOKE and rec["criterion"] == gfpo.F1_RULE.criterion
    assert rec["evidence"]["elr"] == {"gfpo-k8-g16-short": [None, 0.5, 0.4],
                                      "gfpo-k8-g16-short_why": f"null at [0]: {gfpo.ELR_WHY}"}
    text = (tmp_path / "reports/smoke/claims/F1.json").read_text()
    assert "NaN" not in text.replace(gfpo.ELR_WHY, "")
