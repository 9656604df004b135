"""Rules of evidence (gpolib/lab/stats.py, intervals.py): hand-computed intervals and every verdict rule."""
import math

import numpy as np
import pytest

from gpolib.lab import stats
from gpolib.lab.intervals import betainc, detectable, fit_line, mean_interval, paired, seeds_needed, t_cdf, t_quantile
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


# ---------------------------------------------------------------- power (inconclusive verdicts)

T80_2 = 1.0606602  # t_{0.80, 2} = (2p - 1) / sqrt(2p(1-p)) at p = 0.8: 0.6 / sqrt(0.32)


def test_detectable_difference_by_hand():
    # n = 3, sd 0.1: (t_{0.975,2} + t_{0.80,2}) * 0.1 / sqrt(3) = (4.302653 + 1.060660) * 0.1 / 1.732051 = 0.309651
    assert detectable(0.1, 3) == pytest.approx((T2 + T80_2) * 0.1 / math.sqrt(3), abs=1e-6)
    assert detectable(0.1, 3) == pytest.approx(0.309651, abs=1e-6)
    # n = 9 (df 8): t_{0.975,8} 2.306004, t_{0.80,8} 0.888889 (tables): 3.194893 * 0.1 / 3 = 0.106496
    assert detectable(0.1, 9) == pytest.approx(0.106496, abs=2e-6)
    with pytest.raises(ValueError, match="n >= 2"):
        detectable(0.1, 1)


def test_seeds_needed_is_the_first_n_that_detects():
    # 0.31 > 0.309651 (n = 3 detects it), 0.30 < it (n = 4: (3.182446 + 0.978472) * 0.1 / 2 = 0.208046 <= 0.30)
    assert seeds_needed(0.1, 0.31) == 3 and seeds_needed(0.1, 0.30) == 4 and seeds_needed(0.1, -0.30) == 4
    assert seeds_needed(0.1, 0.0) is None and seeds_needed(0.0, 0.01) == 2


# ---------------------------------------------------------------- A > B

def test_greater_inconclusive_when_interval_includes_zero():
    # differences 0.02, 0.05, 0.03: CI [-0.0046, +0.0713], sd 0.0152753; detectable = 5.363313 * 0.0152753 / sqrt(3)
    # = 0.047299; the observed mean 0.0333 needs n = 5: (2.776445 + 0.940965) * 0.0152753 / sqrt(5) = 0.025396 <= it
    # while n = 4 gives (3.182446 + 0.978472) * 0.0152753 / 2 = 0.031779 <= 0.0333 too: 4 seeds
    v = stats.Greater("acc, A - B").judge([0.52, 0.55, 0.53], [0.5, 0.5, 0.5])
    assert v.word == INCONCLUSIVE
    assert "[-0.005, +0.071]" in v.text and "n=3" in v.text and "paired sd 0.015" in v.text
    assert "detects a difference of 0.047" in v.text and "4 seeds would detect the observed mean +0.033" in v.text
    assert "t-quantile approximation" in v.text
    assert v.criterion == stats.Greater("acc, A - B").criterion and "partly" not in v.criterion


def test_greater_paper_effect_sets_the_seeds_needed():
    # sd 0.0152753: n = 3 detects 0.047299 (>= 0.05 passes, 0.04 does not), n = 4 detects 0.031779
    for effect, n in ((0.05, 3), (0.04, 4)):
        rule = stats.Greater("acc, A - B", paper_effect=effect)
        assert f"{n} seeds would detect the paper's effect +{effect:.3f}" in rule.judge([0.52, 0.55, 0.53], [0.5] * 3).text


def test_greater_reproduced_and_g1_threshold():
    # differences 0.06, 0.07, 0.08: mean 0.07, sd 0.01, half-width 4.302653 * 0.01 / sqrt(3) = 0.0248414
    g1 = stats.Greater("held-out accuracy, GRPO - base", at_least=0.05)
    v = g1.judge([0.56, 0.57, 0.58], [0.5, 0.5, 0.5])
    assert v.word == REPRODUCED
    assert (v.interval.lo, v.interval.hi) == (pytest.approx(0.0451586, abs=1e-6), pytest.approx(0.0948414, abs=1e-6))
    # 0.03, 0.04, 0.05: interval [0.0152, 0.0648] above 0, mean 0.04 < 5 points, upper end >= 0.05: inconclusive
    assert g1.judge([0.53, 0.54, 0.55], [0.5, 0.5, 0.5]).word == INCONCLUSIVE
    # 0.02, 0.025, 0.03: interval [0.0126, 0.0374] below 0.05 -> the claimed size is excluded
    assert g1.judge([0.52, 0.525, 0.53], [0.5, 0.5, 0.5]).word == NOT
    # -0.01, 0.0, -0.02: interval [-0.0348, +0.0148] spans 0 -> inconclusive, not "partly" for a wrong-sign mean
    assert stats.Greater("x").judge([0.49, 0.50, 0.48], [0.5, 0.5, 0.5]).word == INCONCLUSIVE
    assert stats.Greater("x").judge([0.45, 0.46, 0.44], [0.5, 0.5, 0.5]).word == NOT  # interval below 0
    assert "mean >= +0.050" in g1.criterion and "mean >=" not in stats.Greater("x").criterion


def test_growth_negative_like_r2_spans_zero():
    # R2 full profile: incorrect-answer length growth under GRPO, three seeds (tokens)
    grpo = [-0.7469587329336349, -5.278157091634803, -1.4068917437210615]
    v = stats.growth("incorrect-length growth under GRPO", fmt="+.2f").judge(grpo)
    # mean -2.477336, sd 2.447923, half-width 4.302653 * 2.447923 / sqrt(3) = 6.080985: [-8.56, +3.60] spans 0
    assert v.word == INCONCLUSIVE and "no number of seeds would detect the observed mean -2.48" in v.text
    assert v.interval.mean == pytest.approx(-2.477336, abs=1e-6)
    assert v.interval.sd == pytest.approx(2.447923, abs=1e-6)
    assert v.interval.lo == pytest.approx(-8.558321, abs=1e-5) and v.interval.hi == pytest.approx(3.603649, abs=1e-5)
    assert "A_s - B_s" not in v.criterion


def test_two_part_claim_partly_names_the_parts():
    grpo = [-0.7469587329336349, -5.278157091634803, -1.4068917437210615]
    dr = [-4.459010462254945, -5.750337438373236, -0.08613100510711291]
    rule = stats.AllOf(parts=(stats.growth("growth GRPO"), stats.Greater("growth GRPO - Dr. GRPO")))
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
    assert ni.judge(*_three_around(-0.0301)).word == INCONCLUSIVE  # mean below -0.03, upper end -0.0053 above it
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
    big = stats.Greater("gain")
    two = big.judge([0.60, 0.61], [0.5, 0.5])  # interval [0.041, 0.169] excludes 0
    assert two.interval.lo > 0 and two.word == INCONCLUSIVE and "only 2 seeds (< 3)" in two.text
    one = big.judge([0.9], [0.1])
    assert one.word == INCONCLUSIVE and "one seed (1): no interval" in one.text and "no interval" in one.text
    d = one.to_dict()
    assert d["interval"] == [None, None] and d["interval_why"]
    assert "fewer than 3 seeds: at most inconclusive" in big.criterion


# ---------------------------------------------------------------- premises, conditions and checks

def test_failed_premise_like_f1_names_it():
    premise = stats.Greater("GRPO length over the base (tokens)", fmt="+.1f")
    elr = stats.growth("ELR of 4/24", at_least=0.46, fmt="+.1%")
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
    p4 = stats.AllOf(parts=(stats.Greater("acc, replay - none"),), conditions=(routing,))
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
    with pytest.raises(ValueError, match="expected 2 parts"):
        p2.judge([fails])


def test_criterion_changed_note():
    v = stats.criterion_changed(stats.Verdict(stats.NOT_RUN, "x", ""), "the criterion asks arm 4/24, not yet run")
    assert v.text == "x; the criterion changed after these data were seen; the criterion asks arm 4/24, not yet run"
    assert set(stats.WORDS) >= {REPRODUCED, PARTLY, INCONCLUSIVE, NOT, NOT_TESTED, stats.NOT_RUN, SMOKE}


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
    rule = stats.Greater("gain", at_least=0.05)
    v = rule.judge([0.56, 0.57, 0.58], [0.5, 0.5, 0.5])
    s = stats.for_profile(v, "smoke")
    assert s.word == SMOKE and s.line().startswith("smoke: no verdict — ")
    assert s.criterion == rule.criterion and "criterion: " + rule.criterion in s.show()
    assert stats.for_profile(v, "full") is v and v.line().startswith("REPRODUCED — ")


def test_missing_values_are_named_not_skipped():
    v = stats.growth("growth").judge([1.0, None, float("nan")])
    assert v.word == INCONCLUSIVE and "no value at position(s) [1, 2]" in v.text and v.criterion
    assert stats.NotWorse("acc").judge([0.5, 0.5, 0.5], [0.5, float("inf"), 0.5]).word == INCONCLUSIVE
    assert stats.AtLeast("premise", 0.1).judge(None).word == INCONCLUSIVE
    assert stats.Slope("slope").judge([1, 2, 3], [1.0, None, 2.0]).word == INCONCLUSIVE
