"""Config fields of the PPO / VAPO baselines: neutral defaults, validation naming the field."""
import json
from pathlib import Path

import pytest

from gpolib.config import TrainConfig
from gpolib.validation import GAE_ONLY

VALUE_FIELDS = ("advantage_estimator", "positive_lm_weight") + GAE_ONLY


def test_defaults_are_neutral_for_recorded_runs():
    """Committed runs predate the fields: with the fields at their defaults, their identity does not change."""
    assert not set(VALUE_FIELDS) & set(TrainConfig().identity())
    runs = sorted(Path(__file__).resolve().parent.parent.glob("reports/runs/*/*/config.json"))
    checked = 0
    for path in runs:
        blob = json.loads(path.read_text())
        if "fingerprint" not in blob:  # model cards of notebook 00, not run configs
            continue
        recorded = {k: v for k, v in blob["config"].items() if k not in VALUE_FIELDS}
        cfg = TrainConfig.from_dict(recorded)
        assert not set(VALUE_FIELDS) & set(cfg.identity()), path
        assert TrainConfig.same_run(blob["config"], cfg) == [], path
        checked += 1
    assert checked >= 1  # the committed runs of the current task regime (notebook 00's GRPO run, ...)


@pytest.mark.parametrize("changes,field", [
    (dict(advantage_estimator="critic"), "advantage_estimator"),
    (dict(advantage_estimator="gae", gamma=1.5), "gamma"),
    (dict(advantage_estimator="gae", lambda_policy=-0.1), "lambda_policy"),
    (dict(advantage_estimator="gae", lambda_critic=2.0), "lambda_critic"),
    (dict(advantage_estimator="gae", lambda_alpha=0.0), "lambda_alpha"),
    (dict(advantage_estimator="gae", value_lr_scale=0.0), "value_lr_scale"),
    (dict(advantage_estimator="gae", value_pretrain_steps=-1), "value_pretrain_steps"),
    (dict(advantage_estimator="gae", value_pretrain_steps=1.5), "value_pretrain_steps"),
    (dict(advantage_estimator="gae", value_clip=-0.2), "value_clip"),
    (dict(positive_lm_weight=-0.1), "positive_lm_weight"),
    (dict(advantage_estimator="gae", lora_r=0), "lora_r"),
    (dict(advantage_estimator="gae", gfpo_k=4), "gfpo_k"),
    (dict(advantage_estimator="gae", adv_scale="none"), "adv_scale"),
])
def test_invalid_value_fields_name_the_field(changes, field):
    with pytest.raises(ValueError, match=rf"^{field}="):
        TrainConfig(**changes)


@pytest.mark.parametrize("field,value", [("gamma", 0.99), ("lambda_policy", 0.9), ("lambda_critic", 1.0),
                                         ("lambda_alpha", 0.05), ("value_lr_scale", 2.0),
                                         ("value_pretrain_steps", 5), ("value_clip", 0.2)])
def test_gae_fields_refused_without_the_gae_estimator(field, value):
    with pytest.raises(ValueError, match=rf"^{field}=.*unless advantage_estimator='gae'"):
        TrainConfig(**{field: value})
    assert getattr(TrainConfig(advantage_estimator="gae", **{field: value}), field) == value


def test_positive_lm_weight_works_with_either_estimator():
    assert TrainConfig(positive_lm_weight=0.1).identity() == {"positive_lm_weight": 0.1}
    assert TrainConfig(advantage_estimator="gae", positive_lm_weight=0.1).positive_lm_weight == 0.1
