"""The page's words, from hand-built claim records: the scoreboard's headline (gpolib/lab/report.py `headline`) and the
four phenomena's sentences (gpolib/lab/phenomena.py), each number computed here by hand; and the committed scoreboard's
records give every phenomenon a sentence (its number, or that it is missing)."""
import json
from pathlib import Path

from gpolib.lab import phenomena, report

ROOT = Path(__file__).resolve().parents[1]


def test_headline_is_the_first_judged_interval_number_first():
    rec = {"ours": "held-out accuracy, GRPO - base: mean +0.107, 95% CI [+0.091, +0.123] over n=3 (per seed ...)",
           "judgement": {"mean": 0.107421875, "interval": [0.0913759, 0.1234678], "n": 3}}
    assert report.headline(rec) == "+0.107 [+0.091, +0.123] held-out accuracy, GRPO - base"
    parts = {"parts": [{"word": "reproduced", "text": "clip share GSPO / GRPO 413.3 >= 10.0"},
                       {"word": "inconclusive", "text": "entropy, A - B: mean -0.0000, 95% CI ...", "mean": -1.8e-05,
                        "interval": [-0.000626, 0.00059]}]}
    assert report.headline({"ours": "x", "judgement": parts}) == "-0.0000 [-0.0006, +0.0006] entropy, A - B"  # width 1.2e-3
    wide = {"ours": "length: mean +12.5", "judgement": {"mean": 12.499, "interval": [-2.79, 27.79]}}
    assert report.headline(wide) == "+12.5 [-2.8, +27.8] length"


def test_headline_without_an_interval_puts_per_seed_numbers_first_else_ours():
    seeds = {"parts": [{"text": "slope of V(L) per seed: 3.64e-04 [2.43e-04, 4.83e-04] (n=1)"}, {"text": "other"}]}
    assert report.headline({"ours": "x", "judgement": seeds}) == "3.64e-04 [2.43e-04, 4.83e-04] (n=1) slope of V(L)"
    assert report.headline({"ours": "largest identity error 2.2e-16"}) == "largest identity error 2.2e-16"
    assert report.headline({"ours": ""}) == ""
    no_interval = {"ours": "one seed", "judgement": {"mean": 0.1, "interval": [None, None]}}
    assert report.headline(no_interval) == "one seed"


def test_headline_keeps_the_unit_its_text_writes():
    """ELR is written in percent by its rule: the headline says +99.6%, not +1.00 (one unit per measure)."""
    elr = {"text": "ELR of Shortest 4/24: mean +99.6%, 95% CI [+92.2%, +106.9%] over n=3", "mean": 0.9957,
           "interval": [0.92197, 1.06942], "n": 3}
    assert report.headline({"ours": "x", "judgement": {"parts": [elr]}}) == "+99.6% [+92.2%, +106.9%] ELR of Shortest 4/24"


def test_s1_is_the_share_of_products_outside_the_band_per_seed():
    within = {"0": {"L": [10, 20, 120], "V": [1.0, 2.0, 8.0], "leave": {"120": 0.02}},
              "1": {"L": [10, 20, 120], "V": [1.0, 4.0, 8.0], "leave": {"120": 0.04}}}
    assert phenomena.s1_ours({"evidence": {"within": within}}) == (
        "prefix products outside [0.5, 2] at L = 120: 2.0%, 4.0% per seed (0.99^L leaves the band at L = 69)")
    assert phenomena.s1_ours({"evidence": {"bucket_len": [1]}}) is None  # a record of the earlier design
    cells = [{"mu": 16, "lr x": 1.0, "out@200": 0.25}, {"mu": 1, "lr x": 1.0, "out@200": 0.004},
             {"mu": 1, "lr x": 3.0, "out@200": 0.01}, {"mu": 16, "lr x": 3.0, "out@200": 0.5}]
    assert phenomena.s1_ours({"evidence": {"within": within, "cells": cells}}) == (
        "200-token prefix products outside [0.5, 2]: 0.4% at mu = 1 -> 25.0% at mu = 16 (lr x 1); 1.0% at mu = 1 -> "
        "50.0% at mu = 16 (lr x 3) (0.99^L leaves the band at L = 69)")


def test_d2_is_the_panel_share_as_a_share():
    e = {"panel_first": [0.05, 0.07], "panel_last": [0.08, 0.12], "panel_steps": [0, 50, 100]}
    assert phenomena.d2_ours({"evidence": e}) == "all-correct share of the fixed panel 0.060 -> 0.100 from step 0 to 100"
    assert phenomena.d2_ours({"evidence": {}}) is None


def test_p3_and_f1_read_the_papers_measures_or_say_they_are_missing():
    p3 = {"evidence": {"expert_change_per_layer": [0.01, 0.02, 0.06]}}
    assert phenomena.p3_ours(p3) == ("3.00% of activated experts change per update (mean over 3 layers; deepest layer "
                                     "6.00%)")
    f1 = {"ours": "ELR ...; ELR per arm: shortest 4/8 +67.8%, token eff. 8/16 +12.0% (paper: 79.5%). Its criterion ..."}
    assert phenomena.f1_ours(f1) == "ELR per arm: shortest 4/8 +67.8%, token eff. 8/16 +12.0% (paper: 79.5%)"
    ph = phenomena.PHENOMENA[3]
    assert ph.claim == "F1" and phenomena.f1_ours({"ours": "no arms"}) is None
    assert phenomena.sentence(ph, {"ours": "no arms"}, "+12.5 [-2.8, +27.8] premise") == "ours: +12.5 [-2.8, +27.8] premise"
    assert phenomena.sentence(ph, {}, "") == "our number is not in the scoreboard yet"


def test_every_card_leads_with_the_scoreboards_headline():
    claims = {c["id"]: c for c in json.loads((ROOT / "reports" / "claims.json").read_text())}
    assert [ph.claim for ph in phenomena.PHENOMENA] == ["S1", "D2", "P3", "F1"] == list(phenomena.FIGURES)
    assert [ph.claims for ph in phenomena.PHENOMENA] == [("S1",), ("D2",), ("P3", "P4"), ("F1", "F2")]
    for ph in phenomena.PHENOMENA:
        head = report.headline(claims[ph.claim])
        if claims[ph.claim]["verdict"] == report.NOT_RUN:  # S1 under its grid criterion: no judged number yet
            assert head == "" and phenomena.sentence(ph, claims[ph.claim], head).startswith("our number is not")
            continue
        assert head and phenomena.sentence(ph, claims[ph.claim], head).startswith(f"ours: {head}")
