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
    assert row["paper ELR"] == 0.297 and t.loc["gfpo-k4-g24-short", "paper setting"] == "4/24"
    assert math.isnan(t.loc["gfpo-k4-g8-short", "paper ELR"])  # no average for 4/8 in the paper's tables
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
    assert t.loc["gfpo-k4-g16-short", "samples x GRPO"] == 2.0 and t.loc["gfpo-k4-g8-short", "samples x GRPO"] == 1.0
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
    assert t.loc[("gfpo-k4-g8-short", "long tokens"), "mean"] == 0.0
    assert math.isnan(t.loc[("gfpo-k4-g8-short", "12+"), "mean"])  # an empty bucket in seed 1: no difference
    assert len(t) == 2 * (len(fc.ARMS) - 1)


# ---------------------------------------------------------------- arms: notebook 01's GRPO, the filter the only change

def test_grpo_arm_is_notebook_01s_runs_and_the_filter_is_the_only_difference():
    from gpolib import presets
    from gpolib.lab import grpo, runs
    budget = runs.budget(steps=100, prompts_per_step=16, group_size=8, eval_prompts=512, eval_samples=4,
                         model="data/models/tiny-qwen3", device="cpu", dtype="float32")
    cfgs = runs.configs(fc.ARMS, budget, seeds=range(3))
    ours = runs.run_dirs("full", "05_gfpo", cfgs, fc.HOME)
    nb01 = runs.run_dirs("full", "01_grpo", runs.configs(grpo.ARMS, budget, seeds=range(3)))
    assert {k: ours[k] for k in nb01} == nb01  # the same folders: notebook 01's runs, not retrained here
    assert cfgs["grpo/seed1"] == presets.get("grpo", **budget, seed=1, adapter_steps=(0.5,))  # notebook 01's arm
    for arm, spec in fc.ARMS.items():
        diff = runs.config_diff(cfgs["grpo/seed0"], cfgs[f"{arm}/seed0"])
        assert set(diff) <= {"name", "group_size", "gfpo_k", "gfpo_metric", "gfpo_adaptive", "adapter_steps"}, (arm, diff)
    got = {arm: (cfgs[f"{arm}/seed0"].gfpo_k, cfgs[f"{arm}/seed0"].group_size) for arm in fc.K4_ARMS.values()}
    assert got == {"gfpo-k4-g8-short": (4, 8), "gfpo-k4-g16-short": (4, 16), "gfpo-k4-g24-short": (4, 24)}
    assert cfgs["gfpo-k8-g16-eff/seed2"].gfpo_metric == "efficiency" and cfgs["gfpo-adaptive-g16/seed0"].gfpo_adaptive


# ---------------------------------------------------------------- F1 / F2 on fake runs whose ELR is known

GRPO_LEN = [100.0, 102.0, 98.0]  # base 60 in every seed: excess 40, 42, 38 tokens


def _len_at(elrs):
    """GFPO's held-out length that gives these ELRs: L_GFPO = L_GRPO - ELR * (L_GRPO - 60)."""
    return [g - e * (g - 60.0) for g, e in zip(GRPO_LEN, elrs)]


def _evidence(elr_24=(0.55, 0.6, 0.5), elr_8=(0.1, 0.2, 0.15), acc_24=(0.6, 0.61, 0.6), grpo=GRPO_LEN):
    s = _summaries({"grpo": [0.6] * 3, "gfpo-k4-g24-short": list(acc_24)},
                   {"grpo": list(grpo), "gfpo-k4-g24-short": _len_at(elr_24), "gfpo-k4-g8-short": _len_at(elr_8)})
    return fc.f_evidence(s, range(3))


def test_f_evidence_elr_per_seed_is_eq_4():
    e = _evidence()
    assert e["len_base"] == [60.0] * 3 and e["len_grpo"] == GRPO_LEN
    assert e["elr"]["gfpo-k4-g24-short"] == pytest.approx([0.55, 0.6, 0.5])
    assert e["elr"]["gfpo-k4-g8-short"] == pytest.approx([0.1, 0.2, 0.15])
    assert e["elr"]["gfpo-k8-g16-short"] == pytest.approx([0.0, 2 / 42, -2 / 38])  # 100 tokens: (L_GRPO - 100) / excess
    assert e["acc_k4_g24"] == [0.6, 0.61, 0.6] and list(e["elr"]) == [a for a in fc.ARMS if a != "grpo"]


def test_f1_reproduced_partly_and_premise_failed():
    # ELR 0.55, 0.6, 0.5: mean 0.55 >= 0.46, sd 0.05, lower end 0.55 - 4.303 * 0.05 / sqrt(3) = 0.426 > 0;
    # accuracy differences 0, +0.01, 0: lower end 0.0033 - 4.303 * 0.00577 / sqrt(3) = -0.011 >= -0.03
    v = fc.verdict_f1(_evidence())
    assert v.word == fc.stats.REPRODUCED
    assert v.parts[0].interval.lo == pytest.approx(0.55 - T975_2 * 0.05 / 3 ** 0.5)
    assert "paper 4/24: 58.2%" in v.text and "premise held: GRPO's held-out length" in v.text  # premise with its interval
    # ELR 0.35, 0.40, 0.45: interval above 0 but mean 0.40 < 0.46 with upper end 0.52 above it: the ELR part is
    # inconclusive, the accuracy part holds -> partly
    v = fc.verdict_f1(_evidence(elr_24=(0.35, 0.40, 0.45)))
    assert (v.word, v.parts[0].word, v.parts[1].word) == (fc.stats.PARTLY, fc.stats.INCONCLUSIVE, fc.stats.REPRODUCED)
    # accuracy 0.55, 0.56, 0.55 against 0.6: differences -0.05, -0.04, -0.05, upper end < -0.03 -> not reproduced
    assert fc.verdict_f1(_evidence(acc_24=(0.55, 0.56, 0.55))).parts[1].word == fc.stats.NOT
    # GRPO shorter than the base (50, 52, 51 vs 60: -9 +- 1 tokens): no ELR, premise failed
    v = fc.verdict_f1(_evidence(grpo=(50.0, 52.0, 51.0)))
    assert v.word == fc.stats.NOT and v.text.startswith("premise failed")
    assert all(math.isnan(x) for x in fc.f_evidence(_summaries({}, {"grpo": [55.0, 58.0, 50.0]}), range(3))["elr"]["gfpo-k4-g24-short"])


def test_f2_at_fixed_k():
    # 4/24 - 4/8 per seed: 0.45, 0.40, 0.35: mean 0.40, sd 0.05, lower end 0.40 - 4.303 * 0.05 / sqrt(3) = 0.276 > 0
    v = fc.verdict_f2(_evidence())
    assert v.word == fc.stats.REPRODUCED and v.parts[0].interval.mean == pytest.approx(0.40)
    assert v.parts[0].interval.lo == pytest.approx(0.40 - T975_2 * 0.05 / 3 ** 0.5)
    # 4/8 at 0.6, 0.4, 0.7: differences -0.05, +0.2, -0.2 span 0 -> inconclusive
    assert fc.verdict_f2(_evidence(elr_8=(0.6, 0.4, 0.7))).word == fc.stats.INCONCLUSIVE


def test_missing_runs_are_not_yet_run():
    s = _summaries({}, {})
    for s_ in range(3):
        del s[f"gfpo-k4-g24-short/seed{s_}"]
    e = fc.f_evidence(s, range(3))
    assert fc.F1_ARM not in e["elr"] and "acc_k4_g24" not in e
    v1, v2 = fc.verdict_f1(e), fc.verdict_f2(e)
    assert v1.word == v2.word == fc.stats.NOT_RUN and "no runs of shortest 4/24" in v2.text
    del s["gfpo-k4-g8-short/seed1"]  # one seed missing: the arm is not there
    assert "gfpo-k4-g8-short" not in fc.f_evidence(s, range(3))["elr"]


def test_premise_note_numbers():
    note = fc.premise_note(_evidence(), 100)
    # GRPO 100.0 on average against 60.0: +40.0 tokens, +66.7% of the base
    assert "average 100.0 tokens against the base's 60.0 (excess +40.0 tokens, +66.7% of the base)" in note
    assert "REPRODUCED" in note


def test_accuracy_vs_grpo_non_inferiority_word():
    t = fc.accuracy_vs_grpo(_summaries({"grpo": [0.6] * 3, "gfpo-k4-g24-short": [0.55, 0.56, 0.55]}, {}), range(3))
    assert t.loc["gfpo-k4-g24-short", "not worse (margin 0.03)"] == fc.stats.NOT
    assert t.loc["gfpo-k4-g8-short", "not worse (margin 0.03)"] == fc.stats.REPRODUCED  # all equal: interval [0, 0]


def test_elr_plots_draw_the_seed_means():
    e = _evidence()
    fig = fc.elr_plot(e)
    bars = [p.get_height() for p in fig.axes[0].patches]
    assert bars[0] == pytest.approx(0.15) and bars[2] == pytest.approx(0.55)  # 4/8, 4/16, 4/24, ...
    assert len(bars) == len(fc.ARMS) - 1 and len(fig.axes[0].collections) >= len(fc.ARMS) - 1  # a dot set per arm
    fig = fc.elr_vs_group_plot(e)
    mean_line = fig.axes[0].containers[0].lines[0]  # the errorbar's line through the seed means
    assert list(mean_line.get_xdata()) == [8, 16, 24]
    assert list(mean_line.get_ydata()) == pytest.approx([0.15, (2 / 42 - 2 / 38) / 3, 0.55])  # 4/16 at 100 tokens


def test_f_statement_numbers_and_words():
    e = _evidence()
    text = fc.f_statement(fc.verdict_f1(e), fc.verdict_f2(e), e, 100)
    # premise: excess 40, 42, 38 -> 40 +- 4.303 * 2 / sqrt(3) = [35.0, 45.0]; ELR 0.55 +- 0.124; F2 0.40 +- 0.124
    assert "excess length over the base (tokens, the premise) is +40.0 (95% CI [+35.0, +45.0], n = 3): reproduced." in text
    assert "ELR +55.0% (95% CI [+42.6%, +67.4%], n = 3): reproduced" in text and "F1 reproduced" in text
    assert "4/24 - 4/8 +40.0% (95% CI [+27.6%, +52.4%], n = 3): reproduced; F2 reproduced" in text
    assert "seed means 4/8 +15.0%, 4/16 -0.2%, 4/24 +55.0%" in text and "58.2% of GRPO's excess" in text
    smoke = fc.stats.for_profile(fc.verdict_f1(e), "smoke")
    assert fc.f_statement(smoke, smoke, e, 1).startswith("Smoke run: no statement")
