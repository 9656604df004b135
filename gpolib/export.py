"""Scale-out: a gpolib preset or TrainConfig -> TRL `GRPOConfig` kwargs, or verl trainer overrides.

Field names were read off the pinned versions' own sources (TRL 1.16.0 `trainer/grpo_config.py`,
`grpo_trainer.py`; verl 0.9.1 `trainer/config/_generated_ppo_trainer.yaml`, `workers/config/actor.py`,
`trainer/ppo/core_algos.py`). tests/test_export.py and tests/test_verl_parity.py check the exports
against those packages: TRL's and verl's own loss code give our loss and gradient to 1e-6.

What the export cannot carry is never dropped silently: `strict=True` raises `UnsupportedFeature`
naming every such field; `strict=False` leaves them out and warns with the same list.

Mapping (ours -> TRL | verl):
  ratio_level   token -> importance_sampling_level="token" | policy_loss.loss_mode="vanilla"
                sequence, sequence_token -> "sequence" | "gspo". Both are exact: with one advantage per
                response, GSPO-token equals GSPO in value and gradient (GSPO Eq. 13-14; tested), and
                verl's "gspo" loss is the GSPO-token form.
  surrogate     its own keys (`Surrogate.trl` / `.verl`): the clip's eps_low/high -> epsilon / epsilon_high |
                actor.clip_ratio_low / clip_ratio_high, loss_mode "vanilla" (token) or "gspo"; CISPO, GMPO: their
                modules, via gpolib.export_family
  aggregation   seq_mean_token_mean -> loss_type="grpo" | loss_agg_mode="seq-mean-token-mean"
                token_mean -> "dapo" ("bnpo" when mu > 1 on one process, see below) | "token-mean"
                seq_mean_token_sum_norm -> "dr_grpo" | "seq-mean-token-sum-norm", loss_scale_factor=max_len
  adv_scale     scale_rewards="group"|"batch"|"none" | norm_adv_by_std_in_grpo=True|False;
                "rloo" -> (TRL: not available) | adv_estimator="rloo"
  beta          beta, use_bias_correction_kl=False | actor.use_kl_loss, kl_loss_coef, kl_loss_type="low_var_kl" (k3)
  mu            steps_per_generation=mu, num_iterations=1 | ppo_mini_batch_size=prompts_per_step/mu
  overlong      "shaping" -> a TRL reward function (`trl_reward_funcs`) | verl's "dapo" reward manager
                with overlong_buffer (its penalty equals DAPO Eq. 13 for lengths <= max_len);
                "filter" -> mask_truncated_completions=True | (verl: not available)
  dynamic_sampling  (TRL: not available) | algorithm.filter_groups (metric "reward", our shaped reward)
  mismatch_correction  TIS / MIS: see gpolib.export_family

Known numerical departures that remain (documented, not features):
  - verl's GRPO estimator divides by std + 1e-6 (a fixed argument, no config key); ours by std + 1e-4.
    Advantages differ by the factor (std + 1e-4) / (std + 1e-6), < 3e-4 relative for 0/1 rewards, G=8.
  - verl clamps log-ratios to [-20, 20] (GSPO: log s_i <= 10); ours does not. Inactive in practice.
  - verl's dual-clip (clip_ratio_c, default 3) is not part of our objective: exported as 1e9, which
    the clamped ratio (<= e^20) never reaches.
  - verl's sequence-mean aggregations divide by the number of non-empty responses, ours by B; they
    differ only when a response has no unmasked token.
  - TRL's "dapo" normaliser is the generation batch's token count / steps_per_generation; with mu > 1
    on several processes it is the mean minibatch token count rather than this minibatch's (on one
    process the export uses "bnpo", this minibatch's own count: exact).
  - Our minibatches are random rows; verl's are whole prompt groups; TRL's are random rows.
"""
from __future__ import annotations

import functools
import math
import warnings

from .config import TrainConfig
from .export_family import trl_family_kwargs, trl_family_missing, verl_family_keys, verl_family_missing

TRL_LOSS_TYPE = {"seq_mean_token_mean": "grpo", "token_mean": "dapo", "seq_mean_token_sum_norm": "dr_grpo"}
VERL_AGG_MODE = {"seq_mean_token_mean": "seq-mean-token-mean", "token_mean": "token-mean",
                 "seq_mean_token_sum_norm": "seq-mean-token-sum-norm"}
VERL_DUAL_CLIP_OFF = 1e9
"""clip_ratio_c that never binds: verl clamps the log-ratio at 20 before exp, and e^20 < 1e9."""
VERL_ADDED_PREFIXES = ("reward.reward_kwargs.",)
"""verl keys read by its DAPO reward manager but absent from its base yaml: Hydra needs a '+' to add them."""
ACTOR = "actor_rollout_ref.actor."


class UnsupportedFeature(ValueError):
    """The target framework cannot reproduce part of the configuration (raised with strict=True)."""


def _config(preset_or_cfg) -> TrainConfig:
    if isinstance(preset_or_cfg, TrainConfig):
        return preset_or_cfg
    if isinstance(preset_or_cfg, str):
        from . import presets
        return presets.get(preset_or_cfg)
    raise TypeError(f"expected a preset name or a TrainConfig, got {type(preset_or_cfg).__name__}")


def _cache_len(cfg: TrainConfig) -> int:
    """DAPO's L_cache in tokens (the config may hold it as a share of the budget)."""
    return int(getattr(cfg, "overlong_cache_len", cfg.overlong_cache))


def _common_missing(cfg: TrainConfig) -> list:
    out = []
    if getattr(cfg, "train_router", False):
        out.append("train_router=True (the MoE router trained in full beside the LoRA adapter: not exported)")
    if getattr(cfg, "rollout_autocast", None) is not None:
        out.append(f"rollout_autocast={cfg.rollout_autocast!r} (CPU stand-in for a reduced-precision rollout engine)")
    if getattr(cfg, "rollout_weights", None) is not None:
        out.append(f"rollout_weights={cfg.rollout_weights!r} (CPU stand-in for an 8-bit quantized rollout engine)")
    if getattr(cfg, "advantage_estimator", "group") != "group":
        out.append(f"advantage_estimator={cfg.advantage_estimator!r} (value-model advantages, PPO/VAPO: "
                   "only group advantages are exported)")
    if getattr(cfg, "positive_lm_weight", 0.0) > 0:
        out.append(f"positive_lm_weight={cfg.positive_lm_weight} (VAPO's LM loss on correct responses)")
    if cfg.gfpo_k is not None:
        out.append(f"gfpo_k={cfg.gfpo_k} (GFPO: keep k of G responses per group"
                   f"{', adaptive k' if cfg.gfpo_adaptive else ''})")
    return out


def trl_missing(preset_or_cfg) -> list:
    """Fields of the configuration that TRL 1.16's GRPOTrainer cannot reproduce, one line each."""
    cfg = _config(preset_or_cfg)
    out = []
    if cfg.dynamic_sampling:
        out.append("dynamic_sampling=True (DAPO Sec. 3.2: drop zero-variance groups and re-sample)")
    if cfg.adv_scale == "rloo":
        out.append("adv_scale='rloo' (TRL's GRPOTrainer has no leave-one-out baseline)")
    out += _common_missing(cfg)
    if cfg.routing_replay:
        out.append("routing_replay=True (GSPO Sec. 5.3 Routing Replay)")
    if cfg.old_logps == "engine":
        out.append("old_logps='engine' (TRL recomputes pi_old; vLLM log-probs only enter its IS correction)")
    return out + trl_family_missing(cfg)


def verl_missing(preset_or_cfg, megatron: bool = False) -> list:
    """Fields of the configuration that verl 0.9.1 cannot reproduce, one line each."""
    cfg = _config(preset_or_cfg)
    out = []
    if cfg.adv_scale == "batch":
        out.append("adv_scale='batch' (verl's GRPO estimator scales by the group std or not at all)")
    out += _common_missing(cfg)
    if cfg.overlong == "filter":
        out.append("overlong='filter' (no loss mask for truncated responses in verl)")
    if cfg.routing_replay and not megatron:
        out.append("routing_replay=True (verl's router_replay.mode=R2 exists only in its Megatron "
                   "trainer; pass megatron=True)")
    if cfg.old_logps == "engine" and cfg.loss.ratio_level != "token":
        out.append("old_logps='engine' with a sequence ratio (verl's bypass mode is token-level PPO-clip)")
    return out + verl_family_missing(cfg)


def _enforce(missing: list, target: str, strict: bool) -> None:
    if not missing:
        return
    msg = f"{target} cannot reproduce: " + "; ".join(missing)
    if strict:
        raise UnsupportedFeature(msg + ". Pass strict=False to export the rest (with a warning).")
    warnings.warn(msg + ". Left out of the export.", UserWarning, stacklevel=3)


def _split(total: int, parts: int, what: str) -> int:
    if total % parts:
        raise ValueError(f"{what}: {total} is not divisible by {parts}")
    return total // parts


def to_trl(preset_or_cfg, strict: bool = True, num_processes: int = 1) -> dict:
    """Keyword arguments for `trl.GRPOConfig` reproducing the objective, batch and optimiser.

    One gpolib step = one generation batch of prompts_per_step * G completions = mu TRL optimizer
    steps (steps_per_generation = mu, num_iterations = 1), so max_steps = steps * mu. The soft
    overlong punishment is a reward function: pass `trl_reward_funcs(cfg)` to `GRPOTrainer`.
    Learning-rate warm-up: TRL's "constant_with_warmup" ramps s / warmup, ours (s + 1) / (warmup + 1).
    """
    cfg = _config(preset_or_cfg)
    _enforce(trl_missing(cfg), "TRL", strict)
    per_step = cfg.prompts_per_step * cfg.group_size
    per_device = _split(per_step, cfg.mu * num_processes, "prompts_per_step * group_size / (mu * num_processes)")
    loss_type = TRL_LOSS_TYPE[cfg.loss.aggregation]
    if loss_type == "dapo" and cfg.mu > 1 and num_processes == 1:
        loss_type = "bnpo"  # this minibatch's own token count, as ours (see the module docstring)
    kwargs = dict(
        loss_type=loss_type,
        importance_sampling_level="token" if cfg.loss.ratio_level == "token" else "sequence", beta=cfg.loss.beta,
        use_bias_correction_kl=False,  # our k3 term is not weighted by the ratio (TRL 1.16 defaults to True)
        scale_rewards=cfg.adv_scale, num_generations=cfg.group_size,
        mask_truncated_completions=cfg.overlong == "filter",
        per_device_train_batch_size=per_device, gradient_accumulation_steps=1,
        steps_per_generation=cfg.mu, num_iterations=1, max_steps=cfg.steps * cfg.mu,
        max_completion_length=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p, top_k=0,
        learning_rate=cfg.lr, weight_decay=cfg.weight_decay, max_grad_norm=cfg.max_grad_norm,
        lr_scheduler_type="constant_with_warmup", warmup_steps=cfg.warmup_steps, seed=cfg.seed,
    )
    return {**kwargs, **trl_family_kwargs(cfg)}  # the surrogate's keys (CISPO's loss_type and cap), the correction


def trl_correctness(completions, answer, **_) -> list:
    """TRL reward function: 1.0 when the completion's final `A=<int>` line equals the row's `answer`."""
    from .rewards import correctness_reward
    return [correctness_reward(c, int(a)) for c, a in zip(completions, answer)]


def trl_soft_overlong(completion_ids, max_len: int, cache_len: int, **_) -> list:
    """TRL reward function: DAPO Eq. 13 on the completion length in tokens (EOS included, as ours)."""
    from .rewards import soft_overlong_penalty
    return [soft_overlong_penalty(len(ids), max_len, cache_len) for ids in completion_ids]


def trl_reward_funcs(preset_or_cfg) -> list:
    """The reward functions of the configuration for `GRPOTrainer(reward_funcs=...)`; TRL sums them."""
    cfg = _config(preset_or_cfg)
    funcs = [trl_correctness]
    if cfg.overlong == "shaping":
        funcs.append(functools.partial(trl_soft_overlong, max_len=cfg.max_new_tokens, cache_len=_cache_len(cfg)))
    return funcs


def to_verl(preset_or_cfg, strict: bool = True, megatron: bool = False, n_gpus: int = 1) -> dict:
    """verl trainer overrides {dotted.key: value} reproducing the objective, batch and optimiser.

    Sizes are in verl's units: data.train_batch_size and ppo_mini_batch_size count prompts,
    actor_rollout_ref.rollout.n = G; the micro-batch (responses per GPU per pass) divides the
    per-GPU minibatch. Turn the keys into command-line overrides with `verl_overrides`.
    """
    cfg = _config(preset_or_cfg)
    _enforce(verl_missing(cfg, megatron), "verl", strict)
    loss = cfg.loss
    mini = _split(cfg.prompts_per_step, cfg.mu, "prompts_per_step / mu")
    per_gpu = _split(mini * cfg.group_size, n_gpus, "minibatch responses / n_gpus")
    keys = {
        "algorithm.adv_estimator": "rloo" if cfg.adv_scale == "rloo" else "grpo",
        "algorithm.norm_adv_by_std_in_grpo": cfg.adv_scale == "group",
        "algorithm.use_kl_in_reward": False,
        "data.train_batch_size": cfg.prompts_per_step,
        "data.max_response_length": cfg.max_new_tokens,
        "actor_rollout_ref.rollout.n": cfg.group_size,
        "actor_rollout_ref.rollout.temperature": cfg.temperature,
        "actor_rollout_ref.rollout.top_p": cfg.top_p,
        ACTOR + "ppo_mini_batch_size": mini,
        ACTOR + "ppo_micro_batch_size_per_gpu": math.gcd(per_gpu, cfg.micro_batch_rows),
        ACTOR + "ppo_epochs": 1,
        ACTOR + "clip_ratio_c": VERL_DUAL_CLIP_OFF,
        ACTOR + "loss_agg_mode": VERL_AGG_MODE[loss.aggregation],
        ACTOR + "use_kl_loss": loss.beta > 0,
        ACTOR + "kl_loss_coef": loss.beta,
        ACTOR + "kl_loss_type": "low_var_kl",
        ACTOR + "entropy_coeff": 0.0,
        ACTOR + "optim.lr": cfg.lr,
        ACTOR + "optim.lr_warmup_steps": cfg.warmup_steps,
        ACTOR + "optim.weight_decay": cfg.weight_decay,
        ACTOR + "optim.clip_grad": cfg.max_grad_norm,
        "actor_rollout_ref.model.lora_rank": cfg.lora_r,
        "actor_rollout_ref.model.lora_alpha": cfg.lora_alpha,
        "trainer.total_training_steps": cfg.steps,
    }
    if loss.aggregation == "seq_mean_token_sum_norm":
        keys[ACTOR + "loss_scale_factor"] = loss.max_len
    keys.update(_verl_sampling_keys(cfg, megatron))
    keys.update(verl_family_keys(cfg, ACTOR))  # the surrogate's loss mode and bounds, the mismatch correction
    return keys


def _verl_sampling_keys(cfg: TrainConfig, megatron: bool) -> dict:
    """DAPO dynamic sampling and overlong shaping, pi_old from the engine, Routing Replay."""
    keys: dict = {}
    if cfg.dynamic_sampling:
        keys.update({"algorithm.filter_groups.enable": True, "algorithm.filter_groups.metric": "reward",
                     "algorithm.filter_groups.max_num_gen_batches": cfg.max_gen_batches})
    if cfg.overlong == "shaping":
        keys.update({"reward.reward_manager.name": "dapo",
                     "reward.reward_kwargs.overlong_buffer_cfg.enable": True,
                     "reward.reward_kwargs.overlong_buffer_cfg.len": _cache_len(cfg),
                     "reward.reward_kwargs.overlong_buffer_cfg.penalty_factor": 1.0,
                     "reward.reward_kwargs.overlong_buffer_cfg.log": False,
                     "reward.reward_kwargs.max_resp_len": cfg.max_new_tokens})
    if cfg.old_logps == "engine" and cfg.loss.ratio_level == "token":
        keys.update({"algorithm.rollout_correction.bypass_mode": True,
                     "algorithm.rollout_correction.loss_type": "ppo_clip",
                     "actor_rollout_ref.rollout.calculate_log_probs": True})
    if cfg.routing_replay and megatron:
        keys[ACTOR + "megatron.router_replay.mode"] = "R2"  # record in the old-logprob pass, replay in updates
    return keys


def verl_overrides(keys: dict) -> list:
    """Hydra command-line overrides `key=value` (`+key=value` for keys verl's yaml does not declare)."""
    out = []
    for k, v in keys.items():
        text = str(v) if not isinstance(v, bool) else ("True" if v else "False")
        out.append(("+" if k.startswith(VERL_ADDED_PREFIXES) else "") + f"{k}={text}")
    return out
