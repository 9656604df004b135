"""Notebook 07 (PPO / VAPO, claims V1 and V2): the arms, the budget knob they need, the verdict rules."""
import pytest

from gpolib import presets
from gpolib.config import TrainConfig


def test_value_pretrain_share_of_steps():
    """A float is a share of the RL steps (at least 1 rollout); an int is a count; both refused out of range."""
    assert presets.get("vapo", steps=100, value_pretrain_steps=0.5).value_pretrain_len == 50
    assert presets.get("vapo", steps=3, value_pretrain_steps=0.5).value_pretrain_len == 2  # round(1.5) = 2
    assert presets.get("vapo", steps=1, value_pretrain_steps=0.1).value_pretrain_len == 1  # at least one
    assert presets.get("vapo", steps=3).value_pretrain_len == 50  # the preset's count, whatever the steps
    cfg = presets.get("vapo", steps=100, value_pretrain_steps=0.5)
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    for bad in (1.5, 0.0, -2):
        with pytest.raises(ValueError, match="value_pretrain_steps"):
            presets.get("vapo", value_pretrain_steps=bad)
    with pytest.raises(ValueError, match="value_pretrain_steps"):
        presets.get("grpo", value_pretrain_steps=0.5)  # a value-model field without the value model
