"""The export of the family since GSPO (CISPO, GMPO, the TIS / MIS mismatch correction) to TRL and verl.

`gpolib.export.to_trl` / `to_verl` add these keys; what a target lacks is named by `trl_family_missing` /
`verl_family_missing` (strict export raises with it). Names read off TRL 1.16.0 (`trainer/grpo_config.py`,
`grpo_trainer.py`, `experimental/gmpo/`) and verl 0.9.1 (`trainer/ppo/core_algos.py`,
`trainer/ppo/rollout_corr_helper.py`, `trainer/config/algorithm.py`).

Mapping (ours -> TRL | verl):
  surrogate='cispo'  loss_type="cispo", epsilon_high = 1 + eps_high (TRL's epsilon_high is the cap itself, and
                     TRL has no lower bound: eps_low >= 1 only) | policy_loss.loss_mode="cispo" (clip_ratio_low/high
                     as for the clip)
  surrogate='gmpo'   trl.experimental.gmpo.GMPOTrainer / GMPOConfig (epsilon, epsilon_high in log space; mean over
                     responses: aggregation 'seq_mean_token_mean' only) | loss_mode="geo_mean" (same)
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
    loss, out = cfg.loss, []
    if loss.surrogate == "cispo" and loss.eps_low < 1:
        out.append(f"surrogate='cispo' with eps_low={loss.eps_low} (TRL's cispo has no lower bound on the IS weight)")
    if loss.surrogate == "cispo" and loss.aggregation != "token_mean":
        out.append(f"surrogate='cispo' with aggregation={loss.aggregation!r} (TRL's cispo is token-mean)")
    if loss.surrogate == "gmpo" and loss.aggregation != "seq_mean_token_mean":
        out.append(f"surrogate='gmpo' with aggregation={loss.aggregation!r} (TRL's GMPOTrainer: mean over responses)")
    if loss.surrogate == "gmpo" and loss.mismatch_correction != "none":
        out.append("mismatch_correction with surrogate='gmpo' (TRL's GMPOTrainer does not apply the IS weight)")
    return out


def verl_family_missing(cfg) -> list:
    """What verl 0.9.1 cannot reproduce of the surrogate and the mismatch correction, one line each."""
    loss, out = cfg.loss, []
    if loss.surrogate == "gmpo" and loss.aggregation != "seq_mean_token_mean":
        out.append(f"surrogate='gmpo' with aggregation={loss.aggregation!r} (verl's geo_mean: mean over responses)")
    if loss.surrogate == "gmpo" and loss.mismatch_correction.startswith("token"):
        out.append("token-level mismatch_correction with surrogate='gmpo' (verl's geo_mean takes the geometric "
                   "mean of the token weights)")
    return out


def trl_family_kwargs(cfg) -> dict:
    """`GRPOConfig` keywords of the surrogate and the mismatch correction (override the clip's)."""
    loss = cfg.loss
    keys: dict = {"vllm_importance_sampling_correction": loss.mismatch_correction != "none"}
    if loss.mismatch_correction != "none":
        keys.update(vllm_importance_sampling_mode=loss.mismatch_correction,
                    vllm_importance_sampling_clip_max=loss.mismatch_cap)
    if loss.surrogate == "cispo":
        keys.update(loss_type="cispo", epsilon_high=1.0 + loss.eps_high)
    return keys


def trl_classes(cfg) -> tuple:
    """(config class, trainer class) of TRL that train `cfg`: GRPO's, or the experimental GMPO's."""
    if cfg.loss.surrogate == "gmpo":
        from trl.experimental.gmpo import GMPOConfig, GMPOTrainer
        return GMPOConfig, GMPOTrainer
    from trl import GRPOConfig, GRPOTrainer
    return GRPOConfig, GRPOTrainer


def verl_family_keys(cfg, actor: str) -> dict:
    """verl overrides of the surrogate and the mismatch correction; `actor` is the actor's key prefix."""
    loss, keys = cfg.loss, {}
    if loss.surrogate != "clip":
        keys[actor + "policy_loss.loss_mode"] = {"cispo": "cispo", "gmpo": "geo_mean"}[loss.surrogate]
    if loss.mismatch_correction != "none":
        level, _, kind = loss.mismatch_correction.partition("_")
        threshold = loss.mismatch_cap if kind == "truncate" else f"{VERL_MASK_FLOOR}_{loss.mismatch_cap}"
        keys.update({"algorithm.rollout_correction.rollout_is": level,
                     "algorithm.rollout_correction.rollout_is_threshold": threshold,
                     "actor_rollout_ref.rollout.calculate_log_probs": True})
    return keys
