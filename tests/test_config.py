"""Every invalid config raises ValueError naming the field; presets are valid and cited."""
import dataclasses

import pytest

from gpolib import LossConfig, TrainConfig, presets
from gpolib.objectives import Cispo, Clip, Gmpo

INVALID_LOSS = [
    ({"ratio_level": "word"}, "ratio_level"),
    ({"aggregation": "median"}, "aggregation"),
    ({"beta": -0.04}, "beta"),
    ({"aggregation": "seq_mean_token_sum_norm"}, "max_len"),
    ({"aggregation": "seq_mean_token_sum_norm", "max_len": 0}, "max_len"),
    ({"surrogate": "ppo"}, "surrogate"),
]

INVALID_SURROGATE = [  # each surrogate checks its own parameters
    (Clip, {"eps_low": -0.1}, "eps_low"),
    (Clip, {"eps_high": -0.01}, "eps_high"),
    (Clip, {"eps_low": 1.0}, "eps_low"),
    (Clip, {"eps_high": "0.28"}, "eps_high"),
    (Cispo, {"cap": 0.5}, "cap"),
    (Cispo, {"floor": -0.1}, "floor"),
    (Cispo, {"floor": 1.5}, "floor"),
    (Gmpo, {"log_clip_low": -0.4}, "log_clip_low"),
    (Gmpo, {"log_clip_high": float("nan")}, "log_clip_high"),
]

INVALID_TRAIN = [
    ({"group_size": 1}, "group_size"),
    ({"group_size": 0}, "group_size"),
    ({"group_size": 8.0}, "group_size"),
    ({"adv_scale": "std"}, "adv_scale"),
    ({"gfpo_k": 9}, "gfpo_k"),
    ({"gfpo_k": 1}, "gfpo_k"),
    ({"gfpo_adaptive": True}, "gfpo_adaptive"),
    ({"gfpo_k": 4, "gfpo_metric": "brevity"}, "gfpo_metric"),
    ({"temperature": 0.0}, "temperature"),
    ({"temperature": -1.0}, "temperature"),
    ({"top_p": 1.5}, "top_p"),
    ({"lr": 0}, "lr"),
    ({"steps": 0}, "steps"),
    ({"mu": 0}, "mu"),
    ({"mu": 10_000}, "mu"),
    ({"prompts_per_step": -2}, "prompts_per_step"),
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"overlong": "truncate"}, "overlong"),
    ({"overlong_cache": 192}, "overlong_cache"),  # = max_new_tokens
    ({"overlong_cache": 1.5}, "overlong_cache"),
    ({"overlong_cache": -1}, "overlong_cache"),
    ({"old_logps": "vllm"}, "old_logps"),
    ({"backend": "sglang"}, "backend"),
    ({"backend": "vllm", "lora_r": 0}, "lora_r"),
    ({"vllm_sleep": True}, "vllm_sleep"),
    ({"vllm_gpu_memory_utilization": 1.0}, "vllm_gpu_memory_utilization"),
    ({"device": "tpu"}, "device"),
    ({"dtype": "int8"}, "dtype"),
    ({"dynamic_sampling": "yes"}, "dynamic_sampling"),
    ({"max_gen_batches": 0}, "max_gen_batches"),
    ({"lora_r": -1}, "lora_r"),
    ({"seed": -3}, "seed"),
    ({"model": ""}, "model"),
    ({"loss": {"ratio_level": "token"}}, "loss"),
    ({"loss": LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=0.2),
                         aggregation="seq_mean_token_sum_norm", max_len=64)}, "loss.max_len"),
]


@pytest.mark.parametrize("kwargs,field", INVALID_LOSS, ids=[f for _, f in INVALID_LOSS])
def test_invalid_loss_config_names_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field.replace('.', '[.]')}=.*allowed"):
        LossConfig(**kwargs)


@pytest.mark.parametrize("cls,kwargs,field", INVALID_SURROGATE, ids=[f for _, _, f in INVALID_SURROGATE])
def test_invalid_surrogate_parameter_names_field(cls, kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}=.*allowed"):
        cls(**kwargs)
    with pytest.raises(ValueError, match=rf"^{field}=.*allowed"):  # the same through --set loss_<parameter>
        presets.get(cls.name if cls.name != "clip" else "grpo", **{f"loss_{k}": v for k, v in kwargs.items()})


@pytest.mark.parametrize("kwargs,field", INVALID_TRAIN, ids=[f for _, f in INVALID_TRAIN])
def test_invalid_train_config_names_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field.replace('.', '[.]')}=.*allowed"):
        TrainConfig(**kwargs)


def test_vllm_is_accepted_now_that_the_loop_builds_the_engine():
    cfg = presets.get("gspo", backend="vllm", vllm_sleep=True)  # wiring: tests/test_vllm_wiring.py
    assert (cfg.backend, cfg.vllm_sleep, cfg.vllm_gpu_memory_utilization) == ("vllm", True, 0.3)


def test_configs_take_keywords_only():
    with pytest.raises(TypeError):
        LossConfig("token", 0.2, 0.2, "seq_mean_token_mean")
    with pytest.raises(TypeError):
        TrainConfig("grpo")


def test_error_lists_allowed_values():
    with pytest.raises(ValueError, match="'token' [|] 'sequence' [|] 'sequence_token'"):
        LossConfig(ratio_level="tok")


def test_unknown_preset_and_unknown_field():
    with pytest.raises(ValueError, match="preset='ppo2'.*grpo [|] dapo"):
        presets.get("ppo2")
    with pytest.raises(ValueError, match="unknown TrainConfig field"):
        presets.get("grpo", learning_rate=1e-3)


@pytest.mark.parametrize("name", presets.PRESETS)
def test_presets_are_valid_and_round_trip(name):
    cfg = presets.get(name)
    assert cfg.name == name
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.fingerprint() == TrainConfig.from_dict(cfg.to_dict()).fingerprint()
    assert cfg.replace(seed=1).fingerprint() != cfg.fingerprint()


def test_family_preset_values_match_papers():
    cispo, gmpo = presets.get("cispo").loss, presets.get("gmpo").loss
    # MiniMax-M1 Sec. 3.1: no lower bound on the IS weight, token-level; ScaleRL's cap eps_max = 5
    assert (cispo.surrogate, cispo.aggregation) == (Cispo(cap=5.0, floor=0.0), "token_mean")
    # GMPO: log-space range (e^-0.4, e^0.4), one term per response
    assert (gmpo.surrogate, gmpo.aggregation) == (Gmpo(log_clip_low=0.4, log_clip_high=0.4), "seq_mean_token_mean")
    assert presets.get("grpo").loss.mismatch_correction == "none" and LossConfig().mismatch_cap == 2.0


def test_preset_values_match_papers():
    assert presets.get("grpo").loss == LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=0.2),
                                                  aggregation="seq_mean_token_mean")
    dapo = presets.get("dapo")
    assert (dapo.loss.surrogate, dapo.loss.aggregation) == (Clip(eps_low=0.2, eps_high=0.28), "token_mean")
    assert dapo.dynamic_sampling and dapo.overlong == "shaping"
    assert dapo.overlong_cache == 0.2 and dapo.overlong_cache_len == round(0.2 * 192) == 38  # 4096 of 20480
    gspo = presets.get("gspo")
    assert (gspo.loss.ratio_level, gspo.loss.surrogate, gspo.mu) == ("sequence", Clip(eps_low=3e-4, eps_high=4e-4), 4)
    dr = presets.get("dr_grpo")
    assert dr.adv_scale == "none" and dr.loss.max_len == dr.max_new_tokens
    gfpo = presets.get("gfpo")
    assert gfpo.gfpo_k is not None and gfpo.gfpo_k < gfpo.group_size


def test_overrides_reach_loss_and_dr_grpo_budget():
    cfg = presets.get("dapo", loss_eps_high=0.2, seed=3)
    assert cfg.loss.surrogate.eps_high == 0.2 and cfg.seed == 3
    assert presets.get("dr_grpo", max_new_tokens=64).loss.max_len == 64


def test_derived_values_follow_the_budget_on_replace():
    """Dr. GRPO's normaliser and DAPO's L_cache are derived from max_new_tokens, never left stale."""
    dr = presets.get("dr_grpo").replace(max_new_tokens=128)
    assert dr.loss.max_len == 128 and dr == presets.get("dr_grpo", max_new_tokens=128)
    assert presets.get("dr_grpo").replace(max_new_tokens=128, loss_max_len=128).loss.max_len == 128
    to_dr = presets.get("grpo", max_new_tokens=48).replace(loss_aggregation="seq_mean_token_sum_norm")
    assert to_dr.loss.max_len == 48
    dapo = presets.get("dapo").replace(max_new_tokens=200)
    assert dapo.overlong_cache_len == 40  # 20% of the new budget
    assert presets.get("grpo").overlong_cache_len == 16  # an int is tokens


def test_every_field_has_a_docstring():
    import inspect

    from gpolib.objectives import SURROGATES
    classes = (TrainConfig, LossConfig, *SURROGATES.values())  # a surrogate's parameters too
    src = "".join(inspect.getsource(c) for c in classes)
    for f in [f for c in classes for f in dataclasses.fields(c)]:
        line = next(l for l in src.splitlines() if l.strip().startswith(f"{f.name}:"))
        nxt = src.splitlines()[src.splitlines().index(line) + 1].strip()
        assert nxt.startswith('"""'), f.name


def test_runs_recorded_before_a_new_field_still_match():
    cfg = presets.get("dapo")
    recorded = cfg.to_dict()
    recorded.pop("micro_batch_rows")  # as written by a version without that field
    assert TrainConfig.same_run(recorded, cfg) == []
    assert TrainConfig.same_run(recorded, cfg.replace(seed=4)) == ["seed"]
    assert TrainConfig.same_run(recorded, cfg.replace(loss_eps_high=0.2)) == ["loss"]
    assert cfg.fingerprint() == presets.get("dapo").fingerprint() != presets.get("grpo").fingerprint()


def test_micro_batch_rows_is_not_part_of_a_runs_identity():
    """Micro-batching is exact (tests/test_reliability.py), so a run recorded with other micro-batches is the same run."""
    cfg = presets.get("grpo")
    recorded = cfg.replace(micro_batch_rows=64).to_dict()  # as written before the default became 16
    assert recorded["micro_batch_rows"] == 64 and cfg.micro_batch_rows == 16
    assert TrainConfig.same_run(recorded, cfg) == []
    assert cfg.replace(micro_batch_rows=3).fingerprint() == cfg.fingerprint()
    assert TrainConfig.same_run(recorded, cfg.replace(mu=2)) == ["mu"]
