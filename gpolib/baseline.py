"""Where a step's advantages come from: the strategy object the loop's phases call.

`GroupBaseline` serves the group estimators (GRPO, Dr. GRPO, DAPO, GSPO, GFPO, RLOO): advantages relative to
the group of G responses, GFPO's filter with the running record of group means its adaptive k reads, and no
model of its own. `value_loop.ValueBaseline` (PPO, VAPO) derives from it: GAE advantages from a value model
that it pre-trains, updates and checkpoints. The phases call the same five methods on either:

  collect   baseline.advantages(ro, correct, rewards, loss_mask, stats) -> Batch
  train     baseline.pretrain(draw) -> list             (VAPO Value-Pretraining; [] here)
  update    baseline.update(batch, minibatches) -> dict  (the value model's steps; {} here)
  state     baseline.state_dict() / load_state_dict(state)
"""
from __future__ import annotations

import torch

from .collect import Batch, Draw
from .groups import adaptive_k, gfpo_advantages, gfpo_keep
from .objectives import group_advantages
from .rollout import Rollout

GROUP_MEANS_KEPT = 2048
"""GFPO adaptive k: how many recent group mean rewards define the difficulty quartiles"""


class GroupBaseline:
    """Group-relative advantages (GRPO Eq. 3 and its variants by `cfg.adv_scale`), GFPO's filter when configured."""

    value = None
    """no value model"""

    def __init__(self, cfg):
        self.cfg = cfg
        self.group_means: list = []
        """the recent group mean rewards (at most GROUP_MEANS_KEPT), GFPO adaptive k's difficulty record"""

    def advantages(self, ro: Rollout, correct: torch.Tensor, rewards: torch.Tensor, loss_mask: torch.Tensor,
                   stats: dict) -> Batch:
        """The batch with per-response advantages (B,); under GFPO only the kept rows (GFPO Eq. 3)."""
        c, G = self.cfg, self.cfg.group_size
        if c.gfpo_k is None or len(correct) == 0:
            adv = group_advantages(rewards, G, c.adv_scale) if len(correct) else rewards
            return Batch(ro, correct, rewards, adv, loss_mask, stats)
        means = rewards.view(-1, G).mean(1)  # (n_groups,)
        self.group_means = (self.group_means + means.tolist())[-GROUP_MEANS_KEPT:]
        k = adaptive_k(means, c.gfpo_k, G, torch.tensor(self.group_means)) if c.gfpo_adaptive else c.gfpo_k
        keep = gfpo_keep(rewards, ro.lengths, G, k, c.gfpo_metric)
        adv = gfpo_advantages(rewards, keep, G, c.adv_scale)
        stats["gfpo/len_kept"] = float(ro.lengths[keep].float().mean())
        sub = ro.select(keep)
        return Batch(sub, correct[keep], rewards[keep], adv[keep], loss_mask[keep][:, : sub.completion_ids.shape[1]],
                     stats)

    def pretrain(self, draw: Draw) -> list:
        """Nothing to pre-train."""
        return []

    def update(self, batch: Batch, minibatches: list) -> dict:
        """Nothing to update beside the policy."""
        return {}

    def state_dict(self) -> dict:
        return {"group_means": list(self.group_means)}

    def load_state_dict(self, state: dict) -> None:
        self.group_means = list(state["group_means"])
