"""Paper -> TrainConfig. Each value that differs from the shared defaults cites its source.

Shared across presets (kept fixed so variants differ only in the objective): model, task,
prompts_per_step = 16, group_size = 8, lr, warm-up, gradient clipping, LoRA rank, budget.
KL: DeepSeekMath uses beta = 0.04 (Sec. 4.2); DAPO (Sec. 2.3) and Dr. GRPO drop it. We use
beta = 0 everywhere so that the comparison isolates ratio, clipping and aggregation.
"""
from __future__ import annotations

from .config import LossConfig, TrainConfig

PRESETS = ("grpo", "dapo", "gspo", "gfpo", "dr_grpo")


def _grpo(base: TrainConfig) -> TrainConfig:
    # DeepSeekMath Eq. 3: token ratio, symmetric clip eps = 0.2, sample-level mean, group-std advantages
    return base.replace(name="grpo", adv_scale="group",
                        loss=LossConfig(ratio_level="token", eps_low=0.2, eps_high=0.2,
                                        aggregation="seq_mean_token_mean"))


def _dapo(base: TrainConfig) -> TrainConfig:
    # DAPO Sec. 3.1 Clip-Higher eps_low 0.2 / eps_high 0.28; Sec. 3.3 token-level loss;
    # Sec. 3.2 dynamic sampling; Sec. 3.4 soft overlong punishment, L_cache = 4096 of 20480: a share 0.2 of the budget
    return base.replace(name="dapo", adv_scale="group", dynamic_sampling=True, overlong="shaping", overlong_cache=0.2,
                        loss=LossConfig(ratio_level="token", eps_low=0.2, eps_high=0.28, aggregation="token_mean"))


def _gspo(base: TrainConfig) -> TrainConfig:
    # GSPO Eq. 5-7 sequence ratio; Sec. 5.1: clip 3e-4 / 4e-4, rollout batch split into 4 minibatches
    return base.replace(name="gspo", adv_scale="group", mu=4,
                        loss=LossConfig(ratio_level="sequence", eps_low=3e-4, eps_high=4e-4,
                                        aggregation="seq_mean_token_mean"))


def _gfpo(base: TrainConfig) -> TrainConfig:
    # GFPO Sec. 3-4: sample more (G = 16), keep the k = 8 shortest, token-level loss as in its DAPO-style base
    return base.replace(name="gfpo", adv_scale="group", group_size=16, gfpo_k=8, gfpo_metric="length",
                        loss=LossConfig(ratio_level="token", eps_low=0.2, eps_high=0.28, aggregation="token_mean"))


def _dr_grpo(base: TrainConfig) -> TrainConfig:
    # Dr. GRPO Sec. 3.2 (Eq. 3 corrected): no std scaling, constant normaliser max_len instead of 1/|o_i|
    return base.replace(name="dr_grpo", adv_scale="none",
                        loss=LossConfig(ratio_level="token", eps_low=0.2, eps_high=0.2,
                                        aggregation="seq_mean_token_sum_norm", max_len=base.max_new_tokens))


_BUILDERS = {"grpo": _grpo, "dapo": _dapo, "gspo": _gspo, "gfpo": _gfpo, "dr_grpo": _dr_grpo}


def get(name: str, /, **overrides) -> TrainConfig:
    """The TrainConfig of a paper's recipe, with optional field overrides (`loss_<field>` for LossConfig).

    Values derived from the budget follow an overridden `max_new_tokens` (see `TrainConfig.replace`).
    """
    if name not in _BUILDERS:
        raise ValueError(f"preset={name!r} is invalid; allowed: {' | '.join(PRESETS)}")
    cfg = _BUILDERS[name](TrainConfig())
    return cfg.replace(**overrides) if overrides else cfg
