"""The page's words, from hand-built claim records: the scoreboard's headline (gpolib/lab/report.py `headline`) and the
four phenomena's sentences (gpolib/lab/phenomena.py), each number computed here by hand; and the committed scoreboard's
records give every phenomenon a sentence (its number, or that it is missing)."""
import json
from pathlib import Path

from gpolib.lab import dapo, gfpo, phenomena, report

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


def test_s1_is_the_growth_of_v_along_the_response():
    within = {"0": {"L": [10, 20, 120], "V": [1.0, 2.0, 8.0], "leave": {"120": 0.02}},
              "1": {"L": [10, 20, 120], "V": [1.0, 4.0, 8.0], "leave": {"120": 0.04}}}
    text = phenomena.s1_ours({"evidence": {"within": within}})
    assert text.startswith("V(120)/V(20) = 3.0 (mean of 2 seeds); 3.0% of prefix products outside [0.5, 2] at L = 120")
    assert phenomena.s1_ours({"evidence": {"bucket_len": [1]}}) is None  # a record of the earlier design


def test_d2_is_the_panel_share_and_its_judged_rise():
    e = {"panel_first": [0.05, 0.07], "panel_last": [0.08, 0.12], "panel_steps": [0, 50, 100]}
    rise = {"text": f"{dapo.D2_RISE.what}: mean +0.040", "mean": 0.04, "interval": [-0.01, 0.09], "n": 2, "level": 0.95}
    rec = {"evidence": e, "judgement": {"parts": [{"text": "other", "mean": 9.0, "interval": [8.0, 10.0]}, rise]}}
    assert phenomena.d2_ours(rec) == ("all-correct share of a fixed panel 6.0% -> 10.0% from step 0 to 100, a rise of "
                                      "+4.0 points (95% CI [-1.0, +9.0], n=2)")
    assert phenomena.d2_ours({"evidence": e}) == "all-correct share of a fixed panel 6.0% -> 10.0% from step 0 to 100"


def test_p3_and_f1_read_the_papers_measures_or_say_they_are_missing():
    p3 = {"evidence": {"expert_change_per_layer": [0.01, 0.02, 0.06]}}
    assert phenomena.p3_ours(p3) == ("3.00% of activated experts change per update (mean over 3 layers; deepest layer "
                                     "6.00%)")
    f1 = {"evidence": {"elr": {gfpo.F1_ARM: [0.4, 0.6, 0.8]}}}
    assert phenomena.f1_ours(f1) == "ELR of Shortest 4/24 = +60.0% (seed mean)"
    judged = {"text": f"{gfpo.F1_ELR.what}: mean +0.600", "mean": 0.6, "interval": [0.1, 1.1], "n": 3, "level": 0.95}
    assert phenomena.f1_ours({**f1, "judgement": {"parts": [judged]}}) == (
        "ELR of Shortest 4/24 = +60.0% (95% CI [+10.0%, +110.0%], n=3)")
    missing = {"evidence": {"elr": {"gfpo-k8-g16-short": [0.1, 0.2, 0.3]}}}
    ph = phenomena.PHENOMENA[3]
    assert ph.claim == "F1" and phenomena.f1_ours(missing) is None
    assert phenomena.sentence(ph, missing, "+12.5 [-2.8, +27.8] premise") == (
        "our number is not in the scoreboard yet (judged so far: +12.5 [-2.8, +27.8] premise)")


def test_every_phenomenon_of_the_committed_scoreboard_has_a_sentence():
    claims = {c["id"]: c for c in json.loads((ROOT / "reports" / "claims.json").read_text())}
    assert [ph.claim for ph in phenomena.PHENOMENA] == ["S1", "D2", "P3", "F1"] == list(phenomena.FIGURES)
    for ph in phenomena.PHENOMENA:
        text = phenomena.sentence(ph, claims[ph.claim], report.headline(claims[ph.claim]))
        assert text and (ph.ours(claims[ph.claim]) == text or text.startswith("our number is not in the scoreboard"))
