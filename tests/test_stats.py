"""Rules of evidence (gpolib/lab/stats.py, intervals.py): hand-computed intervals and every verdict rule."""
import math

import numpy as np
import pytest

from gpolib.lab import stats
from gpolib.lab.equivalence import DELTA, classify_null, delta_for, seeds_for_precision
from gpolib.lab.intervals import betainc, fit_line, mean_interval, paired, t_cdf, t_quantile
from gpolib.lab.stats import INCONCLUSIVE, NOT, NOT_TESTED, PARTLY, REPRODUCED, SMOKE

# Student t quantiles t_{p, df} as printed in standard tables (6-7 significant digits).
T_TABLE = [(0.975, 1, 12.706205), (0.975, 2, 4.302653), (0.975, 3, 3.182446), (0.975, 4, 2.776445),
           (0.975, 5, 2.570582), (0.975, 9, 2.262157), (0.975, 10, 2.228139), (0.975, 29, 2.045230),
           (0.975, 30, 2.042272), (0.975, 100, 1.983972), (0.95, 2, 2.919986), (0.95, 5, 2.015048),
           (0.995, 2, 9.924843), (0.995, 10, 3.169273), (0.9, 3, 1.637744)]
T2 = 4.302653  # t_{0.975, 2}, from the table


# ---------------------------------------------------------------- t distribution

@pytest.mark.parametrize("p,df,want", T_TABLE)
def test_t_quantile_matches_table(p, df, want):
    assert t_quantile(p, df) == pytest.approx(want, abs=2e-6)
    assert t_quantile(1 - p, df) == pytest.approx(-want, abs=2e-6)


def test_t_quantile_inverts_cdf_and_tends_to_normal():
    for df in (1, 2, 3, 7, 40):
        for p in (0.6, 0.9, 0.975, 0.999):
            assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-10)
    z = 1.959964  # normal quantile; t_{p, df} = z + (z^3 + z) / (4 df) + O(df^-2) (Cornish-Fisher)
    assert t_quantile(0.975, 100000) == pytest.approx(z + (z ** 3 + z) / 4e5, abs=1e-6)
    assert t_cdf(0.0, 5) == 0.5


def test_betainc_closed_forms():
    assert betainc(1, 1, 0.3) == pytest.approx(0.3)  # uniform
    assert betainc(2, 1, 0.3) == pytest.approx(0.09)  # x^2
    assert betainc(1, 3, 0.3) == pytest.approx(1 - 0.7 ** 3)
    with pytest.raises(ValueError):
        t_quantile(0.975, 0)


# ---------------------------------------------------------------- intervals by hand

def test_paired_interval_by_hand():
    # differences 0.02, 0.05, 0.03: mean 0.0333333, sd = sqrt(0.00046667 / 2) = 0.0152753,
    # half-width = 4.302653 * 0.0152753 / sqrt(3) = 0.0379458
    iv = paired([0.52, 0.55, 0.53], [0.50, 0.50, 0.50])
    assert iv.values == pytest.approx((0.02, 0.05, 0.03))
    assert iv.mean == pytest.approx(0.0333333, abs=1e-7)
    assert iv.sd == pytest.approx(0.0152753, abs=1e-7)
    assert (iv.lo, iv.hi) == (pytest.approx(-0.0046125, abs=1e-6), pytest.approx(0.0712792, abs=1e-6))
    assert iv.n == 3


def test_interval_edge_cases():
    one = mean_interval([0.4])
    assert (one.mean, one.sd, one.lo, one.hi) == (0.4, None, None, None)
    with pytest.raises(ValueError, match="pair them by seed"):
        paired([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="non-finite"):
        mean_interval([0.1, math.nan, 0.2])
    with pytest.raises(ValueError, match="no values"):
        mean_interval([])


# ---------------------------------------------------------------- equivalence and the precision rule

T90_2 = 2.919986  # t_{0.95, 2} (tables)


def test_precision_rule_by_hand():
    # sd 0.0152753, delta 0.03: t(0.975, n-1) sd / sqrt(n) <= 0.015 first at n = 7
    # n = 6: 2.570582 * 0.0152753 / 2.449490 = 0.016031 > 0.015; n = 7: 2.446912 * 0.0152753 / 2.645751 = 0.014128
    assert seeds_for_precision(0.0152753, 0.03) == 7
    assert seeds_for_precision(0.0152753, 0.0321) == 6  # 0.016031 <= 0.01605
    assert seeds_for_precision(0.0, 0.03) == 3  # never fewer than 3
    with pytest.raises(ValueError, match="delta > 0"):
        seeds_for_precision(0.01, 0.0)


def test_delta_table_mirrors_design():
    assert DELTA == {"accuracy": 0.03, "share": 0.03, "length": 5.0, "elr": 0.20, "log_ratio_range": 0.02}
    assert delta_for("entropy", base_entropy=0.0386) == pytest.approx(0.00386)
    with pytest.raises(ValueError, match="no delta"):
        delta_for("speed")
    with pytest.raises(ValueError, match="entropy"):
        delta_for("entropy")
    with pytest.raises(ValueError, match="no delta"):
        stats.Greater("x", "speed")  # an unknown measure fails where the rule is defined


def test_greater_inconclusive_names_sd_df_and_precision_seeds():
    # differences 0.02, 0.05, 0.03: 95% CI [-0.0046, +0.0713] spans 0; 90% half 2.919986 * 0.0152753 / sqrt(3) =
    # 0.025752: [+0.0076, +0.0591] is not within 0 +- 0.03 -> inconclusive; the precision rule asks 7 seeds
    v = stats.Greater("acc, A - B", "accuracy").judge([0.52, 0.55, 0.53], [0.5, 0.5, 0.5])
    assert v.word == INCONCLUSIVE
    assert "[-0.005, +0.071]" in v.text and "n=3" in v.text and "paired sd 0.015 (2 df)" in v.text
    assert "90% CI [+0.008, +0.059] not within +0.000 +- 0.030" in v.text
    assert "the precision rule asks 7 seeds per arm" in v.text
    assert v.null.seeds == 7 and v.null.df == 2 and not v.null.equivalent
    assert v.to_dict()["equivalence"]["precision_seeds"] == 7


def test_greater_equivalent_within_delta_is_not_reproduced():
    # differences -0.005, 0, +0.005: 95% half 4.302653 * 0.005 / sqrt(3) = 0.012421 spans 0; 90% half
    # 2.919986 * 0.005 / sqrt(3) = 0.008429: [-0.0084, +0.0084] lies within 0 +- 0.03 -> equivalent
    v = stats.Greater("acc, A - B", "accuracy").judge([0.495, 0.5, 0.505], [0.5, 0.5, 0.5])
    assert v.word == NOT and "equivalent within +-0.030" in v.text and v.null.equivalent
    assert v.null.lo90 == pytest.approx(-T90_2 * 0.005 / math.sqrt(3), abs=1e-8)
    # the same differences in tokens of length (delta 5) and as log-ratio ranges (delta 0.02): equivalent too;
    # times 10 as a share (delta 0.03): 90% [-0.084, +0.084] is not within +-0.03 -> inconclusive
    assert stats.Greater("len", "length").judge([0.495, 0.5, 0.505], [0.5] * 3).word == NOT
    assert stats.Greater("s", "share").judge([0.45, 0.5, 0.55], [0.5] * 3).word == INCONCLUSIVE


def test_equivalence_needs_the_whole_90_interval_inside():
    iv = mean_interval([0.02, 0.03, 0.04])  # sd 0.01, 90% half 0.016859: [0.0131, 0.0469]
    assert not classify_null(iv, 0.0, 0.04).equivalent and classify_null(iv, 0.0, 0.047).equivalent
    assert classify_null(mean_interval([0.1]), 0.0, 0.03) is None  # one value: nothing to decide


def test_greater_reproduced_and_g1_threshold():
    # differences 0.06, 0.07, 0.08: mean 0.07, sd 0.01, half-width 4.302653 * 0.01 / sqrt(3) = 0.0248414
    g1 = stats.Greater("held-out accuracy, GRPO - base", "accuracy", at_least=0.05)
    v = g1.judge([0.56, 0.57, 0.58], [0.5, 0.5, 0.5])
    assert v.word == REPRODUCED
    assert (v.interval.lo, v.interval.hi) == (pytest.approx(0.0451586, abs=1e-6), pytest.approx(0.0948414, abs=1e-6))
    # 0.03, 0.04, 0.05: interval [0.0152, 0.0648] above 0, mean 0.04 < 5 points, upper end >= 0.05: inconclusive
    assert g1.judge([0.53, 0.54, 0.55], [0.5, 0.5, 0.5]).word == INCONCLUSIVE
    # 0.02, 0.025, 0.03: interval [0.0126, 0.0374] below 0.05 -> the claimed size is excluded
    assert g1.judge([0.52, 0.525, 0.53], [0.5, 0.5, 0.5]).word == NOT
    # -0.01, 0.0, -0.02: interval [-0.0348, +0.0148] spans 0 -> inconclusive, not "partly" for a wrong-sign mean
    # (with delta 0.03 its 90% interval [-0.0269, +0.0069] lies within +-0.03: equivalent, not reproduced)
    x = stats.Greater("x", "accuracy")
    assert x.judge([0.49, 0.50, 0.48], [0.5, 0.5, 0.5]).word == NOT
    assert stats.Greater("x", "accuracy").with_delta(0.02).judge([0.49, 0.50, 0.48], [0.5] * 3).word == INCONCLUSIVE
    assert x.judge([0.45, 0.46, 0.44], [0.5, 0.5, 0.5]).word == NOT  # interval below 0
    assert "mean >= +0.050" in g1.criterion and "mean >=" not in x.criterion


def test_growth_negative_like_r2_spans_zero():
    # R2 full profile: incorrect-answer length growth under GRPO, three seeds (tokens)
    grpo = [-0.7469587329336349, -5.278157091634803, -1.4068917437210615]
    v = stats.growth("incorrect-length growth under GRPO", measure="length", fmt="+.2f").judge(grpo)
    # mean -2.477336, sd 2.447923, half-width 4.302653 * 2.447923 / sqrt(3) = 6.080985: [-8.56, +3.60] spans 0;
    # 90% half 2.919986 * 2.447923 / sqrt(3) = 4.126854: [-6.60, +1.65] not within +-5 tokens -> inconclusive;
    # precision (delta / 2 = 2.5): n = 6 gives 2.570582 * 2.447923 / 2.449490 = 2.5690, n = 7 2.2640 -> 7 seeds
    assert v.word == INCONCLUSIVE and "the precision rule asks 7 seeds per arm" in v.text
    assert v.interval.mean == pytest.approx(-2.477336, abs=1e-6)
    assert v.interval.sd == pytest.approx(2.447923, abs=1e-6)
    assert v.interval.lo == pytest.approx(-8.558321, abs=1e-5) and v.interval.hi == pytest.approx(3.603649, abs=1e-5)
    assert "A_s - B_s" not in v.criterion


def test_two_part_claim_partly_names_the_parts():
    grpo = [-0.7469587329336349, -5.278157091634803, -1.4068917437210615]
    dr = [-4.459010462254945, -5.750337438373236, -0.08613100510711291]
    rule = stats.AllOf(parts=(stats.growth("growth GRPO", measure="length"),
                              stats.Greater("growth GRPO - Dr. GRPO", "length")))
    grow, more = rule.parts[0].judge(grpo), rule.parts[1].judge(grpo, dr)
    assert (grow.word, more.word) == (INCONCLUSIVE, INCONCLUSIVE)  # differences 3.71, 0.47, -1.32: CI spans 0
    assert rule.judge([grow, more]).word == INCONCLUSIVE  # no part holds, none refuted
    yes, no = stats.Verdict(REPRODUCED, "a", ""), stats.Verdict(NOT, "b", "")
    half = rule.judge([yes, grow])
    assert half.word == PARTLY and half.text.startswith("holds: growth GRPO — does not: growth GRPO - Dr. GRPO (inconclusive)")
    assert rule.judge([grow, no]).word == NOT and rule.judge([no, yes]).word == PARTLY
    assert rule.judge([yes, yes]).word == REPRODUCED


# ---------------------------------------------------------------- A not worse than B

def _three_around(mean, spread=0.01):
    """A - B = mean - spread, mean, mean + spread: sd = spread, lower end = mean - t2 * spread / sqrt(3)."""
    return [mean - spread, mean, mean + spread], [0.0, 0.0, 0.0]


def test_non_inferiority_boundary():
    ni, half = stats.NotWorse("acc, GSPO - GRPO"), T2 * 0.01 / math.sqrt(3)  # 0.0248414
    assert ni.judge(*_three_around(-0.0299 + half)).word == REPRODUCED  # lower end -0.0299
    assert ni.judge(*_three_around(-0.0301 + half)).word == INCONCLUSIVE  # lower end -0.0301, upper +0.0196
    # mean -0.0301, upper end -0.0053 above the margin line, but the 90% interval [-0.0470, -0.0132] lies within
    # -0.03 +- 0.03: the difference sits at the margin (equivalent) -> not reproduced
    sits = ni.judge(*_three_around(-0.0301))
    assert sits.word == NOT and "equivalent within +-0.030" in sits.text
    assert ni.judge(*_three_around(-0.0301 - half)).word == NOT  # upper end -0.0301: worse beyond the margin
    assert ni.judge(*_three_around(-0.03 + 0.0248414, spread=0.0)).word == REPRODUCED  # sd 0: lower end = mean
    assert "-0.03" in ni.criterion


def test_p2_two_seeds_is_inconclusive():
    gspo, grpo = [0.8313802083333334, 0.8229166666666666], [0.8463541666666666, 0.8287760416666666]
    v = stats.NotWorse("final reward, GSPO - GRPO").judge(gspo, grpo)
    # differences -0.014974, -0.005859: mean -0.010417, sd 0.006445, half 12.706205 * 0.006445 / sqrt(2) = 0.057906
    assert v.interval.lo == pytest.approx(-0.068323, abs=1e-5)
    assert v.word == INCONCLUSIVE


def test_fewer_than_three_seeds_never_reproduced():
    big = stats.Greater("gain", "accuracy")
    two = big.judge([0.60, 0.61], [0.5, 0.5])  # interval [0.041, 0.169] excludes 0
    assert two.interval.lo > 0 and two.word == INCONCLUSIVE and "only 2 seeds (< 3)" in two.text
    one = big.judge([0.9], [0.1])
    assert one.word == INCONCLUSIVE and "one seed (1): no interval, no decision" in one.text
    d = one.to_dict()
    assert d["interval"] == [None, None] and d["interval_why"]
    assert "fewer than 3 seeds: at most inconclusive" in big.criterion


# ---------------------------------------------------------------- premises, conditions and checks

def test_failed_premise_like_f1_names_it():
    premise = stats.Greater("GRPO length over the base (tokens)", "length", fmt="+.1f")
    elr = stats.growth("ELR of 4/24", measure="elr", at_least=0.46, fmt="+.1%")
    acc = stats.NotWorse("held-out accuracy, GFPO - GRPO")
    f1 = stats.AllOf(parts=(elr, acc), premises=(premise,))
    parts = [elr.judge([0.55, 0.60, 0.58]), acc.judge([0.85, 0.86, 0.84], [0.85, 0.85, 0.85])]
    assert [p.word for p in parts] == [REPRODUCED, REPRODUCED]
    # base 100 tokens, GRPO 95, 96, 94: lengths fell, interval [-7.48, -2.52] below 0 -> premise failed
    v = f1.judge(parts, [premise.judge([95, 96, 94], [100, 100, 100])])
    assert v.word == NOT and v.text.startswith("premise failed: GRPO length over the base (tokens): mean -5.0")
    assert v.failed and "premise: GRPO length over the base (tokens) > 0" in v.criterion
    # +6.5, +12.2, +18.8 (the committed 60-step runs): interval [-2.8, +27.8] spans 0 -> inconclusive
    unsure = f1.judge(parts, [premise.judge([103.95, 109.66, 116.25], [97.45, 97.45, 97.45])])
    assert unsure.word == INCONCLUSIVE and unsure.text.startswith("premise inconclusive: ")
    assert f1.judge(parts, [premise.judge([120, 125, 130], [100, 100, 100])]).word == REPRODUCED


def test_condition_not_met_is_not_tested_with_the_measure():
    routing = stats.AtLeast("share of activated experts that change", at_least=0.02, fmt=".2%")
    p4 = stats.AllOf(parts=(stats.Greater("acc, replay - none", "accuracy"),), conditions=(routing,))
    part = stats.Verdict(NOT, "acc, replay - none: mean -0.100", "")
    v = p4.judge([part], conditions=[routing.judge(0.0064)])
    assert v.word == NOT_TESTED and v.text.startswith("not tested: condition not met: share of activated experts "
                                                      "that change 0.64% < 2.00%")
    assert "(else not tested)" in p4.criterion
    assert p4.judge([part], conditions=[routing.judge(0.05)]).word == NOT


def test_at_least_every_seed_and_combination():
    clip = stats.AtLeast("clip share GSPO / GRPO", at_least=10, every=True, fmt=".1f")
    assert clip.judge([181.2, 155.5, 160.0]).word == REPRODUCED
    fails = clip.judge([181.2, 9.5, 160.0])
    assert fails.word == NOT and "lowest" in fails.text and "in every seed" in clip.criterion
    p2 = stats.AllOf(parts=(clip, stats.NotWorse("acc")))
    ni_unsure = stats.Verdict(INCONCLUSIVE, "", "")
    assert p2.judge([clip.judge([100, 120, 140]), ni_unsure]).word == PARTLY
    assert p2.judge([fails, ni_unsure]).word == NOT
    with pytest.raises(ValueError, match=r"expected \(parts, checks, guards, premises, conditions\) = \(2, 0, 0, 0, 0\)"):
        p2.judge([fails])


def test_typed_parts_checks_never_earn_partly():
    """DESIGN: a check is printed as 'checks passed' and never counts as a reproduced part; partly needs one empirical
    part reproduced and one not; a single comparison never says partly."""
    part = stats.growth("rise", measure="share")
    check = stats.AtLeast("filter leaves no zero-variance group", at_least=1.0, every=True)
    d2 = stats.AllOf(parts=(part,), checks=(check,))
    unsure = part.judge([0.031, 0.05, -0.01])  # 95% CI spans 0, 90% CI [-0.032, +0.080] not within +-0.03
    ok = check.judge([1.0, 1.0, 1.0])
    v = d2.judge([unsure], checks=[ok])
    assert unsure.word == INCONCLUSIVE and v.word == INCONCLUSIVE  # not "partly" from the check
    assert "; checks passed: filter leaves no zero-variance group 1.000 >= 1.000" in v.text
    assert [p["role"] for p in v.to_dict()["parts"]] == ["part", "check"]
    yes = stats.Verdict(REPRODUCED, "rise: held", "")
    assert d2.judge([yes], checks=[ok]).word == REPRODUCED
    broken = d2.judge([yes], checks=[check.judge([1.0, 0.5, 1.0])])
    assert broken.word == NOT and "CHECK FAILED" in broken.text and "partly" not in d2.criterion
    assert "check (holds by construction, not a part)" in d2.criterion


def test_guard_denies_reproduced_but_never_earns_partly():
    entropy, acc = stats.Greater("entropy", "entropy", fmt="+.4f").with_delta(0.004), stats.NotWorse("acc")
    d1 = stats.AllOf(parts=(entropy,), guards=(acc,))
    yes, no = stats.Verdict(REPRODUCED, "y", ""), stats.Verdict(NOT, "n", "")
    assert d1.judge([no], guards=[yes]).word == NOT  # the guard holding does not make it partly
    assert d1.judge([yes], guards=[no]).word == PARTLY  # the guard failing denies reproduced
    assert d1.judge([yes], guards=[yes]).word == REPRODUCED
    # D1's committed numbers: entropy +0.0001, -0.0003, +0.0002 nats; delta 10% of 0.03859 -> equivalent
    v = entropy.with_delta(0.1 * 0.03859).judge([0.0381, 0.0377, 0.0382], [0.038, 0.038, 0.038])
    assert v.word == NOT and "equivalent within +-0.0039" in v.text


def test_words_are_designs_vocabulary():
    assert set(stats.WORDS) == {REPRODUCED, PARTLY, INCONCLUSIVE, NOT, NOT_TESTED, stats.NOT_RUN, SMOKE}


# ---------------------------------------------------------------- slope (S1)

def test_fit_line_by_hand():
    # x 1..6, y 1,3,2,5,4,6: S_xx 17.5, S_xy 15.5, slope 0.885714, SS_res 3.771429, R^2 0.784490,
    # se sqrt(3.771429 / 4 / 17.5) = 0.232115, half = 2.776445 * se = 0.644455
    f = fit_line([1, 2, 3, 4, 5, 6], [1, 3, 2, 5, 4, 6])
    assert f.slope == pytest.approx(0.885714, abs=1e-6) and f.r2 == pytest.approx(0.784490, abs=1e-6)
    assert f.se == pytest.approx(0.232115, abs=1e-6)
    assert (f.lo, f.hi) == (pytest.approx(0.241259, abs=1e-5), pytest.approx(1.530169, abs=1e-5))
    assert stats.Slope("slope").judge([1, 2, 3, 4, 5, 6], [1, 3, 2, 5, 4, 6]).word == REPRODUCED


def test_slope_rule_against_numpy_and_s1_weak_fit():
    x = np.arange(1.0, 41.0)
    y = 0.05 * x + np.where(x % 2 == 0, 1.0, -1.0)  # a weak trend under alternating noise
    f = fit_line(x, y)
    slope, intercept = np.polyfit(x, y, 1)
    assert (f.slope, f.intercept) == (pytest.approx(slope), pytest.approx(intercept))
    r = math.sqrt(f.r2)  # t statistic of the slope = r sqrt(k-2) / sqrt(1-r^2)
    assert f.slope / f.se == pytest.approx(r * math.sqrt(38) / math.sqrt(1 - f.r2))
    v = stats.Slope("slope").judge(x, y)
    assert f.lo > 0 and f.r2 < 0.5 and v.word == INCONCLUSIVE  # interval excludes 0, R^2 < 0.5
    # a weak fit over 6 buckets (R^2 0.057): the interval includes 0 -> not reproduced
    weak = stats.Slope("slope").judge([1, 2, 3, 4, 5, 6], [2, 1, 3, 1, 3, 2])
    assert weak.fit.slope == pytest.approx(2 / 17.5) and weak.fit.r2 == pytest.approx(0.0571429, abs=1e-6)
    assert weak.word == INCONCLUSIVE
    assert stats.Slope("slope").judge([1, 2, 3, 4, 5, 6], [6, 4, 5, 2, 3, 1]).word == NOT  # interval below 0
    few = stats.Slope("slope").judge([1, 2, 3, 4, 5], [1, 2, 3, 4, 5.1])
    assert few.fit.lo > 0 and few.fit.r2 > 0.99 and few.word == INCONCLUSIVE  # only 5 buckets


# ---------------------------------------------------------------- smoke and printing

def test_smoke_prints_no_verdict_with_the_criterion():
    rule = stats.Greater("gain", "accuracy", at_least=0.05)
    v = rule.judge([0.56, 0.57, 0.58], [0.5, 0.5, 0.5])
    s = stats.for_profile(v, "smoke")
    assert s.word == SMOKE and s.line().startswith("smoke: no verdict — ")
    assert s.criterion == rule.criterion and "criterion: " + rule.criterion in s.show()
    assert stats.for_profile(v, "full") is v and v.line().startswith("REPRODUCED — ")


def test_missing_values_are_named_not_skipped():
    v = stats.growth("growth", measure="length").judge([1.0, None, float("nan")])
    assert v.word == INCONCLUSIVE and "no value at position(s) [1, 2]" in v.text and v.criterion
    assert stats.NotWorse("acc").judge([0.5, 0.5, 0.5], [0.5, float("inf"), 0.5]).word == INCONCLUSIVE
    assert stats.AtLeast("premise", 0.1).judge(None).word == INCONCLUSIVE
    assert stats.Slope("slope").judge([1, 2, 3], [1.0, None, 2.0]).word == INCONCLUSIVE
