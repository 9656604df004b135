"""Config fields of the PPO / VAPO baselines: neutral defaults, validation naming the field."""

import pytest

from gpolib.config import TrainConfig
from gpolib.validation import GAE_ONLY

VALUE_FIELDS = ("advantage_estimator", "positive_lm_weight") + GAE_ONLY


def test_defaults_are_neutral_for_recorded_runs(committed_runs):
    """Runs that leave the value-model fields at their defaults (every run but PPO / VAPO's) are identified
    without them, so adding the fields orphaned none; a run that sets them (VAPO, notebook 07) is identified by them."""
    defaults = TrainConfig()
    assert not set(VALUE_FIELDS) & set(defaults.identity())
    checked = {"without": 0, "with": 0}
    for path, blob in committed_runs:
        used = {k for k in VALUE_FIELDS if blob["config"].get(k, getattr(defaults, k)) != getattr(defaults, k)}
        if used:  # a value-model run: those fields are part of its identity
            cfg = TrainConfig.from_dict(blob["config"])
            assert used <= set(cfg.identity()), path
            checked["with"] += 1
        else:
            cfg = TrainConfig.from_dict({k: v for k, v in blob["config"].items() if k not in VALUE_FIELDS})
            assert not set(VALUE_FIELDS) & set(cfg.identity()), path
            checked["without"] += 1
        assert TrainConfig.same_run(blob["config"], cfg) == [], path
    assert checked["without"] >= 1 and checked["with"] >= 3  # notebook 07's VAPO runs, 3 seeds


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
