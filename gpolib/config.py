"""Configuration dataclasses, validated on construction.

`LossConfig` holds the three axes of the GRPO-family objective (ratio level, surrogate, aggregation) plus the
KL weight and the mismatch correction; `TrainConfig` everything the rollout/train loop needs. Both are built with
keywords only. A bad value raises `ValueError` naming the field and the allowed values, before any compute
(the checks and the allowed values are in `gpolib.validation`).
A derived value is never stored where it could disagree with its source: DAPO's L_cache may be a share
of the budget (`overlong_cache_len`), and `replace` keeps Dr. GRPO's `loss.max_len` = `max_new_tokens`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Optional

from .loss_config import LossConfig, replaced
from .validation import check_fields, check_relations, check_value_fields, fail, known_fields

__all__ = ["LossConfig", "TrainConfig"]


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """One RL run: model, rollout, reward shaping, group filters, objective, optimiser."""

    name: str = "grpo"
    """label of the run (usually the preset it came from)."""
    model: str = "data/models/tiny-qwen3"
    """local path or hub name of the base causal LM (e.g. 'Qwen/Qwen2.5-0.5B-Instruct')."""
    task_train: str = "data/tasks/train.jsonl"
    """training prompts (jsonl with 'prompt' and 'answer')."""
    task_eval: str = "data/tasks/heldout.jsonl"
    """held-out prompts for evaluation."""
    prompt_style: str = "auto"
    """'raw' task prompt, 'chat' (instruction in the tokenizer's chat template), or 'auto' (chat when
    the tokenizer has a template: hub instruct models; raw for the embedded models)."""
    loss: LossConfig = field(default_factory=LossConfig)
    """the policy objective, see LossConfig."""
    adv_scale: str = "group"
    """advantage normalisation: 'group' (GRPO: (r - mean_g) / (std_g + 1e-4)), 'batch', 'none' (Dr. GRPO), 'rloo'."""
    advantage_estimator: str = "group"
    """'group': one advantage per response from its group's rewards (GRPO family, see adv_scale); 'gae':
    one per token from a value model (GAE, Schulman et al. 2016 Eq. 16; PPO and VAPO, gpolib.value)."""
    gamma: float = 1.0
    """GAE discount gamma; 1.0: no discount (one terminal reward per response)."""
    lambda_policy: float = 0.95
    """GAE lambda of the policy's advantages (PPO Table 3: 0.95)."""
    lambda_critic: Optional[float] = None
    """GAE lambda of the value target; None: lambda_policy (PPO); 1.0: Monte-Carlo return (VAPO Decoupled-GAE)."""
    lambda_alpha: Optional[float] = None
    """VAPO length-adaptive GAE: lambda_policy = 1 - 1 / (alpha |y|) per response (VAPO: 0.05); None: off."""
    value_lr_scale: float = 1.0
    """AdamW learning rate of the value model (its LoRA adapter and head), as a multiple of lr."""
    value_pretrain_steps: int | float = 0
    """VAPO Value-Pretraining: rollouts of the base policy that fit the value model before RL starts; an int
    is rollouts, a float in (0, 1] a share of `steps` (see value_pretrain_len: a budget that shrinks with a
    smoke run's steps)."""
    value_clip: Optional[float] = None
    """range of the clipped value loss (PPO reference code: 0.2); None: plain squared error."""
    positive_lm_weight: float = 0.0
    """weight of VAPO's positive-example LM loss (NLL of the correct responses) added to the policy loss (VAPO
    Sec. 5.2 calls it mu, 0.1; not this config's `mu`)."""
    group_size: int = 8
    """G: responses sampled per prompt."""
    prompts_per_step: int = 16
    """prompts in one rollout batch (the batch holds prompts_per_step * group_size responses)."""
    steps: int = 100
    """RL steps (one rollout batch each)."""
    mu: int = 1
    """minibatch updates per rollout batch: the batch is split into mu disjoint minibatches, one optimiser step each
    (TRL's steps_per_generation with num_iterations = 1; not DeepSeekMath's mu, the number of passes over the whole
    batch, TRL's num_iterations). mu > 1 makes the later minibatches off-policy (pi_theta != pi_old)."""
    micro_batch_rows: int = 16
    """rows per forward/backward pass; gradients accumulate over micro-batches exactly, so memory is bounded by one
    and the result does not depend on it (not part of the run's identity, NOT_IDENTITY). Rows are sorted by
    length and each micro-batch is trimmed to its own longest row, so small micro-batches pad less: on the
    embedded regime's rollouts 16 rows feed the model 7-10% padding at mu = 1 and 25-30% at mu = 4, 64 rows
    30-38% and 51-64% (benchmarks/train_pass.py times both)."""
    lr: float = 3e-4
    """AdamW learning rate (LoRA parameters); chosen for GRPO on data/tasks/val.jsonl by benchmarks/lr_sweep.py
    (3e-4 vs 1e-3, docs/task-and-models.md) and shared by every preset."""
    warmup_steps: int = 5
    """linear learning-rate warm-up, in optimiser steps."""
    max_grad_norm: float = 1.0
    """gradient clipping by global norm."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    lora_r: int = 16
    """LoRA rank; 0 trains all weights (full fine-tuning)."""
    lora_alpha: int = 32
    """LoRA scaling alpha."""
    temperature: float = 1.0
    """sampling temperature of rollouts (log-probs are taken under the same temperature)."""
    rollout_threads: int = 0
    """CPU threads for sampling, n (ignored on GPU): 0 = the process's setting, N > 0 = N. With the decoder
    backend and n > 1 the way they are used is measured: a few decode steps of the batch timed with one
    thread, with n threads, and as n row shards of one thread each; the fastest is kept and re-measured
    every 50 rollouts (gpolib/engine/plan.py). Training passes keep the process's setting."""
    top_p: float = 1.0
    """nucleus sampling mass."""
    max_new_tokens: int = 192
    """generation budget L_max (tokens); responses that reach it are truncated. 192 leaves room for the long
    products RL learns to write (the base truncates 0.3% at 192, 2% at 160, 11% at 128)."""
    overlong: str = "none"
    """'none', 'shaping' (DAPO Eq. 13 soft overlong punishment), 'filter' (DAPO overlong filtering:
    truncated responses are masked out of the loss)."""
    overlong_cache: int | float = 16
    """L_cache of DAPO Eq. 13: the penalty ramps over the last L_cache tokens of the budget; an int is
    tokens, a float in (0, 1) a share of max_new_tokens (DAPO: 4096 of 20480 = 0.2), see overlong_cache_len."""
    dynamic_sampling: bool = False
    """DAPO Sec. 3.2: keep only groups with 0 < #correct < G and re-sample until the batch is full."""
    max_gen_batches: int = 3
    """upper bound on generation rounds per step under dynamic sampling."""
    gfpo_k: Optional[int] = None
    """GFPO: responses retained per group (k of G); None disables the filter."""
    gfpo_metric: str = "length"
    """GFPO ranking: 'length' (shortest first) or 'efficiency' (reward / length, highest first)."""
    gfpo_adaptive: bool = False
    """GFPO Alg. 2: choose k per prompt from the group's mean-reward quartile."""
    old_logps: str = "trainer"
    """source of pi_old: 'trainer' (recomputed) or 'engine' (sampling log-probs, GSPO Sec. 5.4)."""
    routing_replay: bool = False
    """MoE only (GSPO Sec. 5.3): replay the rollout's expert choices in the training forward passes."""
    train_router: bool = False
    """MoE only, with LoRA: also train each layer's router weight `mlp.gate.weight` (E, H) in full (peft
    `modules_to_save`; see models.lora_config); False keeps it frozen, so LoRA on the experts and attention
    changes the routing only through the router's inputs. Full fine-tuning (lora_r=0) trains it anyway."""
    rollout_autocast: Optional[str] = None
    """None, 'bfloat16' or 'float16': sample rollouts under torch.autocast in that dtype, a reduced-precision
    rollout engine whose log-probs (`old_logps='engine'`, GSPO Sec. 5.4) differ from the trainer's. The decoder
    backend then computes its matmuls and keeps its KV cache in that dtype (norms, softmax and the residual stream
    in float32, `gpolib.engine.decoder`); the 'hf' backend runs the transformers forward under the autocast."""
    rollout_weights: Optional[str] = None
    """None, 'int8' or 'w8a8': the decoder samples training rollouts with its projections quantized per output
    channel to int8 ('int8': weights only, W8A32; 'w8a8': their input activations too, per token;
    `gpolib.engine.quant`), an 8-bit rollout engine; the trainer and held-out evaluation use the float32 policy.
    backend='decoder' only, not with rollout_autocast."""
    backend: str = "decoder"
    """rollout engine: 'decoder' (gpolib/engine/decoder.py: the Qwen3 / Qwen3-MoE / Qwen2 layers re-written for
    decoding, preallocated KV cache, LoRA folded in, finished rows dropped; other architectures use 'hf'),
    'hf' (transformers forward + KV cache, finished rows dropped), 'hf_generate' (transformers generate), or
    'vllm' (optional extra, CUDA; the policy reaches it as a LoRA adapter each optimizer step, see
    gpolib/engine/vllm_backend.py)."""
    vllm_gpu_memory_utilization: float = 0.3
    """backend='vllm': share of GPU memory the engine may take (weights + KV cache); the trainer uses the rest."""
    vllm_sleep: bool = False
    """backend='vllm': the engine sleeps during each update (weights to CPU memory, KV cache freed) and wakes
    for the next rollout, trading wake-up time for the update's memory."""
    device: str = "cpu"
    """'cpu', 'cuda' or 'auto'."""
    dtype: str = "float32"
    """parameter/compute dtype of the policy."""
    gradient_checkpointing: Optional[bool] = None
    """recompute activations in the backward pass (memory for time); None: on when the device is CUDA
    (the gpu profile), off on CPU."""
    eval_every: int = 0
    """held-out evaluation every N steps (0: only at start and end)."""
    eval_prompts: int = 128
    """held-out prompts per evaluation."""
    eval_samples: int = 4
    """samples per held-out prompt at T = 1 (plus one greedy)."""
    eval_seed: int = 12345
    """torch seed of the held-out evaluation's sampling, the same for every arm and every training seed
    (common random numbers: arms compared on one seed differ by their policies, not by evaluation noise).
    The default equals the former `seed + 12345` at seed 0, so runs of seed 0 evaluate as before."""
    checkpoint_every: int = 10
    """checkpoint every N steps (LoRA adapter, optimiser, RNG, metrics)."""
    log_expert_change: bool = True
    """MoE policies: log `moe/expert_change` (GSPO Sec. 5.3) after each optimiser step, one no-grad routing pass
    each (about a quarter of an MoE step on 2 cores); not part of the run's identity (NOT_IDENTITY)."""
    expert_change: str = "minibatch"
    """which rows `moe/expert_change` routes after each optimiser step (`moe.ExpertChange`): 'full', every row of the
    rollout, by a routing pass after every step (1 + mu passes over the rollout per update); 'minibatch', the rows the
    next minibatch trains, recorded in its training forward (after the last step the first minibatch's, one pass over
    them): a subsample estimate of the same share at about 1 / mu of the rows, no extra pass but one over a
    minibatch. Logging only: not part of the run's identity (NOT_IDENTITY)."""
    adapter_steps: tuple = ()
    """also keep the LoRA adapter after these steps (ints), or these shares of `steps` (floats in (0, 1)), in
    adapter/step-<n>/ (e.g. a fixed-panel evaluation half-way); not part of the run's identity (NOT_IDENTITY)."""
    report_to: str = "none"
    """where each step's metrics also go: 'none' (metrics.jsonl only) or 'tensorboard' (scalars under
    <out_dir>/tensorboard/, gpolib/reporting.py); not part of the run's identity (NOT_IDENTITY)."""
    seed: int = 0
    """seed of prompts, sampling and initialisation."""

    def __post_init__(self) -> None:
        if not isinstance(self.loss, LossConfig):
            fail("loss", self.loss, "a LossConfig")
        if isinstance(self.adapter_steps, list):  # a JSON list reads back as the tuple it was
            object.__setattr__(self, "adapter_steps", tuple(self.adapter_steps))
        check_fields(self)
        check_relations(self)
        check_value_fields(self)

    # -- derived values and copies ------------------------------------------------
    @property
    def overlong_cache_len(self) -> int:
        """L_cache in tokens: `overlong_cache` itself, or its share of max_new_tokens (at least 1)."""
        if isinstance(self.overlong_cache, float):
            return max(1, round(self.overlong_cache * self.max_new_tokens))
        return self.overlong_cache

    @property
    def value_pretrain_len(self) -> int:
        """Value pre-training rollouts: `value_pretrain_steps` itself, or its share of `steps` (at least 1)."""
        if isinstance(self.value_pretrain_steps, float):
            return max(1, round(self.value_pretrain_steps * self.steps))
        return self.value_pretrain_steps

    def replace(self, **changes: Any) -> "TrainConfig":
        """A copy with fields changed; `loss_<field>` keys change the LossConfig, `loss_<parameter>` its surrogate
        (`loss_eps_high` of the clip, `loss_cap` of CISPO; see `LossConfig.replace`).

        Under Dr. GRPO's aggregation the normaliser `loss.max_len` is the generation budget: it follows
        `max_new_tokens` unless `loss_max_len` (or a whole `loss`) is given.
        """
        loss_changes = {k[5:]: changes.pop(k) for k in list(changes) if k.startswith("loss_")}
        aggregation = loss_changes.get("aggregation", self.loss.aggregation)
        if aggregation == "seq_mean_token_sum_norm" and "loss" not in changes and "max_len" not in loss_changes:
            loss_changes["max_len"] = changes.get("max_new_tokens", self.max_new_tokens)
        if loss_changes:
            changes["loss"] = replaced(self.loss, loss_changes, prefix="loss_")
        _known(changes, more=" or loss_<LossConfig field or surrogate parameter>")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """Every field, the LossConfig as `LossConfig.to_dict` (a run's config.json)."""
        return {**dataclasses.asdict(self), "loss": self.loss.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        d = dict(d)
        if isinstance(d.get("loss"), dict):
            d["loss"] = LossConfig.from_dict(d["loss"])
        _known(d)
        return cls(**d)

    def identity(self) -> dict:
        """The fields that differ from their defaults (LossConfig compared field by field, `LossConfig.identity`).

        Runs are identified by this, so a field added later with a default that keeps the old
        behaviour does not orphan runs recorded before it existed. The other side of that choice:
        changing a default does not invalidate runs cached under the old default; delete the run
        directory (or pass the old value explicitly) after changing one.
        """
        return _non_default({**self.to_dict(), "loss": self.loss.identity()})

    def fingerprint(self) -> str:
        """Hash of the non-default fields: the run-cache key."""
        blob = json.dumps(self.identity(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    @staticmethod
    def same_run(recorded: dict, current: "TrainConfig") -> list:
        """Fields where a recorded config dict (possibly older, with fewer fields) differs from `current`."""
        a, b = _non_default({**recorded, "loss": _recorded_loss(recorded.get("loss", {}))}), current.identity()
        return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def _known(changes: dict, more: str = "") -> None:
    """Raise naming the keys that are not TrainConfig fields, with the closest names."""
    known_fields(changes, [f.name for f in dataclasses.fields(TrainConfig)], "TrainConfig", more=more)


def _recorded_loss(loss: dict) -> dict:
    """A recorded loss config as its identity: `LossConfig.identity` of a stored one; one recorded before
    surrogates were objects (the surrogate a name) is already flat."""
    return LossConfig.from_dict(loss).identity() if isinstance(loss.get("surrogate"), dict) else loss


def _defaults() -> dict:
    out = {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.default is not dataclasses.MISSING}
    return {**out, "loss": LossConfig().identity()}


NOT_IDENTITY = ("report_to", "micro_batch_rows", "adapter_steps", "log_expert_change", "expert_change")
"""fields that change where a run's results are shown, how its update is chunked (memory, speed) or which adapters
it keeps or logs, not what it computes: left out of its identity"""


def _non_default(d: dict) -> dict:
    """The entries of a TrainConfig dict whose loss is flat (`LossConfig.identity`) that differ from the defaults."""
    base = _defaults()
    out = {k: v for k, v in d.items() if k != "loss" and k not in NOT_IDENTITY and v != base.get(k)}
    loss = {k: v for k, v in d.get("loss", {}).items() if v != base["loss"].get(k)}
    if loss:
        out["loss"] = loss
    return out


