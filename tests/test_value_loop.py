"""The value model's part of a PPO / VAPO step (gpolib.value_loop), on the embedded policy."""
import pytest
import torch

from gpolib.collect import Batch, step_seed
from gpolib.metrics import Mean
from gpolib.objectives import gae, terminal_rewards
from gpolib.train import Trainer
from gpolib.value import positive_lm_loss
from gpolib.value_loop import (active_rows, gae_batch, has_signal, make_value_model, positive_lm_term,
                               positive_tokens, pretrain_value, update_value)


def _gae_cfg(tiny_cfg, **kw):
    return tiny_cfg("grpo", advantage_estimator="gae", **kw).replace(name="ppo")


def _scored(tr, step=0):
    torch.manual_seed(step_seed(tr.cfg.seed, step))
    tasks = tr.sample_prompts(step, 0)
    ro = tr.rollout(tasks, tr.cfg.group_size)
    correct, rewards = tr.score(ro, tasks)
    return ro, correct, rewards


def test_gae_batch_has_token_advantages_and_monte_carlo_targets(tiny_cfg):
    tr = Trainer(_gae_cfg(tiny_cfg, lambda_critic=1.0))
    tr.value = make_value_model(tr)
    torch.nn.init.normal_(tr.value.head.weight, std=0.1)
    ro, correct, rewards = _scored(tr)
    mask = ro.completion_mask.float()
    b = gae_batch(tr, ro, correct, rewards, mask, {})
    assert b.advantages.shape == ro.completion_ids.shape
    torch.testing.assert_close(b.value_targets, rewards.unsqueeze(1) * mask)  # gamma = lambda_critic = 1
    ref, _ = gae(terminal_rewards(rewards, mask), b.old_values, mask, 1.0, 0.95)
    torch.testing.assert_close(b.advantages, ref)
    assert set(b.stats) >= {"value/loss", "value/explained_var", "value/mean", "time/value_s"}


def test_active_rows():
    adv = torch.tensor([[0.0, 0.0], [0.0, 0.5], [0.0, 0.0]])
    batch = Batch(None, torch.tensor([1, 0, 0]), torch.zeros(3), adv, torch.ones(3, 2), {})

    class Cfg:
        class loss:
            beta = 0.0
        positive_lm_weight = 0.0
    assert active_rows(Cfg, batch).tolist() == [False, True, False]
    Cfg.positive_lm_weight = 0.1
    assert active_rows(Cfg, batch).tolist() == [True, True, False]  # the correct row trains the LM term
    Cfg.loss.beta = 0.04
    assert active_rows(Cfg, batch).tolist() == [True, True, True]
    batch.advantages = torch.tensor([0.0, -1.0, 0.0])  # per-response advantages work the same
    Cfg.loss.beta, Cfg.positive_lm_weight = 0.0, 0.0
    assert active_rows(Cfg, batch).tolist() == [False, True, False]
    # the update is skipped without any advantage, unless a correct response feeds the LM term
    batch.advantages = torch.zeros(3)
    assert not has_signal(Cfg, batch)
    Cfg.positive_lm_weight = 0.1
    assert has_signal(Cfg, batch)
    batch.correct = torch.zeros(3)
    assert not has_signal(Cfg, batch)


def test_positive_lm_micro_batches_add_up_to_the_minibatch_loss():
    g = torch.Generator().manual_seed(0)
    logps = (-torch.rand(4, 5, generator=g)).requires_grad_()
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]]).float()
    correct = torch.tensor([1, 0, 1, 1])
    batch = Batch(None, correct, torch.zeros(4), torch.zeros(4), mask, {})
    n = positive_tokens(batch, torch.arange(4))
    assert n == 3 + 1 + 2

    class Cfg:
        positive_lm_weight = 0.1
    full, _ = positive_lm_loss(logps, mask, correct)
    parts = [positive_lm_term(Cfg, logps[r], mask[r], correct[r], n) for r in (slice(0, 2), slice(2, 4))]
    torch.testing.assert_close(parts[0][0] + parts[1][0], 0.1 * full)
    pooled = parts[0][1]["loss/positive_lm"] + parts[1][1]["loss/positive_lm"]
    assert isinstance(pooled, Mean) and pooled.value == pytest.approx(full.item())


def test_update_value_moves_the_value_model_only(tiny_cfg):
    tr = Trainer(_gae_cfg(tiny_cfg))
    tr.value = make_value_model(tr)
    policy = {n: p.detach().clone() for n, p in tr.model.named_parameters() if p.requires_grad}
    ro, correct, rewards = _scored(tr)
    b = gae_batch(tr, ro, correct, rewards, ro.completion_mask.float(), {})
    head = tr.value.head.weight.detach().clone()
    out = update_value(tr, b, [torch.arange(len(correct))])
    assert out["value/grad_norm"] > 0 and out["time/value_s"] > 0
    assert not torch.equal(head, tr.value.head.weight)
    named = dict(tr.model.named_parameters())
    assert all(torch.equal(w, named[n]) for n, w in policy.items())
    assert all(named[n].requires_grad for n in policy)  # the policy's adapter is trainable again


def test_pretraining_does_not_change_the_policy_or_its_samples(tiny_cfg):
    """Same seed with and without value pre-training: the same policy weights and the same step-0 rollout."""
    with_value = Trainer(_gae_cfg(tiny_cfg, value_pretrain_steps=2))
    with_value.value = make_value_model(with_value)
    log = pretrain_value(with_value)
    assert [row["step"] for row in log] == [0, 1] and all(row["gen/samples"] == 16 for row in log)
    assert all(row["value_loss"] >= 0 for row in log)
    plain = Trainer(tiny_cfg("grpo"))
    named = dict(with_value.model.named_parameters())
    assert all(torch.equal(p, named[n]) for n, p in plain.model.named_parameters() if p.requires_grad)
    ro_a, _, _ = _scored(with_value)
    ro_b, _, _ = _scored(plain)
    assert torch.equal(ro_a.completion_ids, ro_b.completion_ids)
