"""Phase 1 of a step: roll out G responses per prompt, score them, filter groups, compute advantages.

Rollout -> correctness reward (+ DAPO soft overlong punishment) -> DAPO dynamic sampling (re-sample
until the batch holds enough informative groups) -> DAPO overlong filter / GFPO top-k filter ->
advantages from the run's baseline (`baseline.py`: group-relative, GFPO's filter; or a value model) -> a
`Batch` for the update (phase 2, `update.py`). The phase reads the config, a `Draw` that samples and scores
one round of prompts, and the baseline; nothing else of the trainer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from .groups import informative_groups
from .metrics import mean_of
from .rewards import overlong_filter_mask
from .rollout import Rollout, concat

Draw = Callable[[int, int], tuple]
"""draw(step, round_) -> (rollout, correct (B,), shaped reward (B,)): one round of the step's prompts
(seeded by step and round), G responses each, scored (`Trainer.draw`)"""


@dataclass
class Batch:
    """A scored rollout ready for the update; rows are responses, consecutive groups of G."""

    rollout: Rollout
    correct: torch.Tensor  # (B,) 0/1 correctness
    rewards: torch.Tensor  # (B,) shaped reward
    advantages: torch.Tensor  # (B,), or (B, T) per token under advantage_estimator='gae'
    loss_mask: torch.Tensor  # (B, T)
    stats: dict
    """the step's collection metrics (names in gpolib.metrics)"""


def step_seed(seed: int, step: int) -> int:
    """Torch seed of a step's sampling: each step is reproducible on its own (resume from a checkpoint)."""
    return seed * 1_000_003 + step


class Advantages(Protocol):
    """What collect needs of a baseline (`baseline.GroupBaseline`, `value_loop.ValueBaseline`)."""

    def advantages(self, ro: Rollout, correct, rewards, loss_mask, stats: dict) -> Batch: ...


def collect(cfg, step: int, draw: Draw, pad_id: int, baseline: Advantages) -> Batch:
    """Seed the step, generate until the batch is full (dynamic sampling) or one round (otherwise), score, filter."""
    c, G = cfg, cfg.group_size
    torch.manual_seed(step_seed(c.seed, step))
    kept, n_groups, rounds, samples, tokens, stats = [], 0, 0, 0, 0, {}
    while True:
        ro, correct, rewards = draw(step, rounds)
        if rounds == 0:
            stats = response_stats(ro, correct, rewards, G)
        rounds, samples, tokens = rounds + 1, samples + len(ro.texts), tokens + int(ro.lengths.sum())
        rows = torch.ones(len(ro.texts), dtype=torch.bool)
        if c.dynamic_sampling:
            rows = informative_groups(rewards, G).repeat_interleave(G)
        kept.append((ro.select(rows), correct[rows], rewards[rows]))
        n_groups += int(rows.sum()) // G
        if not c.dynamic_sampling or n_groups >= c.prompts_per_step or rounds >= c.max_gen_batches:
            break
    ro = concat([k[0] for k in kept], pad_id)
    correct, rewards = torch.cat([k[1] for k in kept]), torch.cat([k[2] for k in kept])
    n = min(n_groups, c.prompts_per_step) * G
    ro, correct, rewards = ro.select(torch.arange(n)), correct[:n], rewards[:n]
    stats.update({"gen/batches": rounds, "gen/samples": samples, "gen/tokens": tokens, "groups/kept": n // G})
    batch = scored_batch(c, baseline, ro, correct, rewards, stats)
    trained = batch.rewards.view(-1, G) if len(batch.rewards) and c.gfpo_k is None else None  # (n_groups, G)
    stats["groups/zero_var_trained"] = float((trained.std(1) == 0).float().mean()) if trained is not None else 0.0
    return batch


def scored_batch(cfg, baseline: Advantages, ro: Rollout, correct, rewards, stats: dict) -> Batch:
    """The `Batch` of a scored rollout: its loss mask (DAPO's overlong filter, if configured), then the baseline's
    advantages (and GFPO's selection of rows, `baseline.GroupBaseline`)."""
    mask = ro.completion_mask.float()
    if cfg.overlong == "filter":
        mask = overlong_filter_mask(mask, ro.truncated)
    return baseline.advantages(ro, correct, rewards, mask, stats)


def length_stats(ro: Rollout, correct) -> dict:
    """Mean length overall / of correct / of incorrect responses (None when there are none), truncation share."""
    lengths = ro.lengths.float()
    return {"len/mean": float(lengths.mean()), "len/correct": mean_of(lengths[correct > 0].tolist()),
            "len/incorrect": mean_of(lengths[correct == 0].tolist()), "trunc/frac": float(ro.truncated.float().mean())}


def response_stats(ro: Rollout, correct, rewards, G: int) -> dict:
    """Per-step sampling statistics of a fresh rollout (before any filtering)."""
    per_group = correct.view(-1, G).sum(1)  # (n_groups,)
    mask = ro.completion_mask
    return {"reward/mean": float(rewards.mean()), "reward/std": float(rewards.std()), "acc/mean": float(correct.mean()),
            **length_stats(ro, correct),
            "groups/all_correct": float((per_group == G).float().mean()),
            "groups/all_wrong": float((per_group == 0).float().mean()),
            "groups/zero_var": float((rewards.view(-1, G).std(1) == 0).float().mean()),
            # -E[log p(sampled token)]: an unbiased estimate of the per-token entropy of the sampling policy
            "entropy/sampled": float(-(ro.sample_logps * mask).sum() / mask.sum().clamp(min=1))}
