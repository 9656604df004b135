"""TRL export: GRPOConfig accepts every preset; strictness; TRL's own loss = ours per preset; 2 TRL steps.

TRL 1.16.0 is installed by `make test` (the `trl` extra). The loss check builds a real `GRPOTrainer`
from the exported configuration (scale/trl_grpo.py, the script users launch) and calls its own
`_compute_loss` on a shared batch, with only the model forward replaced by fixed log-probs.
"""
import importlib.util
import math
import sys
import warnings
from pathlib import Path

import pytest
import torch

from gpolib import presets
from gpolib.export import (UnsupportedFeature, to_trl, to_verl, trl_correctness, trl_missing,
                           trl_reward_funcs, verl_missing)
from gpolib.objectives import policy_loss
from gpolib.rewards import soft_overlong_penalty

trl = pytest.importorskip("trl", reason="TRL: make test installs the pinned `trl` extra")
SCRIPT = Path(__file__).resolve().parents[1] / "scale" / "trl_grpo.py"
TOL = 1e-6


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("trl_grpo", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["trl_grpo"] = module
    spec.loader.exec_module(module)
    return module


def small(name, **kw):
    """A preset at test size (the objective unchanged)."""
    base = dict(prompts_per_step=4, max_new_tokens=24, steps=2, eval_prompts=8)
    if name == "gfpo":
        base.update(gfpo_k=4)
    return presets.get(name, **{**base, **kw})


@pytest.mark.parametrize("name", presets.PRESETS)
def test_grpo_config_accepts_every_preset(name, tmp_path):
    cfg = presets.get(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kwargs = to_trl(cfg, strict=False)
    args = trl.GRPOConfig(**kwargs, output_dir=str(tmp_path), report_to="none", use_cpu=True)
    assert args.generation_batch_size == cfg.prompts_per_step * cfg.group_size
    assert args.steps_per_generation == cfg.mu and args.num_iterations == 1
    own = cfg.loss.surrogate.trl(cfg.loss)  # the clip's epsilon / epsilon_high, CISPO's loss_type and cap, ...
    assert own and {k: getattr(args, k) for k in own} == own and args.beta == cfg.loss.beta
    assert args.vllm_importance_sampling_correction is False  # TRL's default True would weight vLLM rollouts
    assert args.num_generations == cfg.group_size and args.max_completion_length == cfg.max_new_tokens
    assert args.scale_rewards == cfg.adv_scale and args.max_steps == cfg.steps * cfg.mu
    expected = {"grpo": ("grpo", "token"), "dapo": ("dapo", "token"), "gspo": ("grpo", "sequence"),
                "gfpo": ("dapo", "token"), "dr_grpo": ("dr_grpo", "token"),
                "ppo": ("grpo", "token"), "vapo": ("dapo", "token"), "cispo": ("cispo", "token"),
                "gmpo": ("grpo", "token"), "sapo": ("sapo", "token"), "luspo": ("luspo", "sequence"),
                "vespo": ("vespo", "token")}  # PPO, VAPO: value models not exported; GMPOTrainer ignores loss_type
    assert (args.loss_type, args.importance_sampling_level) == expected.get(name, (args.loss_type, "token"))


def test_strict_raises_naming_what_trl_and_verl_lack():
    with pytest.raises(UnsupportedFeature, match="dynamic_sampling"):
        to_trl("dapo")
    with pytest.raises(UnsupportedFeature, match="gfpo_k=8"):
        to_trl("gfpo")
    with pytest.raises(UnsupportedFeature, match="gfpo_k=8"):
        to_verl("gfpo")
    with pytest.raises(UnsupportedFeature, match="routing_replay"):
        to_trl(presets.get("gspo", routing_replay=True))
    with pytest.raises(UnsupportedFeature, match="adv_scale='rloo'"):
        to_trl(presets.get("dr_grpo", adv_scale="rloo"))
    assert to_verl(presets.get("dr_grpo", adv_scale="rloo"))["algorithm.adv_estimator"] == "rloo"
    with pytest.raises(UnsupportedFeature, match="adv_scale='batch'"):
        to_verl(presets.get("grpo", adv_scale="batch"))
    with pytest.raises(UnsupportedFeature, match="overlong='filter'"):
        to_verl(presets.get("grpo", overlong="filter"))
    for name in ("grpo", "gspo", "dr_grpo"):
        assert trl_missing(name) == [] and verl_missing(name) == []
        to_trl(name), to_verl(name)  # strict, no error
    assert verl_missing("dapo") == []  # verl has dynamic sampling (filter_groups) and overlong shaping
    for field, value in (("train_router", True), ("rollout_autocast", "bfloat16")):  # issue 15's MoE options
        cfg = presets.get("gspo", **{field: value})
        for export in (to_trl, to_verl):
            with pytest.raises(UnsupportedFeature, match=field):
                export(cfg)


def test_non_strict_warns_with_the_list_and_leaves_the_rest():
    with pytest.warns(UserWarning, match=r"dynamic_sampling=True .*Left out"):
        kwargs = to_trl("dapo", strict=False)
    assert kwargs["loss_type"] == "dapo" and kwargs["epsilon_high"] == 0.28
    with pytest.warns(UserWarning, match="gfpo_k=8") as record:
        to_trl(presets.get("gfpo", routing_replay=True), strict=False)
    assert "routing_replay" in str(record[0].message)  # one warning naming every missing feature


def test_mapping_details():
    assert to_trl("gspo")["per_device_train_batch_size"] == 32  # 128 completions / mu = 4
    assert to_trl(presets.get("gspo", loss_ratio_level="sequence_token"))["importance_sampling_level"] == "sequence"
    assert to_trl(presets.get("grpo", overlong="filter"))["mask_truncated_completions"] is True
    assert to_trl(presets.get("grpo", loss_aggregation="token_mean", mu=2))["loss_type"] == "bnpo"
    assert to_trl(presets.get("grpo", loss_aggregation="token_mean", mu=2), num_processes=2)["loss_type"] == "dapo"
    assert to_trl("dr_grpo")["scale_rewards"] == "none"
    with pytest.raises(ValueError, match="not divisible"):
        to_trl("grpo", num_processes=3)


def test_reward_functions():
    funcs = trl_reward_funcs("dapo")
    assert len(funcs) == 2 and trl_reward_funcs("grpo") == [trl_correctness]
    assert trl_correctness(["x\nA=12", "A=13\n", "A=12 "], answer=[12, 12, 12]) == [1.0, 0.0, 0.0]
    dapo = presets.get("dapo")
    L, cache = dapo.max_new_tokens, dapo.overlong_cache_len  # DAPO preset: L_cache = 20% of the budget
    ids = [[0] * n for n in (10, L - cache, L - cache + 1, L - 6, L)]
    got = funcs[1](prompts=None, completions=None, completion_ids=ids)
    assert got == [soft_overlong_penalty(len(x), L, cache) for x in ids]
    assert got[:2] == [0.0, 0.0] and got[-1] == -1.0 and math.isclose(got[3], (6 - cache) / cache, abs_tol=1e-6)


def shared_batch(cfg, B=8, T=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    old = -3 * torch.rand(B, T, generator=g)
    spread = 0.3 if cfg.loss.ratio_level == "token" else 2 * cfg.loss.surrogate.eps_high  # a clip
    logps = (old + spread * torch.randn(B, T, generator=g)).requires_grad_(True)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).long()  # (B, T)
    return logps, old, torch.randn(B, generator=g), mask


@pytest.mark.parametrize("name", presets.PRESETS)
def test_trl_loss_equals_ours_for_every_preset(name, script, tmp_path):
    """TRL's `_compute_loss`, on a GRPOTrainer built from the exported configuration, = our policy_loss."""
    cfg = small(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = script.build_trainer(cfg, str(tmp_path), strict=False, cpu=True)
    logps, old, adv, mask = shared_batch(cfg)
    B, T = mask.shape
    ent = torch.rand(logps.shape, generator=torch.Generator().manual_seed(7))  # entropies: grpo_top_entropy's keep
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logps, ent, None)
    trainer.current_gradient_accumulation_steps = 1  # as in training: gradient_accumulation_steps = 1
    trainer.model.train()
    inputs = {"prompt_ids": torch.zeros(B, 1, dtype=torch.long), "prompt_mask": torch.ones(B, 1, dtype=torch.long),
              "completion_ids": torch.zeros(B, T, dtype=torch.long), "completion_mask": mask, "advantages": adv,
              "old_per_token_logps": old, "num_items_in_batch": mask.sum() * cfg.mu}  # generation-batch tokens
    theirs = trainer._compute_loss(trainer.model, inputs)
    (g_theirs,) = torch.autograd.grad(theirs, logps)
    ours, _ = policy_loss(logps, old, adv, mask, cfg.loss, entropies=ent)
    (g_ours,) = torch.autograd.grad(ours, logps)
    assert abs(ours.item() - theirs.item()) <= TOL and float((g_ours - g_theirs).abs().max()) <= TOL
    assert float(g_ours.abs().max()) > 0


def test_family_exports_and_what_the_targets_lack():
    keys = to_trl("cispo")
    assert (keys["loss_type"], keys["epsilon_high"]) == ("cispo", 5.0)  # TRL's epsilon_high is the cap (ScaleRL: 5)
    assert to_trl(presets.get("cispo", loss_cap=2.5))["epsilon_high"] == 2.5
    assert to_verl(presets.get("cispo", loss_cap=2.5))["actor_rollout_ref.actor.clip_ratio_high"] == 1.5  # 1 + high
    tis = to_trl(presets.get("grpo", loss_mismatch_correction="sequence_mask", loss_mismatch_cap=3.0))
    assert (tis["vllm_importance_sampling_correction"], tis["vllm_importance_sampling_mode"],
            tis["vllm_importance_sampling_clip_max"]) == (True, "sequence_mask", 3.0)
    assert to_verl("cispo")["actor_rollout_ref.actor.policy_loss.loss_mode"] == "cispo"
    assert to_verl("gmpo")["actor_rollout_ref.actor.policy_loss.loss_mode"] == "geo_mean"
    mis = to_verl(presets.get("dapo", dynamic_sampling=False, loss_mismatch_correction="token_mask"))
    assert mis["algorithm.rollout_correction.rollout_is"] == "token"
    assert mis["algorithm.rollout_correction.rollout_is_threshold"] == "1e-09_2.0"
    with pytest.raises(UnsupportedFeature, match="no lower bound"):
        to_trl(presets.get("cispo", loss_floor=0.8))
    with pytest.raises(UnsupportedFeature, match="TRL's cispo is token-mean"):
        to_trl(presets.get("cispo", loss_aggregation="seq_mean_token_mean"))
    with pytest.raises(UnsupportedFeature, match="GMPOTrainer does not apply"):
        to_trl(presets.get("gmpo", loss_mismatch_correction="sequence_truncate"))
    with pytest.raises(UnsupportedFeature, match="mean over responses"):
        to_verl(presets.get("gmpo", loss_aggregation="token_mean"))
    with pytest.raises(UnsupportedFeature, match="geometric mean of the token weights"):
        to_verl(presets.get("gmpo", loss_mismatch_correction="token_truncate"))
    to_verl(presets.get("gmpo", loss_mismatch_correction="sequence_truncate"))  # strict, no error


def test_two_trl_steps_on_the_embedded_model(script, tmp_path):
    """DAPO exported with strict=False (no dynamic sampling): token-level loss, Clip-Higher, overlong reward."""
    cfg = small("dapo", group_size=4, seed=1)
    with pytest.warns(UserWarning, match="dynamic_sampling"):
        trainer = script.build_trainer(cfg, str(tmp_path), strict=False, cpu=True, logging_steps=1)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    assert trainer.state.global_step == 2
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) for h in logs)
    assert any(k.startswith("rewards/trl_soft_overlong") for k in logs[0])  # the shaping reward was called
    moved = [n for n, p in trainer.model.named_parameters() if p.requires_grad and not torch.equal(p, before[n])]
    zero_std = [h.get("frac_reward_zero_std", 0.0) for h in logs]
    assert moved or all(z == 1.0 for z in zero_std), zero_std  # LoRA moves unless every group had equal rewards
