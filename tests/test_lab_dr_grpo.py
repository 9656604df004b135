"""Dr. GRPO's two biases (Sec. 3.1) on hand-computed numbers: std scaling and the 1/|o_i| normaliser."""
import math

import pandas as pd
import pytest

from gpolib import LossConfig, presets
from gpolib.objectives import Clip
from gpolib.lab import dr_grpo as lb
from gpolib.lab import runs

GRPO = LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=0.2), aggregation="seq_mean_token_mean")
DR = LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=0.2), aggregation="seq_mean_token_sum_norm",
                max_len=128)


def test_hand_advantages_one_of_eight():
    # p = 1/8, unbiased std = sqrt(8/7 * 1/8 * 7/8) = sqrt(1/8)
    a_c, a_w = lb.binary_advantages(1, 8, "group")
    assert a_c == pytest.approx((7 / 8) / (math.sqrt(1 / 8) + 1e-4), abs=1e-12)
    assert a_w == pytest.approx((-1 / 8) / (math.sqrt(1 / 8) + 1e-4), abs=1e-12)
    assert lb.binary_advantages(1, 8, "none") == pytest.approx((0.875, -0.125))


def test_advantage_check_matches_group_advantages():
    df = lb.advantage_check(8, (1, 4, 7))
    assert len(df) == 6
    assert df["abs err"].max() < 1e-6
    # difficulty bias: 1/std up-weights the rare correct answer of a hard group (2.47 vs 0.875 unscaled)
    row = df[(df["correct"] == "1/8") & (df["scale"] == "group")].iloc[0]
    assert row["A correct"] == pytest.approx(2.4742, abs=1e-3)
    half = df[(df["correct"] == "4/8") & (df["scale"] == "none")].iloc[0]
    assert (half["A correct"], half["A incorrect"]) == pytest.approx((0.5, -0.5))


def test_token_weights_grpo_scale_with_inverse_length():
    w = lb.token_weights(GRPO, [10, 100], [1.0, 1.0])  # (2, 100)
    assert w.shape == (2, 100)
    assert float(w[0, 0]) == pytest.approx(-1.0 / (2 * 10))
    assert float(w[1, 0]) == pytest.approx(-1.0 / (2 * 100))
    assert float(w[0, 10:].abs().sum()) == 0.0  # padding gets no gradient
    assert float(w[0, 0] / w[1, 0]) == pytest.approx(10.0)


def test_token_weights_dr_grpo_independent_of_length():
    w = lb.token_weights(DR, [10, 100], [-0.5, -0.5])
    assert float(w[0, 0]) == pytest.approx(0.5 / (2 * 128))
    assert float(w[1, 99]) == pytest.approx(0.5 / (2 * 128))


def test_incorrect_long_answers_penalised_less_under_grpo():
    # negative advantage: per-token push-down of a 100-token wrong answer is 10x weaker than of a 10-token one
    w = lb.token_weights(GRPO, [10, 100], [-1.0, -1.0])
    assert float(w[0, 0]) == pytest.approx(10 * float(w[1, 0]))
    assert float(w[1, 0]) == pytest.approx(1.0 / 200)


def test_weight_check_zero_error_and_hand_weight():
    lengths, rewards = [10, 100, 10, 100], [1, 1, 0, 0]
    adv = {"grpo": [0.866, 0.866, -0.866, -0.866], "dr_grpo": [0.5, 0.5, -0.5, -0.5]}
    df = lb.weight_check({"grpo": GRPO, "dr_grpo": DR}, lengths, rewards, adv)
    assert len(df) == 8 and df["abs err"].max() < 1e-12
    assert lb.hand_weight(GRPO, 100, -0.866, 4) == pytest.approx(0.866 / 400)
    assert lb.hand_weight(DR, 10, 0.5, 4) == pytest.approx(-0.5 / 512)
    with pytest.raises(ValueError, match="aggregation"):
        lb.hand_weight(LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=0.2), aggregation="token_mean"), 10, 1.0, 1)


def test_presets_use_the_two_objectives():
    assert presets.get("grpo").adv_scale == "group" and presets.get("dr_grpo").adv_scale == "none"
    dr = presets.get("dr_grpo").loss
    assert lb.hand_weight(dr, 5, 1.0, 1) == pytest.approx(-1.0 / presets.get("dr_grpo").max_new_tokens)


def test_growth_windows_skip_none():
    m = [{"len/incorrect": v} for v in (10, 20, None, 30, 40, 50, 60, 70, 80, 90)]
    assert lb.growth(m) == pytest.approx(85 - 15)  # windows of 2 steps
    m[0]["len/incorrect"] = None
    assert lb.growth(m) == pytest.approx(85 - 20)
    assert lb.growth(m, frac=0.5) == pytest.approx(70 - 30)  # first 5: (20+30+40)/3, last 5: (50..90)/5


def test_growth_short_runs_and_empty_windows():
    m = [{"len/incorrect": 12.0}, {"len/incorrect": 30.0}, {"len/incorrect": 18.0}]
    assert lb.growth(m) == pytest.approx(6.0)  # windows of 1 step
    assert math.isnan(lb.growth([{"len/incorrect": None}, {"len/incorrect": 5.0}]))


def test_growth_table_and_eval_table():
    by_run = {"grpo/seed0": [{"len/incorrect": 10.0, "acc/mean": 0.5}, {"len/incorrect": 14.0, "acc/mean": 0.75}]}
    t = lb.growth_table(by_run, keys=("len/incorrect", "acc/mean"))
    assert t.loc["grpo/seed0"].tolist() == pytest.approx([4.0, 0.25])
    s = {"eval_start": {"acc/sample": 0.5, "len/mean": 20.0}, "eval_end": {"acc/sample": 0.6, "len/mean": 25.0}}
    e = runs.eval_table({"grpo/seed0": s}, keys=("acc/sample", "len/mean"))
    assert e.loc["grpo/seed0", ("len/mean", "end")] == 25.0
    assert e.loc["grpo/seed0", ("acc/sample", "start")] == 0.5


T975_2 = 4.302652729911275  # t quantile 0.975, 2 df


def test_growth_intervals_one_sample_and_paired():
    g = pd.DataFrame({"len/incorrect": {"grpo/seed0": 10.0, "grpo/seed1": 14.0, "grpo/seed2": 12.0,
                                        "dr_grpo/seed0": 1.0, "dr_grpo/seed1": 3.0, "dr_grpo/seed2": 2.0}})
    t = lb.growth_intervals(g, range(3))
    half = T975_2 * 2.0 / 3 ** 0.5  # GRPO: mean 12, sd 2
    assert t.loc["grpo", "mean"] == 12.0 and t.loc["grpo", "95% lo"] == pytest.approx(12 - half)
    # differences 9, 11, 10: mean 10, sd 1
    assert t.loc["grpo - dr_grpo", "mean"] == 10.0
    assert t.loc["grpo - dr_grpo", "95% hi"] == pytest.approx(10 + T975_2 / 3 ** 0.5)
    assert t.loc["dr_grpo", "n"] == 3


def test_token_efficiency_and_end_comparison():
    assert lb.token_efficiency({"acc/sample": 0.5, "len/mean": 125.0}) == pytest.approx(4.0)
    ev = lambda acc, length: {"acc/sample": acc, "len/mean": length}
    s = {f"grpo/seed{i}": {"eval_start": ev(0.4, 80.0), "eval_end": ev(a, 100.0)} for i, a in enumerate((0.5, 0.6))}
    s |= {f"dr_grpo/seed{i}": {"eval_start": ev(0.4, 80.0), "eval_end": ev(a, 80.0)} for i, a in enumerate((0.52, 0.6))}
    t = lb.end_comparison(s, range(2), keys=("acc/sample", "len/mean", "token efficiency"))
    assert t.loc["acc/sample", "Dr - GRPO mean"] == pytest.approx(0.01)
    assert t.loc["len/mean", "GRPO change"] == 20.0 and t.loc["len/mean", "Dr. GRPO change"] == 0.0
    # token efficiency per seed: GRPO 5.0, 6.0; Dr. GRPO 6.5, 7.5 -> differences 1.5, 1.5 (sd 0)
    assert t.loc["token efficiency", "GRPO"] == pytest.approx(5.5)
    assert t.loc["token efficiency", "Dr - GRPO mean"] == pytest.approx(1.5)
    assert t.loc["token efficiency", "Dr - GRPO 95% lo"] == pytest.approx(1.5)


def test_r2_statement_no_stronger_than_the_verdict():
    from gpolib.lab import stats

    up = lb.verdict_r2({"growth_grpo": [10.0, 14.0, 12.0], "growth_dr": [1.0, 3.0, 2.0]})
    assert up.word == "reproduced"
    assert lb.r2_statement(up).startswith("In our runs GRPO grew its incorrect answers longer")
    assert "grew more under GRPO than under Dr. GRPO" in lb.r2_statement(up)
    noisy = lb.verdict_r2({"growth_grpo": [10.0, -8.0, 4.0], "growth_dr": [1.0, 3.0, 2.0]})
    assert noisy.parts[0].word == stats.INCONCLUSIVE and "do not establish" in lb.r2_statement(noisy)
    down = lb.verdict_r2({"growth_grpo": [-3.0, -2.5, -2.0], "growth_dr": [1.0, 1.0, 2.0]})
    s = lb.r2_statement(down)
    assert s.startswith("Our runs do not show GRPO growing") and "did not grow more" in s
    assert lb.r2_statement(stats.for_profile(up, "smoke")).startswith("Smoke run: no statement")
