"""The one `--set FIELD=VALUE` reader (gpolib/overrides.py) of the CLI and scale/: its value rules and refusals."""
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpolib import presets
from gpolib.overrides import parse_overrides, parse_value

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("raw, value", [
    ("3", 3), ("-2", -2), ("1e-3", 0.001), ("0.28", 0.28), ("True", True), ("False", False), ("None", None),
    ("'token'", "token"), ("bfloat16", "bfloat16"), ("true", "true"), ("(1, 2)", (1, 2)), ("__import__('os')",
                                                                                           "__import__('os')"),
])
def test_value_rules(raw, value):
    got = parse_value(raw)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("raw, sign", [("nan", 0), ("inf", 1), ("-Infinity", -1), ("+INF", 1)])
def test_non_finite_values_are_floats(raw, sign):
    got = parse_value(raw)
    assert isinstance(got, float)
    assert math.isnan(got) if sign == 0 else got == sign * math.inf


def test_fields_and_loss_fields_reach_the_config():
    sets = parse_overrides(["steps=5", "loss_eps_high=0.28", "dtype=float32", "steps=7"])
    assert sets == {"steps": 7, "loss_eps_high": 0.28, "dtype": "float32"}  # a later FIELD wins
    cfg = presets.get("grpo", **sets)
    assert (cfg.steps, cfg.loss.surrogate.eps_high, cfg.dtype) == (7, 0.28, "float32")


@pytest.mark.parametrize("raw, value", [("true", True), ("TRUE", True), ("True", True), ("1", True), ("false", False),
                                        ("False", False), ("FaLsE", False), ("0", False), (" true", True)])
def test_bool_fields_read_true_false_1_0_in_any_case(raw, value):
    sets = parse_overrides([f"train_router={raw}", f"gradient_checkpointing={raw}"])
    assert sets == {"train_router": value, "gradient_checkpointing": value}
    assert all(type(v) is bool for v in sets.values())
    cfg = presets.get("gspo", **sets)
    assert cfg.train_router is value and cfg.gradient_checkpointing is value


def test_only_bool_fields_read_words_as_booleans():
    """bool fields: TrainConfig's typed bool or Optional[bool]; elsewhere true / 1 keep their own reading, and a
    bool field still refuses other words (the config names the field)."""
    from gpolib.overrides import bool_fields

    assert bool_fields() >= {"train_router", "dynamic_sampling", "routing_replay", "gradient_checkpointing"}
    assert "steps" not in bool_fields() and "name" not in bool_fields()
    assert parse_overrides(["steps=1", "name=true", "gradient_checkpointing=None"]) == {
        "steps": 1, "name": "true", "gradient_checkpointing": None}
    assert type(parse_overrides(["steps=1"])["steps"]) is int
    with pytest.raises(ValueError, match=re.escape("train_router='yes' is invalid; allowed: True | False")):
        presets.get("grpo", **parse_overrides(["train_router=yes"]))


@pytest.mark.parametrize("item, named", [("steps", "'steps'"), ("=3", "'=3'"), ("my field=3", "'my field=3'"),
                                         ("steps=", "steps has no value")])
def test_bad_items_are_refused_by_name(item, named):
    with pytest.raises(ValueError, match=named):
        parse_overrides([item])


def test_scale_launchers_use_the_same_reader():
    """Neither launcher keeps a reader of its own: both import gpolib.overrides."""
    for script in ("trl_grpo.py", "verl_grpo.py"):
        text = (ROOT / "scale" / script).read_text()
        assert "from gpolib.overrides import parse_overrides" in text and "def parse_sets" not in text, script


def test_cli_refuses_a_bad_item_with_exit_code_2():
    out = subprocess.run([sys.executable, "-m", "gpolib", "train", "--preset", "grpo", "--out", "unused",
                          "--set", "steps"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and "--set 'steps' is invalid" in out.stderr
