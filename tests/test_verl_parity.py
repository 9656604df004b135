"""verl parity: the keys `gpolib.export.to_verl` writes, fed to verl 0.9.1's own code, give our loss.

verl is installed in CI without its dependencies (scale/requirements-verl-cpu.txt, `make test`). Each
check loads verl's generated trainer yaml, applies the exported overrides, builds verl's own
`ActorConfig` / `AlgoConfig` dataclasses from it (`verl.utils.config.omega_conf_to_dataclass`) and calls
`verl.trainer.ppo.core_algos`: the advantage estimator, the registered policy loss of the exported
`loss_mode`, `agg_loss` and `kl_penalty`, composed as verl's `workers/utils/losses.py::ppo_loss` does
(pg_loss + kl_loss_coef * agg_loss(kl)). Value and d loss / d log pi_theta must match ours to 1e-6.
"""
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from gpolib import presets
from gpolib.export import UnsupportedFeature, to_verl, verl_overrides
from gpolib.objectives import ADV_EPS, Cispo, Gmpo, Sapo, group_advantages, policy_loss
from gpolib.objectives.sapo import LOW_WEIGHT, gate_weight, temperatures

verl = pytest.importorskip("verl", reason="verl core algorithms: make test installs scale/requirements-verl-cpu.txt")
from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402

YAML = Path(verl.__file__).parent / "trainer" / "config"
TOL = 1e-6
VARIANTS = {  # every preset whose features verl has, plus the exported variants of its axes
    "grpo": dict(), "dapo": dict(), "gspo": dict(), "dr_grpo": dict(),
    "gspo_token": dict(preset="gspo", loss_ratio_level="sequence_token"),
    "grpo_kl": dict(preset="grpo", loss_beta=0.04),
    "dapo_seq_mean": dict(preset="dapo", loss_aggregation="seq_mean_token_mean"),
    "dr_grpo_rloo": dict(preset="dr_grpo", adv_scale="rloo"),  # verl's RLOO estimator, no epsilon
    "cispo": dict(), "gmpo": dict(),  # verl's "cispo" and "geo_mean" policy losses
    "cispo_two_sided": dict(preset="cispo", loss_floor=0.8, loss_cap=1.28, loss_aggregation="seq_mean_token_mean"),
    "grpo_tis": dict(preset="grpo", loss_mismatch_correction="token_truncate"),  # verl's rollout_correction
    "dapo_token_mask": dict(preset="dapo", loss_mismatch_correction="token_mask", loss_mismatch_cap=1.5),
    "grpo_sequence_tis": dict(preset="grpo", loss_mismatch_correction="sequence_truncate"),
    "gspo_sequence_mask": dict(preset="gspo", loss_mismatch_correction="sequence_mask"),
    "cispo_tis": dict(preset="cispo", loss_mismatch_correction="token_truncate"),
    "gmpo_sequence_mask": dict(preset="gmpo", loss_mismatch_correction="sequence_mask"),
    "sapo": dict(), "sapo_kl_tis": dict(preset="sapo", loss_beta=0.04, loss_mismatch_correction="token_truncate"),
}


def _cfg(name):
    kw = dict(VARIANTS[name])
    return presets.get(kw.pop("preset", name), **kw)


def declared(cfg, key: str) -> bool:
    """The dotted key is declared in the yaml (its value may be null or mandatory-missing '???')."""
    parent, _, last = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
    return node is not None and OmegaConf.is_dict(node) and (last in node or OmegaConf.is_missing(node, last))


def verl_config(keys: dict, yaml: str = "_generated_ppo_trainer.yaml"):
    """verl's trainer config with the exported overrides applied (the '+' keys added), as its dataclasses."""
    cfg = OmegaConf.load(YAML / yaml)
    for override in verl_overrides(keys):
        key, _, _ = override.lstrip("+").partition("=")
        assert declared(cfg, key) != override.startswith("+"), f"{override}: '+' must mark exactly the keys verl lacks"
        OmegaConf.update(cfg, key, keys[key], merge=True, force_add=True)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    algo = omega_conf_to_dataclass(cfg.algorithm)
    return cfg, actor, algo


def random_batch(cfg, n_groups=4, T=16, seed=0):
    """Rewards (B,) with one constant group, ragged masks, logps spread across the clip range (B, T)."""
    g = torch.Generator().manual_seed(seed)
    B, G = n_groups * cfg.group_size, cfg.group_size
    rewards = torch.randint(0, 2, (B,), generator=g).float() + 0.25 * torch.rand(B, generator=g)
    rewards[:G] = 1.0  # a zero-variance group: advantage 0 under every scaling
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).float()  # (B, T)
    old = -3 * torch.rand(B, T, generator=g)  # log pi_old
    spread = 0.3 if cfg.loss.ratio_level == "token" else 2 * cfg.loss.surrogate.eps_high  # a clip
    logps = old + spread * torch.randn(B, T, generator=g)
    if cfg.loss.ratio_level == "token":
        logps[:, 0] = old[:, 0] + 1.5  # ratio e^1.5 > 3 on some A < 0 tokens: verl's dual clip would bind there
        logps[:, 1] = old[:, 1] + 2.0  # ratio e^2 > 5: above the CISPO preset's cap 1 + 4
    ref = old + 0.2 * torch.randn(B, T, generator=g)
    return rewards, lengths, mask, old, logps.requires_grad_(True), ref


def verl_advantages(algo, rewards, lengths, mask, G, **kw):
    """verl's registered estimator on outcome rewards placed at each response's last token. (B, T)."""
    B, T = mask.shape
    token_rewards = torch.zeros(B, T)
    token_rewards[torch.arange(B), lengths - 1] = rewards
    index = np.array([f"prompt-{i // G}" for i in range(B)], dtype=object)
    fn = core_algos.get_adv_estimator_fn(algo.adv_estimator)
    adv, _ = fn(token_level_rewards=token_rewards, response_mask=mask, index=index,
                norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo, config=algo, **kw)
    return adv


def verl_is_weights(cfg, old, engine, mask):
    """verl's rollout-correction weights (B, T) from its own helper and the exported config; None when off."""
    corr = cfg.algorithm.rollout_correction
    if corr.rollout_is is None:
        return None
    weights, _ = compute_rollout_correction_weights(log_ratio=old - engine, response_mask=mask,
                                                    rollout_is=corr.rollout_is,
                                                    rollout_is_threshold=corr.rollout_is_threshold)
    return weights


def verl_loss(actor, logps, old, adv, mask, ref, is_weights=None):
    """pg_loss (+ kl_loss_coef * aggregated k3) exactly as verl's ppo_loss composes them."""
    actor.global_batch_info.update(dp_size=1, batch_num_tokens=None, global_batch_size=None,
                                   loss_scale_factor=actor.loss_scale_factor)
    fn = core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode)
    loss, _ = fn(old_log_prob=old, log_prob=logps, advantages=adv, response_mask=mask.bool(),
                 loss_agg_mode=actor.loss_agg_mode, config=actor, rollout_is_weights=is_weights)
    if actor.use_kl_loss:
        kld = core_algos.kl_penalty(logprob=logps, ref_logprob=ref, kl_penalty=actor.kl_loss_type)
        kl = core_algos.agg_loss(loss_mat=kld, loss_mask=mask.bool(), loss_agg_mode=actor.loss_agg_mode,
                                 **actor.global_batch_info)
        loss = loss + kl * actor.kl_loss_coef
    return loss


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_verl_loss_and_gradient_equal_ours(name):
    cfg = _cfg(name)
    full, actor, algo = verl_config(to_verl(cfg))
    rewards, lengths, mask, old, logps, ref = random_batch(cfg)
    engine = old + 0.3 * torch.randn(old.shape, generator=torch.Generator().manual_seed(1))  # log pi_engine
    ours_adv = group_advantages(rewards, cfg.group_size, cfg.adv_scale)  # (B,)
    verl_adv = verl_advantages(algo, rewards, lengths, mask, cfg.group_size, epsilon=ADV_EPS)  # (B, T)
    assert torch.allclose(verl_adv, ours_adv.unsqueeze(1) * mask, atol=TOL, rtol=0)
    ours, info = policy_loss(logps, old, ours_adv, mask, cfg.loss, ref if cfg.loss.beta > 0 else None,
                             engine_logps=engine if cfg.loss.mismatch_correction != "none" else None)
    (g_ours,) = torch.autograd.grad(ours, logps)
    theirs = verl_loss(actor, logps, old, verl_adv, mask, ref, verl_is_weights(full, old, engine, mask))
    if cfg.loss.mismatch_correction != "none":  # the correction binds on some tokens, not on all
        assert 0 < info["mismatch/clipped_share"].value < 1
    (g_theirs,) = torch.autograd.grad(theirs, logps)
    assert abs(ours.item() - theirs.item()) <= TOL, (ours.item(), theirs.item())
    assert float((g_ours - g_theirs).abs().max()) <= TOL
    # non-vacuous: the batch has clipped and unclipped tokens, and a nonzero gradient
    ratio = torch.exp(logps.detach() - old)
    if cfg.loss.ratio_level != "token":
        ratio = torch.exp(((logps.detach() - old) * mask).sum(1) / mask.sum(1)).unsqueeze(1).expand_as(mask)
    if isinstance(cfg.loss.surrogate, Sapo):  # no bound: the gate's weight is small on some tokens, not on all
        s = cfg.loss.surrogate
        outside = (gate_weight(ratio, temperatures(ours_adv, s.tau_pos, s.tau_neg)) < LOW_WEIGHT) & mask.bool()
    else:
        lo, hi = ratio_bounds(cfg.loss.surrogate)
        outside = ((ratio < lo) | (ratio > hi)) & mask.bool()
    assert 0 < float(outside.sum()) < float(mask.sum()) and float(g_ours.abs().max()) > 0


def ratio_bounds(surrogate) -> tuple:
    """Where the surrogate bounds the ratio: GMPO's log-space range, CISPO's absolute weight bounds, the clip's
    1 +- eps."""
    if isinstance(surrogate, Gmpo):
        return math.exp(-surrogate.log_clip_low), math.exp(surrogate.log_clip_high)
    if isinstance(surrogate, Cispo):
        return surrogate.floor, surrogate.cap
    return 1 - surrogate.eps_low, 1 + surrogate.eps_high


@pytest.mark.parametrize("cap, floor", [(5.0, 0.0), (1.28, 0.8), (2.5, 0.3)])
def test_cispo_absolute_bounds_reach_verl_as_its_relative_clip_ratios(cap, floor):
    """verl clamps CISPO's weight to [1 - clip_ratio_low, 1 + clip_ratio_high]; ours holds the bounds themselves (as
    TRL's epsilon_high is the cap itself, tests/test_trl_family_parity.py): verl's dataclass reads our bounds back."""
    _, actor, _ = verl_config(to_verl(presets.get("cispo", loss_cap=cap, loss_floor=floor,
                                                  loss_aggregation="seq_mean_token_mean")))
    assert actor.policy_loss.loss_mode == "cispo"
    assert (1 + actor.clip_ratio_high, 1 - actor.clip_ratio_low) == pytest.approx((cap, floor), abs=1e-12)


def test_verl_default_epsilon_differs_only_by_the_documented_factor():
    """verl's trainer calls the GRPO estimator with epsilon=1e-6: A_verl = A_ours * (std + 1e-4) / (std + 1e-6)."""
    cfg = presets.get("grpo")
    _, _, algo = verl_config(to_verl(cfg))
    rewards, lengths, mask, *_ = random_batch(cfg)
    ours = group_advantages(rewards, cfg.group_size, "group")  # (B,)
    std = rewards.view(-1, cfg.group_size).std(dim=1).repeat_interleave(cfg.group_size)  # (B,)
    expected = ours * (std + ADV_EPS) / (std + 1e-6)
    default = verl_advantages(algo, rewards, lengths, mask, cfg.group_size)[:, 0]
    assert torch.allclose(default, expected, atol=TOL, rtol=0)
    assert float((default - ours).abs().max()) > 1e-5  # the factor is real, hence the explicit epsilon above


def test_exported_keys_reach_verl_dataclasses():
    _, actor, algo = verl_config(to_verl("dapo"))
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.loss_agg_mode) == (0.2, 0.28, "token-mean")
    assert actor.policy_loss.loss_mode == "vanilla" and actor.rollout_n == 8 and actor.ppo_mini_batch_size == 16
    assert algo.adv_estimator == "grpo" and algo.norm_adv_by_std_in_grpo is True
    assert algo.filter_groups.enable and algo.filter_groups.metric == "reward"
    cfg, actor, algo = verl_config(to_verl("dr_grpo"))
    assert actor.loss_agg_mode == "seq-mean-token-sum-norm" and actor.loss_scale_factor == presets.get("dr_grpo").max_new_tokens
    assert algo.norm_adv_by_std_in_grpo is False
    cfg, actor, _ = verl_config(to_verl("gspo"))
    assert actor.policy_loss.loss_mode == "gspo" and actor.ppo_mini_batch_size == 4  # 16 prompts / mu = 4
    dapo = verl_config(to_verl("dapo"))[0]
    ours = presets.get("dapo")
    assert dapo.reward.reward_kwargs.overlong_buffer_cfg.len == ours.overlong_cache_len == round(0.2 * ours.max_new_tokens)
    assert dapo.reward.reward_kwargs.max_resp_len == ours.max_new_tokens


def test_routing_replay_goes_to_the_megatron_trainer_only():
    cfg = presets.get("gspo", routing_replay=True)
    with pytest.raises(UnsupportedFeature, match="routing_replay"):
        to_verl(cfg)
    keys = to_verl(cfg, megatron=True)
    assert keys["actor_rollout_ref.actor.megatron.router_replay.mode"] == "R2"
    mega = OmegaConf.load(YAML / "_generated_ppo_megatron_trainer.yaml")
    assert OmegaConf.select(mega, "actor_rollout_ref.actor.megatron.router_replay.mode") == "disabled"
    assert not declared(OmegaConf.load(YAML / "_generated_ppo_trainer.yaml"), "actor_rollout_ref.actor.megatron")


def test_engine_logps_use_verl_bypass_mode():
    keys = to_verl(presets.get("grpo", old_logps="engine"))
    cfg, _, _ = verl_config(keys)
    corr = cfg.algorithm.rollout_correction
    assert corr.bypass_mode is True and corr.loss_type == "ppo_clip" and corr.rollout_is is None
    assert cfg.actor_rollout_ref.rollout.calculate_log_probs is True
    with pytest.raises(UnsupportedFeature, match="sequence ratio"):
        to_verl(presets.get("gspo", old_logps="engine"))


def test_verl_launcher_data_reward_and_command(tmp_path):
    """scale/verl_grpo.py: parquet rows in verl's RL-dataset schema, the reward file, every override known."""
    import importlib.util
    import sys

    import pyarrow.parquet as pq

    scale = Path(__file__).resolve().parents[1] / "scale"
    sys.path.insert(0, str(scale))
    try:
        spec = importlib.util.spec_from_file_location("verl_grpo", scale / "verl_grpo.py")
        launcher = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(launcher)
        from verl_reward import compute_score
    finally:
        sys.path.remove(str(scale))
    cfg = presets.get("dapo", model="Qwen/Qwen2.5-0.5B-Instruct")
    train, val = launcher.write_parquet(cfg, tmp_path)
    row = pq.read_table(train).slice(0, 1).to_pylist()[0]
    assert row["prompt"][0]["role"] == "user" and row["prompt"][0]["content"].endswith("=?")
    assert compute_score(row["data_source"], "1+1=2\nA=" + row["reward_model"]["ground_truth"],
                         row["reward_model"]["ground_truth"]) == 1.0
    assert compute_score("x", "A=999999", row["reward_model"]["ground_truth"]) == 0.0
    cmd = launcher.command(cfg, train, val, gpus=8)
    assert cmd[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    base = OmegaConf.load(YAML / "_generated_ppo_trainer.yaml")
    for override in cmd[3:]:
        key = override.lstrip("+").partition("=")[0]
        assert declared(base, key) != override.startswith("+"), override
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16" in cmd  # 128 responses / 8 GPUs
