"""GFPO filter (Sec. 3, Eq. 3), length reduction and ELR (Eq. 4) on hand-made numbers."""
import math

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
