"""The export of the surrogate (CISPO, GMPO, ...) and of the TIS / MIS mismatch correction to TRL and verl.

`gpolib.export.to_trl` / `to_verl` add these keys; what a target lacks is named by `trl_family_missing` /
`verl_family_missing` (strict export raises with it). The surrogate exports itself (`Surrogate.trl`, `.verl`, their
`*_missing`, `trl_classes`: each in its own module, in each target's own convention, e.g. CISPO's absolute cap as
TRL's epsilon_high and as verl's 1 + clip_ratio_high). Names read off TRL 1.16.0 (`trainer/grpo_config.py`,
`grpo_trainer.py`, `experimental/gmpo/`) and verl 0.9.1 (`trainer/ppo/core_algos.py`,
`trainer/ppo/rollout_corr_helper.py`, `trainer/config/algorithm.py`).

The selection steps (`objectives.selection`) go to TRL as top_entropy_quantile / off_policy_mask_threshold; verl
has neither.
Mapping of the mismatch correction (ours -> TRL | verl):
  mismatch_correction  vllm_importance_sampling_correction (False when ours is 'none': TRL's default is True),
                     vllm_importance_sampling_mode = ours, vllm_importance_sampling_clip_max = C (the former
                     `..._cap` is deprecated) | algorithm.rollout_correction.rollout_is = token | sequence,
                     rollout_is_threshold = C (truncate) or "1e-09_C" (IcePop: zero outside [1e-9, C], our mask
                     above C), actor_rollout_ref.rollout.calculate_log_probs=True
Known departures: TRL's cispo normaliser is the generation batch's tokens / steps_per_generation (exact at mu = 1,
the mean minibatch count at mu > 1); verl clamps log ratios to [-20, 20] (and masks weights below 1e-9, i.e.
|log w| > 20.7); verl's geo_mean divides by |o_i| + 1e-8.
"""
from __future__ import annotations

VERL_MASK_FLOOR = 1e-9
"""the lower bound of verl's IcePop range standing for our one-sided mask (verl requires a positive bound)"""


def trl_family_missing(cfg) -> list:
    """What TRL 1.16 cannot reproduce of the surrogate and the mismatch correction, one line each."""
    return cfg.loss.surrogate.trl_missing(cfg.loss)


def verl_family_missing(cfg) -> list:
    """What verl 0.9.1 cannot reproduce of the surrogate, the mismatch correction and the selection steps."""
    loss, out = cfg.loss, list(cfg.loss.surrogate.verl_missing(cfg.loss))
    if loss.top_entropy_quantile < 1:
        out.append(f"top_entropy_quantile={loss.top_entropy_quantile} (verl has no high-entropy token selection)")
    if loss.off_policy_mask_threshold is not None:
        out.append(f"off_policy_mask_threshold={loss.off_policy_mask_threshold} (verl has no off-policy sequence "
                   "mask)")
    return out


def trl_family_kwargs(cfg) -> dict:
    """`GRPOConfig` keywords of the surrogate and the mismatch correction (a surrogate's `loss_type` overrides the
    aggregation's)."""
    loss = cfg.loss
    keys: dict = {"vllm_importance_sampling_correction": loss.mismatch_correction != "none"}
    if loss.mismatch_correction != "none":
        keys.update(vllm_importance_sampling_mode=loss.mismatch_correction,
                    vllm_importance_sampling_clip_max=loss.mismatch_cap)
    if loss.top_entropy_quantile < 1:
        keys["top_entropy_quantile"] = loss.top_entropy_quantile
    if loss.off_policy_mask_threshold is not None:
        keys["off_policy_mask_threshold"] = loss.off_policy_mask_threshold
    return {**keys, **loss.surrogate.trl(loss)}


def trl_classes(cfg) -> tuple:
    """(config class, trainer class) of TRL that train `cfg`: GRPO's, or the surrogate's own (GMPO's experimental)."""
    return cfg.loss.surrogate.trl_classes()


def verl_family_keys(cfg, actor: str) -> dict:
    """verl overrides of the surrogate and the mismatch correction; `actor` is the actor's key prefix."""
    loss = cfg.loss
    keys = {actor + k: v for k, v in loss.surrogate.verl(loss).items()}
    if loss.mismatch_correction != "none":
        level, _, kind = loss.mismatch_correction.partition("_")
        threshold = loss.mismatch_cap if kind == "truncate" else f"{VERL_MASK_FLOOR}_{loss.mismatch_cap}"
        keys.update({"algorithm.rollout_correction.rollout_is": level,
                     "algorithm.rollout_correction.rollout_is_threshold": threshold,
                     "actor_rollout_ref.rollout.calculate_log_probs": True})
    return keys
