"""gpolib.engine.kernel_choice: the decoder's default kernels are the fastest measured on this machine, kept once."""
import json

import pytest
import torch

from gpolib.engine import kernel_choice, native
from gpolib.engine.decoder import Decoder
from gpolib.engine.spec import SampleSpec


def test_choose_keeps_the_earlier_choice_unless_a_later_one_is_margin_faster():
    assert kernel_choice.MARGIN == 1.2
    assert kernel_choice.choose({"all": 10.0, "attention": 9.0, "none": 8.5}) == "all"  # 8.5 * 1.2 = 10.2 > 10
    assert kernel_choice.choose({"all": 10.0, "attention": 9.0, "none": 8.0}) == "none"  # 8.0 * 1.2 = 9.6 <= 10
    assert kernel_choice.choose({"all": 94.8, "attention": 9.4, "none": 5.8}) == "none"  # 9.4 -> attention, then none
    assert kernel_choice.choose({"all": 94.8, "attention": 9.4, "none": 8.0}) == "attention"  # 8.0 * 1.2 = 9.6 > 9.4
    assert kernel_choice.choose({"all": 3.4, "attention": 9.0, "none": 5.0}) == "all"


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A fake built library in tmp_path, the kernel setting read afresh, neither environment variable set."""
    lib = tmp_path / "gpolib-kernels-test.so"
    monkeypatch.setattr(native, "library", lambda: object())
    monkeypatch.setattr(native, "build", lambda *a, **k: lib)
    for env in (native.DECODE_ENV, native.STEP_ENV):
        monkeypatch.delenv(env, raising=False)
    native.kernels_setting.cache_clear()
    kernel_choice.default.cache_clear()
    yield lib
    native.kernels_setting.cache_clear()
    kernel_choice.default.cache_clear()


def test_measured_once_recorded_and_read_back(machine, monkeypatch):
    calls = []

    def timed(kernels, *a, **k):
        calls.append(kernels)
        return {"all": 90.0, "attention": 9.0, "none": 6.0}
    monkeypatch.setattr(kernel_choice, "time_choices", timed)
    assert kernel_choice.default() == "none" and SampleSpec(max_new_tokens=4, eos_id=1, pad_id=0).kernels == "none"
    record = json.loads(kernel_choice.record_path(machine).read_text())
    assert record["choice"] == "none" and record["ms_per_step"]["all"] == 90.0 and record["margin"] == 1.2
    kernel_choice.default.cache_clear()
    assert kernel_choice.default() == "none" and calls == [native.KERNELS]  # the second process reads the record
    kernel_choice.record_path(machine).write_text(json.dumps({"choice": "attention"}))
    kernel_choice.default.cache_clear()
    assert kernel_choice.default() == "attention" and len(calls) == 1
    kernel_choice.record_path(machine).write_text("{not json")  # a broken record is measured again
    kernel_choice.default.cache_clear()
    assert kernel_choice.default() == "none" and len(calls) == 2


def test_an_environment_variable_overrides_the_measurement(machine, monkeypatch):
    monkeypatch.setattr(kernel_choice, "time_choices", lambda *a, **k: pytest.fail("measured despite the env"))
    monkeypatch.setenv(native.STEP_ENV, "1")
    assert kernel_choice.default() == "all"
    kernel_choice.default.cache_clear()
    native.kernels_setting.cache_clear()
    monkeypatch.setenv(native.STEP_ENV, "0")
    assert kernel_choice.default() == "attention" and kernel_choice.resolve("none") == "none"
    with pytest.raises(ValueError, match="allowed: all"):
        kernel_choice.resolve("fast")


def test_the_timing_runs_every_choice_on_the_random_model():
    ms = kernel_choice.time_choices(("attention", "none"), repeats=1, calls=1)
    assert set(ms) == {"attention", "none"} and all(0 < t < 5000 for t in ms.values())
    w = kernel_choice._random_weights()
    assert w["embed"].shape == (99, 128) and len(w["layers"]) == 4
    out = Decoder(w, 2, 8, kernels="none").prefill(torch.tensor([[2, 3], [4, 5]]), torch.ones(2, 2, dtype=torch.long),
                                                   torch.tensor([[0, 1], [0, 1]]))
    assert out.shape[-1] == 99 and torch.isfinite(out).all()
