"""Metric names of a training run, in one list, and the additive means the loop pools without knowing them.

Each name is computed in one place and written as it is: the objective (`policy_loss`: `ratio/*`, `pi_old/mean`,
`kl/mean`, `mismatch/*`, and the surrogate's own, `clip/*` for a clip, `capped/frac` for CISPO's cap, which its
module declares and `register` adds here), the update (`loss/policy`, `grad/norm`, `entropy/mean`), the
collection of a batch (`reward/*`, `acc/mean`, `len/*`, `groups/*`, `gen/*`), the MoE routing (`moe/*`, MoE
policies only), the step (`lr`, `time/*`)
and the held-out evaluation (`acc/sample`, `acc/greedy`). DESIGN.md's names are a subset.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional


@dataclass(frozen=True)
class Metric:
    """One metric of a step row or an evaluation."""

    label: str
    """axis label of the figures, with its unit"""
    update: bool = False
    """computed by the policy update; a step whose update is skipped (or that does not measure it, like
    `kl/mean` at beta = 0) records `missing` instead"""
    missing: Optional[float] = None
    """the value recorded when the update does not measure it"""


MOE_LAYER_NAMES = 128
"""the layers named `moe/expert_change/l{i}`: more than any Qwen3-MoE has (94 in Qwen3-235B-A22B)"""

METRICS: dict[str, Metric] = {
    "step": Metric("step"),
    # the fresh rollout batch of the step, before any filter
    "reward/mean": Metric("mean reward"), "reward/std": Metric("reward std"), "acc/mean": Metric("accuracy (fraction)"),
    "len/mean": Metric("length (tokens)"), "len/correct": Metric("correct length (tokens)"),
    "len/incorrect": Metric("incorrect length (tokens)"), "trunc/frac": Metric("truncated (fraction)"),
    "groups/all_correct": Metric("all-correct groups (fraction)"),
    "groups/all_wrong": Metric("all-wrong groups (fraction)"), "groups/zero_var": Metric("zero-variance groups (fraction)"),
    "entropy/sampled": Metric("-E[log p(sampled token)] (nats/token)"),
    # generation rounds (DAPO dynamic sampling) and what is trained
    "gen/batches": Metric("generation batches / step"), "gen/samples": Metric("generated responses / step"),
    "gen/tokens": Metric("generated tokens / step"), "groups/kept": Metric("groups trained / step"),
    "groups/zero_var_trained": Metric("zero-variance groups trained (fraction)"),
    "gfpo/len_kept": Metric("length of the kept responses (tokens)"),
    # the policy update (mean over the mu minibatches)
    "loss/policy": Metric("policy loss", update=True), "grad/norm": Metric("gradient norm", update=True),
    "entropy/mean": Metric("entropy (nats/token)", update=True),
    "pi_old/mean": Metric("mean pi_old of tokens", update=True), "ratio/mean": Metric("mean importance ratio", update=True),
    "ratio/log_std": Metric("std of log ratio", update=True, missing=0.0),
    "ratio/log_range": Metric("log-ratio range, tokens with gradient", update=True),
    "kl/mean": Metric("KL (nats/token)", update=True, missing=0.0),
    "update/skipped": Metric("update skipped (0/1)", update=True, missing=0),
    # the rollout/trainer mismatch (written when the correction is on or the engine is a reduced-precision one)
    "mismatch/kl": Metric("KL(engine || trainer) k3 (nats/token)"),
    "mismatch/max_log_ratio": Metric("max |log pi_old / pi_engine|"),
    "mismatch/clipped_share": Metric("mismatch weight above its cap: truncated or masked (fraction of tokens)"),
    # MoE policies only (`moe.expert_change`, GSPO Sec. 5.3): activated experts that change per optimiser step
    "moe/expert_change": Metric("activated experts changed per update (fraction, mean over layers)"),
    **{f"moe/expert_change/l{i}": Metric(f"activated experts changed per update, layer {i} (fraction)")
       for i in range(MOE_LAYER_NAMES)},
    # ... and how far the same step moved the likelihoods of those tokens (`moe.update_ratios`; pi_old by a pass)
    "moe/update_log_ratio_std": Metric("std of token log ratio after the update (rollout tokens)"),
    "moe/update_max_ratio": Metric("largest token ratio after the update (rollout tokens)"),
    "moe/update_kl": Metric("KL(pi_old || pi) after the update, k3 (nats/token)"),
    "moe/update_seq_log_ratio_std": Metric("std of sequence log ratio after the update (responses)"),
    # PPO / VAPO (advantage_estimator='gae'; gpolib.value_loop): V on the fresh batch before its update, ...
    "value/loss": Metric("value loss 0.5 (V - target)^2"), "value/explained_var": Metric("explained variance of V"),
    "value/mean": Metric("mean V (per token)"),
    # ... and the value update and VAPO's positive-example LM loss (written only when measured)
    "value/grad_norm": Metric("value gradient norm"), "loss/positive_lm": Metric("NLL of correct responses (nats/token)"),
    "time/value_s": Metric("value-model time (s)"),
    # the step
    "lr": Metric("learning rate"), "time/rollout_s": Metric("rollout time (s)"), "time/train_s": Metric("train time (s)"),
    "tokens_per_s": Metric("tokens / s"),
    # held-out evaluation (summary.json), with len/* and trunc/frac above
    "acc/sample": Metric("held-out accuracy at T (fraction)"), "acc/greedy": Metric("held-out greedy accuracy (fraction)"),
}
"""every metric name, with its label; the loop writes no other name (the surrogates' own join by `register`)"""
LOOP_UPDATE = {name: m for name, m in METRICS.items() if m.update}
"""the update metrics of every run, whatever its surrogate"""


def register(own: dict) -> None:
    """A surrogate's own metrics (`Surrogate.metrics`) join METRICS; a name already there must mean the same."""
    for name, m in own.items():
        if METRICS.setdefault(name, m) != m:
            raise ValueError(f"metric {name!r} is already registered as {METRICS[name]}")


def update_defaults(own: dict) -> dict:
    """What a step row holds for each update metric until the update measures it: the loop's and the surrogate's
    own (`own`), each at its `missing` value (a skipped update keeps them all; `kl/mean` at beta = 0, ...)."""
    return {name: m.missing for name, m in {**LOOP_UPDATE, **own}.items() if m.update}


def label(name: str) -> str:
    """Axis label of a metric (the name itself when it is not registered)."""
    return METRICS[name].label if name in METRICS else name


def mean_of(values: Iterable, empty=None):
    """Mean of the values that are not None or NaN; `empty` when none is left."""
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    return sum(vals) / len(vals) if vals else empty


@dataclass(frozen=True)
class Mean:
    """A mean kept as its two sums, so that the parts of a batch pool by `+`: value = total / weight."""

    total: float
    """sum of the values (over tokens, usually)"""
    weight: float
    """how many (or how much weight) they count for"""

    @classmethod
    def of(cls, values, mask) -> "Mean":
        """The mean of `values` over the positions where `mask` is 1 (tensors of one shape)."""
        return cls(float((values * mask).sum()), float(mask.sum()))

    def __add__(self, other: "Mean") -> "Mean":
        return type(self)(self.total + other.total, self.weight + other.weight)

    def __float__(self) -> float:
        value = self.value
        return math.nan if value is None else float(value)

    @property
    def value(self) -> Optional[float]:
        """total / weight; None when the weight is 0 (nothing was measured)."""
        return self.total / self.weight if self.weight > 0 else None


@dataclass(frozen=True)
class Max:
    """A maximum that pools by `+` like a `Mean` (the larger of the parts); None when nothing was measured."""

    value: Optional[float]
    """max over the masked positions"""

    @classmethod
    def of(cls, values, mask) -> "Max":
        """The max of `values` where `mask` is 1 (tensors of one shape); None when the mask is empty."""
        picked = values[mask.bool()]
        return cls(float(picked.max()) if picked.numel() else None)

    def __add__(self, other: "Max") -> "Max":
        vals = [v for v in (self.value, other.value) if v is not None]
        return type(self)(max(vals) if vals else None)


@dataclass(frozen=True)
class Range:
    """max - min over the masked positions, pooled by `+` (the union of the parts); None when nothing was measured."""

    low: Optional[float]
    high: Optional[float]

    @classmethod
    def of(cls, values, mask) -> "Range":
        """The range of `values` where `mask` is 1 (tensors of one shape)."""
        picked = values[mask.bool()]
        return cls(*(float(picked.min()), float(picked.max())) if picked.numel() else (None, None))

    def __add__(self, other: "Range") -> "Range":
        parts = [r for r in (self, other) if r.low is not None]
        return type(self)(min(r.low for r in parts), max(r.high for r in parts)) if parts else self

    @property
    def value(self) -> Optional[float]:
        return None if self.low is None else self.high - self.low


class Share(Mean):
    """A share of tokens that is 0 on every row whose advantage is 0 (e.g. clipped tokens: the clip needs
    A != 0), so rows the update skips for A = 0 count in its weight only; the share of no tokens is 0."""

    @property
    def value(self) -> float:
        return self.total / self.weight if self.weight > 0 else 0.0
