"""Which values a config may hold: the allowed choices and the checks run on construction.

Each check raises `ValueError` naming the field and what is allowed (`fail`), before any compute.
`gpolib.config` declares the fields; this module judges their values.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

RATIO_LEVELS = ("token", "sequence", "sequence_token")
AGGREGATIONS = ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm")
ADV_SCALES = ("group", "batch", "none", "rloo")
ADVANTAGE_ESTIMATORS = ("group", "gae")
OVERLONG_MODES = ("none", "shaping", "filter")
GFPO_METRICS = ("length", "efficiency")
OLD_LOGP_SOURCES = ("trainer", "engine")
BACKENDS = ("decoder", "hf", "hf_generate", "vllm")
DEVICES = ("cpu", "cuda", "auto")
DTYPES = ("float32", "bfloat16", "float16")
PROMPT_STYLES = ("auto", "raw", "chat")
AUTOCAST_DTYPES = ("bfloat16", "float16")
ROLLOUT_WEIGHTS = ("int8", "w8a8")
REPORT_TO = ("none", "tensorboard")
EXPERT_CHANGE_MODES = ("full", "minibatch")
MISMATCH_CORRECTIONS = ("none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
_CHOICES = {"adv_scale": ADV_SCALES, "overlong": OVERLONG_MODES, "gfpo_metric": GFPO_METRICS,
            "old_logps": OLD_LOGP_SOURCES, "device": DEVICES, "dtype": DTYPES, "prompt_style": PROMPT_STYLES,
            "report_to": REPORT_TO, "expert_change": EXPERT_CHANGE_MODES}


def fail(name: str, value: Any, allowed: str) -> None:
    """Raise ValueError("<name>=<value> is invalid; allowed: <allowed>")."""
    raise ValueError(f"{name}={value!r} is invalid; allowed: {allowed}")


def choice(name: str, value: Any, options: tuple, why: str = "") -> None:
    """`value` must be one of `options`; `why` explains an exclusion."""
    if value not in options:
        fail(name, value, " | ".join(repr(o) for o in options) + why)


def positive(name: str, value: Any, minimum: float = 0, strict: bool = True, integer: bool = False) -> None:
    """`value` must be a number (an int if `integer`, never a bool) above `minimum` (or equal, if not strict)."""
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value):
        fail(name, value, f"{'an int' if integer else 'a finite number'} {'>' if strict else '>='} {minimum}")
    if (value <= minimum) if strict else (value < minimum):
        fail(name, value, f"{'>' if strict else '>='} {minimum}")


def known_fields(changes: dict, known, what: str, prefix: str = "", more: str = "") -> None:
    """Raise naming the keys of `changes` that are not in `known` (the fields of `what`), with the closest names."""
    import difflib

    known = list(known)
    unknown = sorted(set(changes) - set(known))
    if unknown:
        close = [prefix + c for k in unknown for c in difflib.get_close_matches(k, known, n=1)]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ValueError(f"unknown {what} field(s) {[prefix + k for k in unknown]}{hint}; allowed: "
                         f"{', '.join(prefix + k for k in sorted(known))}{more}")


def check_loss(cfg) -> None:
    """LossConfig: the three axes (the surrogate's parameters are checked by the surrogate itself, its relations
    with the config by `check_loss`), the KL weight, Dr. GRPO's normaliser, the mismatch correction."""
    choice("ratio_level", cfg.ratio_level, RATIO_LEVELS)
    choice("aggregation", cfg.aggregation, AGGREGATIONS)
    cfg.surrogate.check_loss(cfg)
    positive("beta", cfg.beta, 0, strict=False)
    if cfg.aggregation == "seq_mean_token_sum_norm" and cfg.max_len is None:
        fail("max_len", None, "a positive int when aggregation='seq_mean_token_sum_norm'")
    if cfg.max_len is not None:
        positive("max_len", cfg.max_len, 0, integer=True)
    choice("mismatch_correction", cfg.mismatch_correction, MISMATCH_CORRECTIONS)
    positive("mismatch_cap", cfg.mismatch_cap, 0)  # finite: a config is stored as strict JSON
    positive("top_entropy_quantile", cfg.top_entropy_quantile, 0)
    if cfg.top_entropy_quantile > 1:
        fail("top_entropy_quantile", cfg.top_entropy_quantile, "0 < top_entropy_quantile <= 1 (1: every token)")
    if cfg.off_policy_mask_threshold is not None:
        positive("off_policy_mask_threshold", cfg.off_policy_mask_threshold, 0, strict=False)


def check_fields(cfg) -> None:
    """TrainConfig, each field on its own: type, range, allowed values."""
    for name in ("name", "model", "task_train", "task_eval"):
        if not isinstance(getattr(cfg, name), str) or not getattr(cfg, name):
            fail(name, getattr(cfg, name), "a non-empty string")
    for name, options in _CHOICES.items():
        choice(name, getattr(cfg, name), options)
    choice("backend", cfg.backend, BACKENDS)
    for name in ("dynamic_sampling", "gfpo_adaptive", "routing_replay", "vllm_sleep", "log_expert_change"):
        if not isinstance(getattr(cfg, name), bool):
            fail(name, getattr(cfg, name), "True | False")
    if cfg.gradient_checkpointing is not None and not isinstance(cfg.gradient_checkpointing, bool):
        fail("gradient_checkpointing", cfg.gradient_checkpointing, "None (on for CUDA) | True | False")
    positive("group_size", cfg.group_size, 1, integer=True)
    for name in ("prompts_per_step", "steps", "mu", "max_new_tokens", "max_gen_batches",
                 "eval_prompts", "eval_samples", "checkpoint_every", "micro_batch_rows"):
        positive(name, getattr(cfg, name), 0, integer=True)
    for name in ("warmup_steps", "lora_r", "lora_alpha", "eval_every", "seed", "rollout_threads"):
        positive(name, getattr(cfg, name), 0, strict=False, integer=True)
    for name in ("lr", "max_grad_norm", "temperature"):
        positive(name, getattr(cfg, name), 0)
    positive("weight_decay", cfg.weight_decay, 0, strict=False)
    rows = cfg.prompts_per_step * cfg.group_size  # a sampling batch's rows: more threads than rows have no work
    if cfg.rollout_threads > rows:  # (and torch aborts the process on a huge thread count instead of raising)
        fail("rollout_threads", cfg.rollout_threads, f"0 (leave the setting alone) .. {rows} (the rows of a sampling "
             "batch, prompts_per_step x group_size)")
    positive("top_p", cfg.top_p, 0)
    if cfg.top_p > 1:
        fail("top_p", cfg.top_p, "0 < top_p <= 1")
    _check_adapter_steps(cfg)


def _check_adapter_steps(cfg) -> None:
    """adapter_steps: a tuple of steps before the last (ints) or of shares of the run's steps (floats in (0, 1))."""
    def ok(n) -> bool:
        if isinstance(n, float):
            return 0 < n < 1
        return isinstance(n, int) and not isinstance(n, bool) and 1 <= n < cfg.steps
    if not isinstance(cfg.adapter_steps, tuple) or not all(map(ok, cfg.adapter_steps)):
        fail("adapter_steps", cfg.adapter_steps, f"a tuple of steps 1..{cfg.steps - 1} (ints) or of shares of steps "
             "in (0, 1) (floats)")


def _check_vllm(cfg) -> None:
    """The vLLM engine's settings, and what the engine needs: the policy travels as a LoRA adapter."""
    positive("vllm_gpu_memory_utilization", cfg.vllm_gpu_memory_utilization, 0)
    if cfg.vllm_gpu_memory_utilization >= 1:
        fail("vllm_gpu_memory_utilization", cfg.vllm_gpu_memory_utilization, "0 < share < 1")
    if cfg.vllm_sleep and cfg.backend != "vllm":
        fail("vllm_sleep", True, "False unless backend='vllm'")
    if cfg.backend == "vllm" and cfg.lora_r == 0:
        fail("lora_r", 0, "> 0 with backend='vllm' (the engine receives the policy as a LoRA adapter)")


def check_relations(cfg) -> None:
    """TrainConfig, fields that bound each other."""
    if cfg.mu > cfg.prompts_per_step * cfg.group_size:
        fail("mu", cfg.mu, f"<= prompts_per_step * group_size = {cfg.prompts_per_step * cfg.group_size}")
    if isinstance(cfg.overlong_cache, float) and not 0 < cfg.overlong_cache < 1:
        fail("overlong_cache", cfg.overlong_cache, "an int of tokens, or a share 0 < x < 1 of max_new_tokens")
    positive("overlong_cache", cfg.overlong_cache_len, 0, strict=False, integer=True)
    if cfg.overlong_cache_len >= cfg.max_new_tokens:
        fail("overlong_cache", cfg.overlong_cache, f"< max_new_tokens = {cfg.max_new_tokens} tokens")
    _check_vllm(cfg)
    _check_moe_and_engine(cfg)
    if cfg.loss.mismatch_correction != "none" and cfg.old_logps == "engine":
        fail("loss.mismatch_correction", cfg.loss.mismatch_correction,
             "'none' with old_logps='engine' (pi_old is then the engine's: the weight would be 1)")
    if cfg.gfpo_k is not None:
        positive("gfpo_k", cfg.gfpo_k, 0, integer=True)
        if not 2 <= cfg.gfpo_k <= cfg.group_size:
            fail("gfpo_k", cfg.gfpo_k, f"2 <= gfpo_k <= group_size = {cfg.group_size}")
    if cfg.gfpo_adaptive and cfg.gfpo_k is None:
        fail("gfpo_adaptive", True, "False unless gfpo_k is set")
    if cfg.loss.aggregation == "seq_mean_token_sum_norm" and cfg.loss.max_len != cfg.max_new_tokens:
        fail("loss.max_len", cfg.loss.max_len, f"max_new_tokens = {cfg.max_new_tokens} (Dr. GRPO normaliser)")
    cfg.loss.surrogate.check_train(cfg)


def _check_moe_and_engine(cfg) -> None:
    """Router training (LoRA only; the vLLM engine receives LoRA weights, not a router) and the rollout autocast."""
    if not isinstance(cfg.train_router, bool):
        fail("train_router", cfg.train_router, "True | False")
    if cfg.train_router and cfg.lora_r == 0:
        fail("train_router", True, "False with lora_r=0 (full fine-tuning trains the router already)")
    if cfg.train_router and cfg.backend == "vllm":
        fail("train_router", True, "False with backend='vllm' (the engine receives LoRA weights only)")
    choice("rollout_autocast", cfg.rollout_autocast, (None,) + AUTOCAST_DTYPES)
    choice("rollout_weights", cfg.rollout_weights, (None,) + ROLLOUT_WEIGHTS)
    if cfg.rollout_weights is not None and cfg.backend != "decoder":
        fail("rollout_weights", cfg.rollout_weights, f"None with backend={cfg.backend!r} (the decoder quantizes)")
    if cfg.rollout_weights is not None and cfg.rollout_autocast is not None:
        fail("rollout_weights", cfg.rollout_weights, "None with rollout_autocast (one reduced-precision engine)")
    if cfg.routing_replay and cfg.old_logps == "engine":  # update.pi_old would silently not replay
        fail("routing_replay", True, "False with old_logps='engine' (the rollout engine does not record its routing)")


GAE_ONLY = ("gamma", "lambda_policy", "lambda_critic", "lambda_alpha", "value_lr_scale", "value_pretrain_steps",
            "value_clip")


def check_value_fields(cfg) -> None:
    """The advantage estimator and the value-model fields (PPO / VAPO)."""
    choice("advantage_estimator", cfg.advantage_estimator, ADVANTAGE_ESTIMATORS)
    for name in ("gamma", "lambda_policy") + (("lambda_critic",) if cfg.lambda_critic is not None else ()):
        positive(name, getattr(cfg, name), 0, strict=False)
        if getattr(cfg, name) > 1:
            fail(name, getattr(cfg, name), "0 <= x <= 1")
    for name in ("lambda_alpha", "value_clip"):
        if getattr(cfg, name) is not None:
            positive(name, getattr(cfg, name), 0)
    positive("value_lr_scale", cfg.value_lr_scale, 0)
    if isinstance(cfg.value_pretrain_steps, float) and not 0 < cfg.value_pretrain_steps <= 1:
        fail("value_pretrain_steps", cfg.value_pretrain_steps, "an int of rollouts, or a share 0 < x <= 1 of steps")
    positive("value_pretrain_steps", cfg.value_pretrain_len, 0, strict=False, integer=True)
    positive("positive_lm_weight", cfg.positive_lm_weight, 0, strict=False)
    defaults = {f.name: f.default for f in dataclasses.fields(cfg)}
    if cfg.advantage_estimator != "gae":
        for name in GAE_ONLY:
            if getattr(cfg, name) != defaults[name]:
                fail(name, getattr(cfg, name), f"{defaults[name]!r} unless advantage_estimator='gae'")
        return
    if cfg.lora_r == 0:
        fail("lora_r", 0, "> 0 with advantage_estimator='gae' (the value model is a LoRA adapter on the base)")
    if cfg.gfpo_k is not None:
        fail("gfpo_k", cfg.gfpo_k, "None with advantage_estimator='gae' (GFPO filters group advantages)")
    if cfg.adv_scale != "group":
        fail("adv_scale", cfg.adv_scale, "'group' (unused) with advantage_estimator='gae'")
