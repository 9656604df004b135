"""Strict JSON (gpolib/jsonio.py): NaN and Infinity never reach a file; the reason sits beside the null."""
import json
import math

import numpy as np
import pytest
import torch

from gpolib import jsonio


def test_non_finite_become_null_with_reason():
    obj = {"a": math.nan, "b": [1.0, math.inf, -math.inf], "c": {"d": math.nan}, "e": 2.5, "f": "NaN"}
    out = jsonio.loads(jsonio.dumps(obj))
    assert out["a"] is None and out["a_why"] == "was NaN"
    assert out["b"] == [1.0, None, None] and out["b_why"] == "null at [1, 2]: was +Infinity; was -Infinity"
    assert out["c"] == {"d": None, "d_why": "was NaN"}
    assert out["e"] == 2.5 and out["f"] == "NaN" and "e_why" not in out


def test_caller_reason_covers_nested_values_and_existing_why_is_kept():
    obj = {"elr": {"gfpo-k8": math.nan, "gfpo-k4": 0.4}, "x": math.nan, "x_why": "mine"}
    out = jsonio.strict(obj, why={"elr": "GRPO did not lengthen answers: no excess length"})
    assert out["elr"] == {"gfpo-k8": None, "gfpo-k8_why": "GRPO did not lengthen answers: no excess length",
                          "gfpo-k4": 0.4}
    assert out["x"] is None and out["x_why"] == "mine"


def test_numpy_and_torch_values():
    obj = {"np": np.float32("nan"), "arr": np.array([1.0, np.inf]), "t": torch.tensor(0.5), "i": np.int64(3)}
    out = jsonio.loads(jsonio.dumps(obj))
    assert out == {"np": None, "np_why": "was NaN", "arr": [1.0, None], "arr_why": "null at [1]: was +Infinity",
                   "t": 0.5, "i": 3}
    with pytest.raises(TypeError, match="not JSON serialisable"):
        jsonio.dumps({"o": object()})


def test_strict_reader_rejects_nan_tokens():
    assert json.loads('{"a": NaN}')["a"] != 0  # Python's reader accepts it ...
    for text in ('{"a": NaN}', "[Infinity]", "[-Infinity]"):
        with pytest.raises(ValueError, match="not strict JSON"):
            jsonio.loads(text)  # ... ours does not


def test_write_and_lines(tmp_path):
    p = jsonio.write(tmp_path / "s.json", {"acc": math.nan, "n": 3})
    assert p.read_text().endswith("\n") and '"acc": null' in p.read_text()
    assert jsonio.read(p) == {"acc": None, "acc_why": "was NaN", "n": 3}
    assert sorted(q.name for q in tmp_path.iterdir()) == ["s.json"]  # no temporary file left
    lines = jsonio.dumps_lines([{"a": 1.0}, {"a": math.inf}]).splitlines()
    assert [jsonio.loads(line) for line in lines] == [{"a": 1.0}, {"a": None, "a_why": "was +Infinity"}]


def test_committed_json_is_strict():
    """Every JSON file the project has written and committed (runs, summaries, claims, benchmark results,
    model metadata) parses without NaN/Infinity."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(["git", "ls-files", "-z", "reports", "benchmarks", "data"], cwd=root, capture_output=True,
                         check=True).stdout.decode().split("\0")
    files = [root / p for p in out if p.endswith((".json", ".jsonl")) and (root / p).exists()]
    assert files
    for f in files:
        lines = f.read_text().splitlines() if f.suffix == ".jsonl" else [f.read_text()]
        for line in filter(str.strip, lines):
            jsonio.loads(line)  # raises naming the token
