"""PPO / VAPO in the loop (advantage_estimator='gae'): `ValueBaseline`, the baseline with a value model.

The phases call it as any baseline (`baseline.py`):

  collect   advantages(...)      per-token advantages by (decoupled, length-adaptive) GAE on V_old
  train     pretrain(draw)       VAPO Value-Pretraining, before step 0
  update    update(batch, mbs)   one value step per policy minibatch
  state     state_dict / load_state_dict, the value model with the GFPO record

and `update` gains positive_lm_term (VAPO's positive-example LM loss) and skips by has_signal / active_rows.

Departures from the papers: the value model is a second LoRA adapter on the policy's base (gpolib.value);
it takes one AdamW step per policy minibatch (PPO updates both on the same minibatches); advantages are
not whitened (PPO's reference code does; the papers' objectives do not).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import torch

from .baseline import GroupBaseline
from .collect import Batch, Draw, step_seed
from .metrics import Mean
from . import value
from .value import ValueModel, advantages_and_gradients, positive_lm_loss, pretrain, token_advantages

VALUE_METRICS = ("value/loss", "value/explained_var", "value/mean")
"""gpolib.value's statistics of a fresh rollout (before the value update), as the step row names them"""


@dataclass
class ValueBatch(Batch):
    """A Batch whose advantages are per token (B, T), with what the value update needs."""

    value_targets: Optional[torch.Tensor] = None
    """(B, T) GAE(lambda_critic) returns: the regression targets of V"""
    old_values: Optional[torch.Tensor] = None
    """(B, T) V of the rollout before the update (GAE's baseline, the clipped value loss's anchor)"""
    value_grads: bool = False
    """the value update's gradients are already in the value parameters (`advantages_and_gradients`)"""


def make_baseline(cfg, model) -> GroupBaseline:
    """The run's baseline: a `ValueBaseline` for a 'gae' config, else the group's. Built after the policy, so
    that the policy's LoRA initialisation is the same as under GRPO for the same seed."""
    return ValueBaseline(cfg, model) if cfg.advantage_estimator == "gae" else GroupBaseline(cfg)


class ValueBaseline(GroupBaseline):
    """PPO / VAPO: advantages from a value model V (a second LoRA adapter and a head, lr = lr * value_lr_scale)."""

    def __init__(self, cfg, model):
        super().__init__(cfg)
        self.value = ValueModel(model, lr=cfg.lr * cfg.value_lr_scale, weight_decay=cfg.weight_decay,
                                max_grad_norm=cfg.max_grad_norm)

    def pretrain(self, draw: Draw) -> list:
        """VAPO Value-Pretraining: value_pretrain_len rollouts of the base policy, each fits V to its
        Monte-Carlo returns. Seeded apart from the RL steps (steps -1, -2, ...), so the RL samples are the
        same with or without it. Returns one metrics dict per pre-training step (with its generated samples)."""
        c = self.cfg

        def sample(i: int):
            step = -1 - i
            torch.manual_seed(step_seed(c.seed, step))
            ro, _, rewards = draw(step, 0)
            return ro, rewards

        log = pretrain(self.value, sample, c.value_pretrain_len, c.gamma, c.micro_batch_rows)
        return [{**row, "gen/samples": c.prompts_per_step * c.group_size} for row in log]

    def advantages(self, ro, correct, rewards, loss_mask, stats: dict) -> Batch:
        """The batch of a 'gae' step: per-token advantages (B, T) by (decoupled, length-adaptive) GAE on V_old."""
        if len(correct) == 0:
            return super().advantages(ro, correct, rewards, loss_mask, stats)
        c = self.cfg
        t0 = time.perf_counter()
        fused = value.FUSED_FIRST_PASS and c.mu == 1  # one minibatch of every row (`update.update`)
        args = (self.value, ro, rewards, c.gamma, c.lambda_policy, c.lambda_critic, c.lambda_alpha)
        adv, targets, old, vstats = (advantages_and_gradients(*args, c.value_clip, c.micro_batch_rows) if fused
                                     else token_advantages(*args, c.micro_batch_rows))
        stats.update({name: vstats[name] for name in VALUE_METRICS})
        stats["time/value_s"] = time.perf_counter() - t0
        return ValueBatch(ro, correct, rewards, adv, loss_mask, stats, value_targets=targets, old_values=old,
                          value_grads=fused)

    def update(self, batch: ValueBatch, minibatches: list) -> dict:
        """One value-model step per minibatch, on the batch's GAE(lambda_critic) targets; its metrics.

        time/value_s: the step's time on the value model (its V_old pass in `advantages`, with the gradients
        of a single minibatch, and these steps), a part of time/rollout_s and time/train_s."""
        c = self.cfg
        t0 = time.perf_counter()
        if batch.value_grads:  # the gradients of the one minibatch came with V_old (`advantages`)
            info = self.value.step()
        else:
            info = self.value.update(batch.rollout, batch.value_targets, batch.old_values, minibatches, c.value_clip,
                                     c.micro_batch_rows)
        elapsed = batch.stats.get("time/value_s", 0.0) + time.perf_counter() - t0
        return {"value/grad_norm": info.get("value/grad_norm"), "time/value_s": elapsed}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "value": self.value.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.value.load_state_dict(state["value"])


def has_signal(cfg, batch: Batch) -> bool:
    """Whether the policy update has anything to learn: a non-zero advantage, or a correct response to
    imitate when the positive-example LM loss is on (otherwise the update is skipped)."""
    if len(batch.correct) == 0:
        return False
    return bool((batch.advantages != 0).any()) or (cfg.positive_lm_weight > 0 and bool((batch.correct > 0).any()))


def active_rows(cfg, batch: Batch) -> torch.Tensor:
    """(B,) rows the policy update must run: any non-zero advantage (per response or per token), every row
    when beta > 0 (the KL term), and the correct rows when the positive-example LM loss is on."""
    B = len(batch.correct)
    if cfg.loss.beta > 0:
        return torch.ones(B, dtype=torch.bool)
    active = batch.advantages.reshape(B, -1).ne(0).any(dim=1)  # (B,)
    if cfg.positive_lm_weight > 0:
        active |= batch.correct > 0
    return active


def positive_tokens(batch: Batch, rows: torch.Tensor) -> float:
    """Tokens of the correct responses among `rows` (a minibatch): the normaliser of the positive LM loss."""
    return float((batch.loss_mask[rows] * (batch.correct[rows] > 0).unsqueeze(1)).sum())


def positive_lm_term(cfg, logps, mask, correct, n_positive: float) -> tuple:
    """w L_NLL of one micro-batch as its share of the minibatch's (VAPO Positive Example LM Loss, w =
    `positive_lm_weight`, VAPO's mu); (loss, info)."""
    if cfg.positive_lm_weight == 0 or n_positive == 0:
        return logps.new_zeros(()), {}
    loss, info = positive_lm_loss(logps, mask, correct, n_tokens=n_positive)
    # pooled over micro-batches by `+`: the token mean of the minibatch's correct responses' NLL
    nll = Mean(loss.item() * n_positive, info["positive_tokens"])
    return cfg.positive_lm_weight * loss, {"loss/positive_lm": nll}
