"""The one `--set FIELD=VALUE` reader (gpolib/overrides.py) of the CLI and scale/: its value rules and refusals."""
import math
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
