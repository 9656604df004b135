"""Notebook 10's lab module (gpolib/lab/family_round2.py): the demos by hand, and "not yet run" while its runs are absent."""
import math

import pytest

from gpolib import presets
from gpolib.lab import family_round2, report, stats


def test_sapo_gradient_of_one_token_by_hand():
    g = family_round2.token_gradients([1.0, 1.5], [1.0, -1.0])
    sig = 1 / (1 + math.exp(-0.5))
    assert g.loc[(1.0, 1.0), "sapo"] == pytest.approx(1.0) and g.loc[(1.5, 1.0), "grpo"] == 0.0
    assert g.loc[(1.5, 1.0), "sapo"] == pytest.approx(4 * sig * (1 - sig) * 1.5)
    sig_neg = 1 / (1 + math.exp(-1.05 * 0.5))
    assert g.loc[(1.5, -1.0), "sapo"] == pytest.approx(-4 * sig_neg * (1 - sig_neg) * 1.5)


def test_vespo_weight_is_one_at_w_1_and_peaks_at_k_over_lambda():
    t = family_round2.vespo_weights([0.0, math.log(2 / 3), math.log(3 / 2)])
    assert t.loc[0.0].tolist() == pytest.approx([1.0, 1.0])
    peak_pos = math.exp(3 + 2 * math.log(2 / 3) - 2)  # k = 2, lambda = 3 at w = 2/3
    assert t.loc[math.log(2 / 3), "phi, A +1"] == pytest.approx(peak_pos)
    assert t.loc[math.log(3 / 2), "phi, A -1"] == pytest.approx(math.exp(2 + 3 * math.log(1.5) - 3))


def test_off_policy_demo_drops_only_drifted_negatives():
    t = family_round2.off_policy_demo([0.0, 0.2], [1.0, -1.0], delta=0.1)
    assert t["kept"].tolist() == [1, 1, 1, 0]


def test_absent_runs_leave_the_claims_not_yet_run():
    for cid, fn in (("C5", family_round2.c5_evidence), ("C6", family_round2.c6_evidence), ("C7", family_round2.c7_evidence)):
        e = fn({}, {}, range(3))
        assert report.judge(cid, e).word == stats.NOT_RUN and "not yet run" in report.judge(cid, e).text


def test_arms_share_notebook_09s_grpo_and_use_the_presets():
    assert family_round2.ARMS["grpo_mu4"] == {"preset": "grpo", "mu": 4} and family_round2.HOME == {"grpo_mu4": "09_beyond"}
    for arm in family_round2.ARMS.values():
        assert presets.get(arm["preset"], mu=arm["mu"]).mu == 4
    assert set(family_round2.RULES) == set(family_round2.VERDICTS) == {"C5", "C6", "C7"}
