"""Strict answer parser and correctness reward: adversarial inputs and a property test."""
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpolib.rewards import MAX_ANSWER_DIGITS, correctness_reward, parse_answer

VALID = re.compile(r"(?:.*\n)?A=(0|-?[1-9][0-9]*)\n?", re.DOTALL | re.ASCII)


@pytest.mark.parametrize("text,expected", [
    ("A=28", 28), ("7-3=4\n4*4=16\nA=16", 16), ("x\nA=-42\n", -42), ("A=0", 0),
    ("A=" + "9" * MAX_ANSWER_DIGITS, int("9" * MAX_ANSWER_DIGITS)),
])
def test_valid_answers(text, expected):
    assert parse_answer(text) == expected
    assert correctness_reward(text, expected) == 1.0
    assert correctness_reward(text, expected + 1) == 0.0


@pytest.mark.parametrize("text", [
    "", "\n", "A=", "A=-", "28", "a=28", "A= 28", "A=28 ", " A=28", "A=28\n\n", "A=28\r\n", "A=+28",
    "A=028", "A=-0", "A=2.0", "A=2e3", "A=1+1", "A=__import__('os')", "__import__('os')", "1+1",
    "A=28\nmore", "A=28x", "A=\u0662\u0668", "A=\uff12\uff18", "A=\u0968", "A=2\u200b8", "A=28\x00",
    "A=\x1b[31m28", "xA=28", "A=" + "9" * (MAX_ANSWER_DIGITS + 1), "A=" + "1" * 100_000, "9" * 100_000,
])
def test_malformed_is_zero(text):
    assert parse_answer(text) is None
    assert correctness_reward(text, 28) == 0.0


@pytest.mark.parametrize("text", [None, 28, 28.0, b"A=28", ["A=28"], {"A": 28}])
def test_non_str_is_zero(text):
    assert parse_answer(text) is None
    assert correctness_reward(text, 28) == 0.0


def test_bool_answer_key_is_zero():
    assert correctness_reward("A=1", True) == 0.0


@pytest.mark.parametrize("filler", ["a" * 1_000_000, "A=1\n" * 250_000, "9" * 1_000_000, "\n" * 1_000_000])
def test_one_megabyte_is_fast(filler):
    for text in (filler, filler + "\nA=7"):
        start = time.perf_counter()
        reward = correctness_reward(text, 7)
        assert time.perf_counter() - start < 0.05
        assert reward == (1.0 if text.endswith("\nA=7") else 0.0)


CODE_LIKE = st.sampled_from(["__import__('os')", "1+1", "eval('2')", "exec", "A=", "\n", "-", "0", "A=1",
                             "\u0661", "\uff11", "\u0967", "\r", "\x00", " ", "9" * 13])
TEXT = st.lists(st.one_of(st.text(max_size=20), CODE_LIKE, st.integers().map(str)), max_size=6).map("".join)


@settings(max_examples=1000, deadline=None)
@given(prefix=TEXT, tail=st.one_of(TEXT, st.integers(-10**13, 10**13).map(lambda n: f"A={n}")),
       newline=st.booleans(), answer=st.integers(-10**13, 10**13))
def test_reward_property(prefix, tail, newline, answer):
    text = prefix + tail + ("\n" if newline else "")
    reward = correctness_reward(text, answer)
    assert reward in (0.0, 1.0)
    match = VALID.fullmatch(text)
    expected = bool(match) and len(match.group(1).lstrip("-")) <= MAX_ANSWER_DIGITS and int(match.group(1)) == answer
    assert reward == (1.0 if expected else 0.0)
    if re.fullmatch(r"A=-?[0-9]+", tail) and prefix.endswith("\n"):  # a tail drawn as an integer answer line
        n = int(tail[2:])
        fits = len(str(abs(n))) <= MAX_ANSWER_DIGITS
        assert correctness_reward(text, n) == (1.0 if fits else 0.0)
