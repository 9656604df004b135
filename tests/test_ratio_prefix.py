"""S1 within responses (gpolib/lab/ratio_prefix.py) and the per-seed interval rule (stats.EverySeed): hand-computed."""
import math

import numpy as np
import pytest

from gpolib.lab import ratio_prefix as rp
from gpolib.lab import stats


def _tokens(rows, steps, prompts):
    lengths = [len(r) for r in rows]
    return {"log_rho": np.concatenate([np.asarray(r, dtype=np.float32) for r in rows]),
            "offsets": np.concatenate([[0], np.cumsum(lengths)]), "step": np.asarray(steps),
            "prompt": np.asarray(prompts), "advantage": np.zeros(len(rows)), "length": np.asarray(lengths)}


def test_prefix_sums_follow_each_response_and_drop_short_ones():
    tok = _tokens([[0.1, 0.2, 0.3], [1.0, -1.0], [0.5, 0.5, 0.5, 9.0]], [0, 0, 1], [0, 1, 0])
    S, step, prompt = rp.prefix_sums(tok, min_len=3)
    assert np.allclose(S, [[0.1, 0.3, 0.6], [0.5, 1.0, 1.5]], atol=1e-6)
    assert step.tolist() == [0, 1] and prompt.tolist() == [0, 0]


def test_pooled_var_is_within_step():
    # step 0: 1, 3 (ss 2); step 1: 10, 14, 18 (ss 32); pooled (2 + 32) / (1 + 2) = 34 / 3; one response alone adds nothing
    S = np.array([[1.0], [3.0], [10.0], [14.0], [18.0], [100.0]])
    step = np.array([0, 0, 1, 1, 1, 2])
    assert rp.pooled_var(S, step)[0] == pytest.approx(34 / 3)
    # weights count a response twice: step 0 = 1, 1, 3 -> mean 5/3, ss 8/3; pooled (8/3 + 32) / (2 + 2)
    w = np.array([2, 1, 1, 1, 1, 1])
    assert rp.pooled_var(S, step, w)[0] == pytest.approx((8 / 3 + 32) / 4)


def test_v_curve_grows_linearly_for_independent_drift():
    rng = np.random.default_rng(1)
    rows = rng.normal(0, 0.1, size=(4000, 120))
    tok = _tokens(list(rows), np.repeat(np.arange(20), 200), np.tile(np.repeat(np.arange(25), 8), 20))
    S, step, prompt = rp.prefix_sums(tok)
    curve = rp.v_curve(S, step)
    assert np.allclose(np.array(curve["V"]) / np.array(curve["L"]), 0.01, rtol=0.1)  # V(L) = L sigma^2
    assert curve["V_geo"][-1] < curve["V_geo"][1]  # the geometric mean's spread shrinks as 1/L
    boot = rp.bootstrap_slope(S, step, prompt, n_boot=200)
    assert boot["lo"] < 0.01 < boot["hi"] and boot["lo"] > 0
    assert rp.slope(np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 6.0])) == pytest.approx(2.0)


def test_leave_share_and_compounding_length():
    S = np.cumsum(np.full((2, 120), math.log(0.99)), axis=1)
    S[1] = 0.0
    assert rp.leave_share(S) == {'20': 0.0, '60': 0.0, '120': 0.5}  # 0.99^69 < 0.5 <= 0.99^68
    assert rp.compounding_length(0.99) == 69 and 0.99 ** 69 < 0.5 <= 0.99 ** 68
    assert rp.leave_curve(S)[68] == 0.5 and rp.leave_curve(S)[67] == 0.0


def test_token_file_round_trip_and_refusal(tmp_path):
    tok = _tokens([[0.1, 0.2], [0.3]], [0, 0], [0, 1])
    rp.save_tokens(tmp_path / "t.npz", tok["log_rho"], tok["offsets"], tok["step"], tok["prompt"], tok["advantage"])
    back = rp.load_tokens(tmp_path / "t.npz")
    assert back["length"].tolist() == [2, 1] and np.allclose(back["log_rho"], [0.1, 0.2, 0.3])
    np.savez(tmp_path / "bad.npz", log_rho=np.zeros(2))
    with pytest.raises(ValueError, match="missing offsets"):
        rp.load_tokens(tmp_path / "bad.npz")


def test_every_seed_words():
    rule = stats.EverySeed("slope of V(L)")
    assert rule.judge([1.0, 2.0, 3.0], [0.5, 0.1, 1.0], [2.0, 3.0, 4.0]).word == stats.REPRODUCED
    v = rule.judge([1.0, 2.0, 3.0], [0.5, -0.1, 1.0], [2.0, 3.0, 4.0])
    assert v.word == stats.INCONCLUSIVE and "seed index [1]" in v.text
    assert rule.judge([1.0, -2.0, 3.0], [0.5, -3.0, 1.0], [2.0, -1.0, 4.0]).word == stats.NOT
    assert rule.judge([1.0, 2.0], [0.5, 0.1], [2.0, 3.0]).word == stats.INCONCLUSIVE  # two seeds only
    assert rule.judge([1.0, float("nan"), 3.0], [0.5, 0.1, 1.0], [2.0, 3.0, 4.0]).word == stats.INCONCLUSIVE
    with pytest.raises(ValueError):
        rule.judge([1.0], [0.5, 0.1], [2.0])


def _summary(slope, lo, hi, drop=1e-4):
    return {"slope": slope, "lo": lo, "hi": hi, "v_geo_drop": drop, "n_long": 600, "leave": {"20": 0.0, "60": 0.1,
                                                                                             "120": 0.3}}


def test_verdict_s1_words_from_within_evidence():
    from gpolib.lab import ratio_decay

    old = {"bucket_len": [60, 80, 100, 120, 140, 160], "var_log_prod_rho": [6, 5, 4, 3, 2, 1]}
    assert ratio_decay.verdict_s1(old).word == stats.NOT_RUN  # the earlier design's record: not yet run
    good = {**old, "within": {str(s): _summary(1e-3, 5e-4, 2e-3) for s in range(3)}}
    v = ratio_decay.verdict_s1(good)  # DESIGN 2026-12-06: the grid's regime share is the part; V(L) only checks
    assert v.word == stats.NOT_RUN and "the checks: slope of V(L)" in v.text and "0.99^L leaves it at L = 69" in v.text
    grid = {"panel": {"prompts": 16, "samples": 2, "n_ops": 32, "budget": 256}, "regime_cell": [16, 3.0],
            "mu_slope": {"1": {"slope": 0.9, "lo": 0.7, "hi": 1.1, "n": 3}},
            "cells": [{"mu": 16, "lr x": 3.0, "L*": 150.0, "collapsed": False},
                      {"mu": 8, "lr x": 3.0, "L*": 300.0, "collapsed": True, "collapsed vs card": True}]}
    good = {**good, **grid}
    v = ratio_decay.verdict_s1({**good, "regime_share": 0.15})
    assert v.word == stats.REPRODUCED and "secondary" in v.text and "checks passed: slope of V(L)" in v.text
    assert ("measured on the long-response panel, not on the RL batch: 16 fixed 32-operator chains x 2 responses"
            in v.text and "at L = 200 (mu = 16, lr x 3)" in v.text and "lr x 1: 0.90 [0.70, 1.10] over 3 seeds"
            in v.text and "collapsed cells: mu 8 lr x 3" in v.text and "mu 16 lr x 3: 150" in v.text)
    assert ratio_decay.verdict_s1({**good, "regime_share": 0.05}).word == stats.NOT  # no cell reaches 10%
    spans = {**old, **grid, "regime_share": 0.15, "within": {"0": _summary(1e-3, -1e-4, 2e-3),
                                                     "1": _summary(1e-3, 5e-4, 2e-3), "2": _summary(1e-3, 5e-4, 2e-3)}}
    v = ratio_decay.verdict_s1(spans)  # a check that does not pass (the slope spans 0 in one seed): not reproduced
    assert v.word == stats.NOT and "CHECK FAILED" in v.text and "seed index [0]" in v.text
    grows = {**old, **grid, "regime_share": 0.15, "within": {str(s): _summary(1e-3, 5e-4, 2e-3, drop=-1e-5) for s in range(3)}}
    assert ratio_decay.verdict_s1(grows).word == stats.NOT  # the geometric mean's spread grows: a check fails


def test_band_length():
    # V(L) = 4e-4 L reaches (log 2)^2 = 0.480453 at L = 1201.1; no growth never reaches it
    assert rp.band_length(4e-4) == pytest.approx(0.4804530139182014 / 4e-4)
    assert rp.band_length(0.0) == float("inf") and rp.band_length(-1e-3) == float("inf")
