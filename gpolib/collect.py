"""Phase 1 of a step: roll out G responses per prompt, score them, filter groups, compute advantages.

Rollout -> correctness reward (+ DAPO soft overlong punishment) -> DAPO dynamic sampling (re-sample
until the batch holds enough informative groups) -> DAPO overlong filter / GFPO top-k filter ->
group-relative advantages -> a `Batch` for the update (phase 2, `update.py`). `trainer` is the
`gpolib.train.Trainer` whose model, data and GFPO record are used (not imported here: no cycle).
"""
from __future__ import annotations

from dataclasses import dataclass
import torch

from .groups import adaptive_k, gfpo_advantages, gfpo_keep, informative_groups
from .metrics import mean_of
from .objectives import group_advantages
from .rewards import overlong_filter_mask
from .rollout import Rollout, concat

GROUP_MEANS_KEPT = 2048
"""GFPO adaptive k: how many recent group mean rewards define the difficulty quartiles"""


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


def collect(trainer, step: int) -> Batch:
    """Seed the step, generate until the batch is full (dynamic sampling) or one round (otherwise), score, filter."""
    c, G = trainer.cfg, trainer.cfg.group_size
    torch.manual_seed(step_seed(c.seed, step))
    kept, n_groups, rounds, samples, tokens, stats = [], 0, 0, 0, 0, {}
    while True:
        tasks = trainer.sample_prompts(step, rounds)
        ro = trainer.rollout(tasks, G)
        correct, rewards = trainer.score(ro, tasks)
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
    ro = concat([k[0] for k in kept], trainer.tok.pad_token_id)
    correct, rewards = torch.cat([k[1] for k in kept]), torch.cat([k[2] for k in kept])
    n = min(n_groups, c.prompts_per_step) * G
    ro, correct, rewards = ro.select(torch.arange(n)), correct[:n], rewards[:n]
    stats.update({"gen/batches": rounds, "gen/samples": samples, "gen/tokens": tokens, "groups/kept": n // G})
    batch = advantages(trainer, ro, correct, rewards, stats)
    trained = batch.rewards.view(-1, G) if len(batch.rewards) and c.gfpo_k is None else None  # (n_groups, G)
    stats["groups/zero_var_trained"] = float((trained.std(1) == 0).float().mean()) if trained is not None else 0.0
    return batch


def advantages(trainer, ro: Rollout, correct, rewards, stats: dict) -> Batch:
    """Overlong filter and GFPO filter (if configured), group-relative advantages; GFPO's filtered rows leave."""
    c, G = trainer.cfg, trainer.cfg.group_size
    mask = ro.completion_mask.float()
    if c.overlong == "filter":
        mask = overlong_filter_mask(mask, ro.truncated)
    if c.advantage_estimator == "gae" and len(correct):  # PPO / VAPO: per token, from the value model
        return trainer.gae_batch(ro, correct, rewards, mask, stats)
    if c.gfpo_k is None or len(correct) == 0:
        adv = group_advantages(rewards, G, c.adv_scale) if len(correct) else rewards
        return Batch(ro, correct, rewards, adv, mask, stats)
    means = rewards.view(-1, G).mean(1)
    trainer.group_means = (trainer.group_means + means.tolist())[-GROUP_MEANS_KEPT:]
    k = adaptive_k(means, c.gfpo_k, G, torch.tensor(trainer.group_means)) if c.gfpo_adaptive else c.gfpo_k
    keep = gfpo_keep(rewards, ro.lengths, G, k, c.gfpo_metric)
    adv = gfpo_advantages(rewards, keep, G, c.adv_scale)
    stats["gfpo/len_kept"] = float(ro.lengths[keep].float().mean())
    sub = ro.select(keep)
    return Batch(sub, correct[keep], rewards[keep], adv[keep], mask[keep][:, : sub.completion_ids.shape[1]], stats)


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
