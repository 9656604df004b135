"""Rules of evidence (gpolib/lab/stats.py, intervals.py): hand-computed intervals and every verdict rule."""
import math

import numpy as np
import pytest

from gpolib.lab import stats
from gpolib.lab.intervals import betainc, fit_line, mean_interval, paired, t_cdf, t_quantile
from gpolib.lab.stats import NOT, PARTLY, REPRODUCED, SMOKE

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


# ---------------------------------------------------------------- A > B

def test_greater_partly_when_interval_includes_zero():
    v = stats.Greater("acc, A - B").judge([0.52, 0.55, 0.53], [0.5, 0.5, 0.5])
    assert v.word == PARTLY
    assert "[-0.005, +0.071]" in v.text and "n=3" in v.text
    assert v.criterion == stats.Greater("acc, A - B").criterion


def test_greater_reproduced_and_g1_threshold():
    # differences 0.06, 0.07, 0.08: mean 0.07, sd 0.01, half-width 4.302653 * 0.01 / sqrt(3) = 0.0248414
    g1 = stats.Greater("held-out accuracy, GRPO - base", at_least=0.05)
    v = g1.judge([0.56, 0.57, 0.58], [0.5, 0.5, 0.5])
    assert v.word == REPRODUCED
    assert (v.interval.lo, v.interval.hi) == (pytest.approx(0.0451586, abs=1e-6), pytest.approx(0.0948414, abs=1e-6))
    # 0.03, 0.04, 0.05: interval [0.0152, 0.0648] excludes 0 but the mean 0.04 < 5 points -> partly
    assert g1.judge([0.53, 0.54, 0.55], [0.5, 0.5, 0.5]).word == PARTLY
    assert stats.Greater("x").judge([0.49, 0.50, 0.48], [0.5, 0.5, 0.5]).word == NOT  # wrong sign
    assert "mean >= +0.050" in g1.criterion and "mean >=" not in stats.Greater("x").criterion


def test_growth_negative_like_r2_is_not_reproduced():
    # R2 full profile: incorrect-answer length growth under GRPO, three seeds (tokens)
    grpo = [-0.7469587329336349, -5.278157091634803, -1.4068917437210615]
    v = stats.growth("incorrect-length growth under GRPO", fmt="+.2f").judge(grpo)
    # mean -2.477336, sd 2.447923, half-width 4.302653 * 2.447923 / sqrt(3) = 6.080985
    assert v.word == NOT
    assert v.interval.mean == pytest.approx(-2.477336, abs=1e-6)
    assert v.interval.sd == pytest.approx(2.447923, abs=1e-6)
    assert v.interval.lo == pytest.approx(-8.558321, abs=1e-5) and v.interval.hi == pytest.approx(3.603649, abs=1e-5)
    assert "A_s - B_s" not in v.criterion


def test_r2_halves_rule_on_the_committed_numbers():
    grpo = [-0.7469587329336349, -5.278157091634803, -1.4068917437210615]
    dr = [-4.459010462254945, -5.750337438373236, -0.08613100510711291]
    rule = stats.AllOf(parts=(stats.growth("growth GRPO"), stats.Greater("growth GRPO - Dr. GRPO")), mode=stats.HALVES)
    grow, more = rule.parts[0].judge(grpo), rule.parts[1].judge(grpo, dr)
    assert (grow.word, more.word) == (NOT, PARTLY)  # differences 3.71, 0.47, -1.32: mean +0.95, CI includes 0
    assert rule.judge([grow, more]).word == NOT  # neither half holds (the old majority rule said reproduced)
    yes = stats.Verdict(REPRODUCED, "", "")
    assert rule.judge([yes, grow]).word == PARTLY  # only one half holds
    assert rule.judge([more, more]).word == PARTLY
    assert rule.judge([yes, yes]).word == REPRODUCED


# ---------------------------------------------------------------- A not worse than B

def _three_around(mean, spread=0.01):
    """A - B = mean - spread, mean, mean + spread: sd = spread, lower end = mean - t2 * spread / sqrt(3)."""
    return [mean - spread, mean, mean + spread], [0.0, 0.0, 0.0]


def test_non_inferiority_boundary():
    ni, half = stats.NotWorse("acc, GSPO - GRPO"), T2 * 0.01 / math.sqrt(3)  # 0.0248414
    assert ni.judge(*_three_around(-0.0299 + half)).word == REPRODUCED  # lower end -0.0299
    assert ni.judge(*_three_around(-0.0301 + half)).word == PARTLY  # lower end -0.0301, mean -0.0053
    assert ni.judge(*_three_around(-0.0301)).word == NOT  # mean below -0.03
    assert ni.judge(*_three_around(-0.03 + 0.0248414, spread=0.0)).word == REPRODUCED  # sd 0: lower end = mean
    assert "-0.03" in ni.criterion


def test_p2_two_seeds_is_at_most_partly():
    gspo, grpo = [0.8313802083333334, 0.8229166666666666], [0.8463541666666666, 0.8287760416666666]
    v = stats.NotWorse("final reward, GSPO - GRPO").judge(gspo, grpo)
    # differences -0.014974, -0.005859: mean -0.010417, sd 0.006445, half 12.706205 * 0.006445 / sqrt(2) = 0.057906
    assert v.interval.lo == pytest.approx(-0.068323, abs=1e-5)
    assert v.word == PARTLY and "only 2 seeds (< 3)" in v.text


def test_fewer_than_three_seeds_never_reproduced():
    big = stats.Greater("gain")
    two = big.judge([0.60, 0.61], [0.5, 0.5])  # interval [0.041, 0.169] excludes 0
    assert two.interval.lo > 0 and two.word == PARTLY and "only 2 seeds (< 3): at most partly" in two.text
    one = big.judge([0.9], [0.1])
    assert one.word == PARTLY and "only 1 seed " in one.text and "no interval" in one.text
    d = one.to_dict()
    assert d["interval"] == [None, None] and d["interval_why"]
    assert big.judge([0.4], [0.5]).word == NOT
    assert "fewer than 3 seeds: at most partly" in big.criterion


# ---------------------------------------------------------------- premises and checks

def test_failed_premise_like_f1_names_it():
    premise = stats.AtLeast("GRPO length growth over the base", at_least=0.10, fmt=".1%")
    cut = stats.Greater("length cut 1 - len_GFPO/len_GRPO", at_least=0.30, partly_at_least=0.10, paired=False)
    acc = stats.NotWorse("held-out accuracy, GFPO - GRPO")
    f1 = stats.AllOf(parts=(cut, acc), premises=(premise,))
    parts = [cut.judge([0.35, 0.40, 0.38]), acc.judge([0.85, 0.86, 0.84], [0.85, 0.85, 0.85])]
    assert [p.word for p in parts] == [REPRODUCED, REPRODUCED]
    v = f1.judge(parts, [premise.judge([0.01, 0.012, 0.008])])
    assert v.word == NOT
    assert v.text.startswith("premise failed: GRPO length growth over the base 1.0% < 10.0%")
    assert v.failed and "premise: GRPO length growth over the base >= 10.0%" in v.criterion
    assert f1.judge(parts, [premise.judge([0.2, 0.25, 0.3])]).word == REPRODUCED


def test_f1_partly_needs_the_cut_beyond_its_interval():
    cut = stats.Greater("cut", at_least=0.30, partly_at_least=0.10, paired=False)
    assert cut.judge([0.12, 0.15, 0.13]).word == PARTLY  # >= 10% and interval above 0
    assert cut.judge([0.013, 0.010, 0.016]).word == NOT  # 1.3%: the old rule said partly
    assert cut.judge([0.30, -0.05, 0.20]).word == NOT  # mean 0.15 but the interval includes 0


def test_at_least_every_seed_and_worst_combination():
    clip = stats.AtLeast("clip share GSPO / GRPO", at_least=10, every=True, fmt=".1f")
    assert clip.judge([181.2, 155.5, 160.0]).word == REPRODUCED
    fails = clip.judge([181.2, 9.5, 160.0])
    assert fails.word == NOT and "lowest" in fails.text and "in every seed" in clip.criterion
    p2 = stats.AllOf(parts=(clip, stats.NotWorse("acc")))
    ni_partly = stats.Verdict(PARTLY, "", "")
    assert p2.judge([clip.judge([100, 120, 140]), ni_partly]).word == PARTLY
    assert p2.judge([fails, ni_partly]).word == NOT
    with pytest.raises(ValueError, match="expected 2 parts"):
        p2.judge([fails])


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
    assert f.lo > 0 and f.r2 < 0.5 and v.word == PARTLY  # interval excludes 0, R^2 < 0.5
    # a weak fit over 6 buckets (R^2 0.057): the interval includes 0 -> not reproduced
    weak = stats.Slope("slope").judge([1, 2, 3, 4, 5, 6], [2, 1, 3, 1, 3, 2])
    assert weak.fit.slope == pytest.approx(2 / 17.5) and weak.fit.r2 == pytest.approx(0.0571429, abs=1e-6)
    assert weak.word == NOT
    few = stats.Slope("slope").judge([1, 2, 3, 4, 5], [1, 2, 3, 4, 5.1])
    assert few.fit.lo > 0 and few.fit.r2 > 0.99 and few.word == PARTLY  # only 5 buckets


def test_s1_flat_sequence_spread_only_demotes():
    flat = stats.AtLeast("10% of the token slope - log s_i spread slope", at_least=0.0, fail_word=PARTLY)
    s1 = stats.AllOf(parts=(stats.Slope("slope"), flat))
    good = stats.Slope("slope").judge([1, 2, 3, 4, 5, 6], [1, 3, 2, 5, 4, 6])
    assert s1.judge([good, flat.judge(0.001)]).word == REPRODUCED
    assert s1.judge([good, flat.judge(-0.001)]).word == PARTLY


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
    assert v.word == NOT and "no value at position(s) [1, 2]" in v.text and v.criterion
    assert stats.NotWorse("acc").judge([0.5, 0.5, 0.5], [0.5, float("inf"), 0.5]).word == NOT
    assert stats.AtLeast("premise", 0.1).judge(None).word == NOT
    assert stats.Slope("slope").judge([1, 2, 3], [1.0, None, 2.0]).word == NOT
