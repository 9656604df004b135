"""GFPO filter (Sec. 3, Eq. 3), length reduction and ELR (Eq. 4) on hand-made numbers."""
import math

import pandas as pd
import pytest

from gpolib.lab import gfpo as fc

REWARDS = [1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]
LENGTHS = [40, 25, 12, 60, 30, 18, 33, 50]


def test_shortest_four_of_eight():
    t = fc.filter_demo(REWARDS, LENGTHS, 4, "length")
    assert t["kept"].tolist() == [False, True, True, False, True, True, False, False]  # lengths 25, 12, 30, 18
    # kept rewards 1, 0, 0, 1: mean 0.5, unbiased std sqrt(1/3)
    a = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    assert t["A"].tolist() == pytest.approx([0, a, -a, 0, -a, a, 0, 0], abs=1e-6)
    assert t["A (hand)"].tolist() == pytest.approx(t["A"].tolist(), abs=1e-6)


def test_efficiency_keeps_short_correct_answers():
    t = fc.filter_demo(REWARDS, LENGTHS, 4, "efficiency")
    assert t["kept"].tolist() == [True, True, False, False, False, True, True, False]  # 1/40, 1/25, 1/18, 1/33
    assert t["A"].abs().max() == 0.0  # all kept are correct: zero variance, no signal


def test_hand_advantages_zero_outside_the_kept_set():
    assert fc.filtered_advantages_by_hand([1.0, 0.0, 3.0], [True, True, False]) == pytest.approx(
        [0.5 / (math.sqrt(0.5) + 1e-4), -0.5 / (math.sqrt(0.5) + 1e-4), 0.0])


def test_length_reduction_and_elr():
    assert fc.length_reduction(70.0, 100.0) == pytest.approx(0.3)
    assert fc.length_reduction(120.0, 100.0) == pytest.approx(-0.2)
    # base 60 -> GRPO 100: excess 40; GFPO at 70 removes 30 of it
    assert fc.elr(100.0, 70.0, 60.0) == pytest.approx(0.75)
    assert fc.elr(100.0, 50.0, 60.0) == pytest.approx(1.25)
    assert math.isnan(fc.elr(60.0, 50.0, 60.0)) and math.isnan(fc.elr(50.0, 40.0, 60.0))  # GRPO not longer than base


def test_variant_table():
    s = {"grpo": {"eval_start": {"len/mean": 60.0, "acc/sample": 0.4},
                  "eval_end": {"len/mean": 100.0, "acc/sample": 0.6}},
         "gfpo": {"eval_start": {"len/mean": 61.0, "acc/sample": 0.4},
                  "eval_end": {"len/mean": 70.0, "acc/sample": 0.58}}}
    t = fc.variant_table(s)
    assert t.loc["grpo", "reduction"] == 0.0 and t.loc["grpo", "ELR"] == 0.0
    assert t.loc["gfpo", "reduction"] == pytest.approx(0.3)
    assert t.loc["gfpo", "ELR"] == pytest.approx(0.75)
    assert t.loc["gfpo", "acc - acc GRPO"] == pytest.approx(-0.02)


# ---------------------------------------------------------------- beside the verdicts

T975_2 = 4.302652729911275  # t quantile 0.975, 2 df


def _summaries(acc: dict, length: dict, base: float = 60.0) -> dict:
    """Fake summaries for every arm and 3 seeds: end accuracy / length per arm (lists over seeds)."""
    out = {}
    for arm in fc.ARMS:
        for s in range(3):
            out[f"{arm}/seed{s}"] = {"eval_start": {"len/mean": base, "acc/sample": 0.4},
                                     "eval_end": {"len/mean": length.get(arm, [100.0] * 3)[s],
                                                  "acc/sample": acc.get(arm, [0.6] * 3)[s]}}
    return out


def test_accuracy_vs_grpo_paired_interval():
    s = _summaries({"grpo": [0.5, 0.6, 0.7], "gfpo-k8-g16-short": [0.52, 0.58, 0.73]}, {})
    t = fc.accuracy_vs_grpo(s, range(3))
    assert list(t.index) == [a for a in fc.ARMS if a != "grpo"]
    row = t.loc["gfpo-k8-g16-short"]
    # differences +0.02, -0.02, +0.03: mean 0.01, sd sqrt(0.0007)
    half = T975_2 * 0.0007 ** 0.5 / 3 ** 0.5
    assert row["diff mean"] == pytest.approx(0.01)
    assert (row["diff 95% lo"], row["diff 95% hi"]) == pytest.approx((0.01 - half, 0.01 + half))
    assert row["acc/sample GRPO"] == pytest.approx(0.6) and row["acc/sample"] == pytest.approx(0.61)


def test_elr_table_interval_and_undefined():
    s = _summaries({}, {"grpo": [100.0, 100.0, 100.0], "gfpo-k8-g16-short": [80.0, 72.0, 76.0]})
    t = fc.elr_table(fc.f_evidence(s, range(3)))
    # excess 40 tokens each seed; ELR 0.5, 0.7, 0.6: mean 0.6, sd 0.1
    row = t.loc["gfpo-k8-g16-short"]
    assert row["ELR mean"] == pytest.approx(0.6) and row["ELR per seed"] == [0.5, 0.7, 0.6]
    assert (row["ELR 95% lo"], row["ELR 95% hi"]) == pytest.approx((0.6 - T975_2 * 0.1 / 3 ** 0.5,
                                                                    0.6 + T975_2 * 0.1 / 3 ** 0.5))
    assert row["paper ELR"] == 0.297 and t.loc["gfpo-k4-g16-short", "paper setting"] == "4/24"
    # GRPO no longer than the base in one seed: no ELR, no interval
    s = _summaries({}, {"grpo": [100.0, 55.0, 100.0]})
    t = fc.elr_table(fc.f_evidence(s, range(3)))
    assert math.isnan(t.loc["gfpo-k8-g16-short", "ELR mean"]) and t.loc["gfpo-k8-g16-short", "ELR 95% lo"] is None


def test_generation_cost_per_step_and_ratios():
    steps = lambda samples, rollout: [{"gen/samples": samples, "gen/tokens": 10 * samples, "time/rollout_s": r,
                                       "time/train_s": 1.0} for r in rollout]
    m = {f"{arm}/seed{s}": steps(256 if "g16" in arm else 128, [1.0, 3.0] if arm == "grpo" else [4.0, 4.0])
         for arm in fc.ARMS for s in range(2)}
    t = fc.generation_cost(m, range(2))
    assert t.loc["grpo", "rollout s / step"] == 2.0 and t.loc["grpo", "step s"] == 3.0
    assert t.loc["gfpo-k4-g16-short", "samples x GRPO"] == 2.0 and t.loc["gfpo-k6-g8-short", "samples x GRPO"] == 1.0
    assert t.loc["gfpo-k4-g16-short", "step s x GRPO"] == pytest.approx(5.0 / 3.0)
    assert t.loc["gfpo-k4-g16-short", "tokens / step"] == 2560.0


TEXT = "47*6=282\n282+13=295\n295*7:5*7=35,9*7+3=66,2*7+6=20;295*7=2065\nA=2065"


def test_line_budget_counts_kinds_and_forms():
    row = fc.line_budget([TEXT, "12+3=15\nA=15"]).iloc[0]
    # characters + newline per line: direct 8+1, sum 10+1, long 41+1, answer 6+1
    assert row[["long tokens", "direct tokens", "sum tokens", "answer tokens", "other tokens"]].tolist() == [42, 9, 11, 7, 0]
    assert row[["long lines", "direct lines", "hard long lines", "hard direct lines"]].tolist() == [1, 1, 1, 0]
    assert fc.line_budget(["12+3=15\nA=15"]).iloc[0]["sum tokens"] == 8


def test_run_lines_buckets_and_arm_means():
    table = pd.DataFrame({"length": [10, 20, 30, 50], "correct": [1.0, 0.0, 1.0, 1.0],
                          "bucket": ["0-2", "0-2", "12+", "12+"]})
    r = fc.run_lines(table, [TEXT, TEXT, "12+3=15\nA=15", "A=1"])
    assert r["length"] == 27.5 and r["acc"] == 0.75
    assert r["long lines"] == 0.5 and r["hard long share"] == 1.0  # 2 hard products, both long
    b = fc.bucket_lengths(table)
    assert b["0-2"] == 15.0 and b["12+"] == 40.0 and math.isnan(b["3-5"])
    m = fc.arm_means({"grpo/seed0": pd.Series({"x": 1.0}), "grpo/seed1": pd.Series({"x": 3.0}),
                      "base": pd.Series({"x": 5.0})})
    assert m.loc["grpo", "x"] == 2.0 and m.loc["base", "x"] == 5.0


def test_relabel_keeps_seeds_and_unknown_names():
    out = fc.relabel({"gfpo-k4-g16-short/seed2": 1, "grpo": 2, "base": 3})
    assert out == {"shortest 4/16/seed2": 1, "grpo G8": 2, "base": 3}
    assert set(fc.LABELS) == set(fc.ARMS)
    from gpolib.lab import plots
    assert [plots.algo_of(v) for v in fc.LABELS.values()] == ["grpo"] + [None] * (len(fc.ARMS) - 1)


def test_vs_grpo_paired_per_column():
    per_run = {f"{arm}/seed{s}": pd.Series({"long tokens": 50.0 + s, "12+": float("nan") if s == 1 else 9.0})
               for arm in fc.ARMS for s in range(3)}
    for s, v in enumerate((40.0, 41.0, 46.0)):  # GRPO 50, 51, 52: differences -10, -10, -6, mean -26/3
        per_run[f"gfpo-k4-g16-short/seed{s}"]["long tokens"] = v
    t = fc.vs_grpo(per_run, range(3))
    row = t.loc[("gfpo-k4-g16-short", "long tokens")]
    sd = (((-10 + 26 / 3) ** 2 * 2 + (-6 + 26 / 3) ** 2) / 2) ** 0.5
    assert row["mean"] == pytest.approx(-26 / 3)
    assert row["95% hi"] == pytest.approx(-26 / 3 + T975_2 * sd / 3 ** 0.5)
    assert t.loc[("gfpo-k6-g8-short", "long tokens"), "mean"] == 0.0
    assert math.isnan(t.loc[("gfpo-k6-g8-short", "12+"), "mean"])  # an empty bucket in seed 1: no difference
    assert len(t) == 2 * (len(fc.ARMS) - 1)
