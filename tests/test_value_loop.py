"""The value model's part of a PPO / VAPO step (gpolib.value_loop), on the embedded policy."""
import pytest
import torch

from gpolib.collect import Batch, step_seed
from gpolib.metrics import Mean
from gpolib.gae import gae, terminal_rewards
from gpolib.train import Trainer
from gpolib.value import positive_lm_loss
from gpolib.value_loop import active_rows, has_signal, positive_lm_term, positive_tokens


def _gae_cfg(tiny_cfg, **kw):
    return tiny_cfg("grpo", advantage_estimator="gae", **kw).replace(name="ppo")


def _scored(tr, step=0):
    torch.manual_seed(step_seed(tr.cfg.seed, step))
    tasks = tr.sample_prompts(step, 0)
    ro = tr.rollout(tasks, tr.cfg.group_size)
    correct, rewards = tr.score(ro, tasks)
    return ro, correct, rewards


def test_value_baseline_has_token_advantages_and_monte_carlo_targets(tiny_cfg):
    tr = Trainer(_gae_cfg(tiny_cfg, lambda_critic=1.0))
    assert tr.value is not None and Trainer(tiny_cfg("grpo")).value is None  # built by the Trainer for 'gae' only
    torch.nn.init.normal_(tr.value.head.weight, std=0.1)
    ro, correct, rewards = _scored(tr)
    mask = ro.completion_mask.float()
    b = tr.baseline.advantages(ro, correct, rewards, mask, {})
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


def test_value_baseline_update_moves_the_value_model_only(tiny_cfg):
    tr = Trainer(_gae_cfg(tiny_cfg))
    policy = {n: p.detach().clone() for n, p in tr.model.named_parameters() if p.requires_grad}
    ro, correct, rewards = _scored(tr)
    b = tr.baseline.advantages(ro, correct, rewards, ro.completion_mask.float(), {})
    head = tr.value.head.weight.detach().clone()
    out = tr.baseline.update(b, [torch.arange(len(correct))])
    assert out["value/grad_norm"] > 0 and out["time/value_s"] > 0
    assert not torch.equal(head, tr.value.head.weight)
    named = dict(tr.model.named_parameters())
    assert all(torch.equal(w, named[n]) for n, w in policy.items())
    assert all(named[n].requires_grad for n in policy)  # the policy's adapter is trainable again


def test_pretraining_does_not_change_the_policy_or_its_samples(tiny_cfg):
    """Same seed with and without value pre-training: the same policy weights and the same step-0 rollout."""
    with_value = Trainer(_gae_cfg(tiny_cfg, value_pretrain_steps=2))
    log = with_value.baseline.pretrain(with_value.draw)
    assert [row["step"] for row in log] == [0, 1] and all(row["gen/samples"] == 16 for row in log)
    assert all(row["value/loss"] >= 0 for row in log)
    plain = Trainer(tiny_cfg("grpo"))
    named = dict(with_value.model.named_parameters())
    assert all(torch.equal(p, named[n]) for n, p in plain.model.named_parameters() if p.requires_grad)
    ro_a, _, _ = _scored(with_value)
    ro_b, _, _ = _scored(plain)
    assert torch.equal(ro_a.completion_ids, ro_b.completion_ids)


def _stable(row):
    return {k: v for k, v in row.items() if not k.startswith(("time/", "tokens_per_s"))}


@pytest.mark.parametrize("name", ["ppo", "vapo"])
def test_two_steps_move_policy_and_value_with_finite_metrics(name, tiny_cfg):
    import math
    from gpolib.train import train_step
    tr = Trainer(tiny_cfg(name))
    policy0 = {n: p.detach().clone() for n, p in tr.model.named_parameters() if p.requires_grad}
    value0 = [p.detach().clone() for p in tr.value.parameters()]
    pre = tr.baseline.pretrain(tr.draw)
    assert len(pre) == (2 if name == "vapo" else 0)
    rows = [train_step(tr, s) for s in range(2)]
    named = dict(tr.model.named_parameters())
    assert all(r["update/skipped"] == 0 for r in rows)
    assert any(not torch.equal(w, named[n]) for n, w in policy0.items())  # the policy's LoRA moved
    assert any(not torch.equal(w, p) for w, p in zip(value0, tr.value.parameters()))  # and the value model
    for r in rows:
        for k in ("value/loss", "value/mean", "value/grad_norm", "time/value_s", "loss/policy", "grad/norm"):
            assert math.isfinite(r[k]), (k, r[k])
        assert r["value/explained_var"] is None or math.isfinite(r["value/explained_var"])
        assert ("loss/positive_lm" in r) == (name == "vapo") and (name == "ppo" or math.isfinite(r["loss/positive_lm"]))


def test_resumed_trainer_continues_like_the_original(tiny_cfg):
    """The checkpoint state carries the value model: a fresh Trainer loaded from it gives the same next step."""
    import copy
    from gpolib.train import train_step
    first = Trainer(tiny_cfg("ppo"))
    train_step(first, 0)
    state = copy.deepcopy(first.state_dict())
    assert "value" in state
    again = Trainer(tiny_cfg("ppo"))
    again.load_state_dict(state)
    assert _stable(train_step(again, 1)) == _stable(train_step(first, 1))


def test_vapo_run_records_pretraining_and_saves_the_value_model(tiny_cfg, tmp_path):
    from gpolib.train import load_summary, train
    train(tiny_cfg("vapo", steps=1), tmp_path / "vapo", progress=False)
    summary = load_summary(tmp_path / "vapo")
    assert [row["step"] for row in summary["value_pretrain"]] == [0, 1]
    assert (tmp_path / "vapo" / "adapter" / "value_head.pt").exists()
    assert (tmp_path / "vapo" / "adapter" / "value" / "adapter_config.json").exists()


@pytest.mark.parametrize("name,extra", [("vapo", {}), ("ppo", {"value_clip": 0.2})])
def test_one_forward_for_v_old_and_the_value_gradients_changes_nothing(name, extra, tiny_cfg, monkeypatch):
    """mu = 1: V_old and the one value update's gradients from the same forward per micro-batch
    (`value.advantages_and_gradients`) give the run of a no-grad V_old pass followed by the update's own forward:
    pre-training and RL steps' metrics, policy and value weights (micro-batches of 4 rows: several per step)."""
    import copy
    from gpolib import value
    from gpolib.train import train_step

    def run(fused: bool):
        monkeypatch.setattr(value, "FUSED_FIRST_PASS", fused)
        tr = Trainer(tiny_cfg(name, micro_batch_rows=4, **extra))
        pre = tr.baseline.pretrain(tr.draw)
        rows = [_stable(train_step(tr, s)) for s in range(2)]
        return pre, rows, copy.deepcopy(tr.model.state_dict()), copy.deepcopy(tr.value.head.state_dict())

    fused, plain = run(True), run(False)
    assert fused[0] == plain[0] and fused[1] == plain[1]
    assert all(torch.equal(a, fused[2][k]) for k, a in plain[2].items())
    assert all(torch.equal(a, fused[3][k]) for k, a in plain[3].items())
    assert all(r["value/grad_norm"] > 0 for r in fused[1])


def test_a_skipped_update_leaves_no_value_gradients_behind(tiny_cfg):
    """The fused pass clears the value parameters' gradients first: a step whose update was skipped (its
    gradients computed with V_old, never applied) does not leak into the next."""
    from gpolib.value import advantages_and_gradients

    tr = Trainer(tiny_cfg("ppo"))
    ro, _, rewards = _scored(tr)
    advantages_and_gradients(tr.value, ro, rewards, 1.0, 0.95, micro_rows=4)
    first = [p.grad.clone() for p in tr.value.parameters()]
    advantages_and_gradients(tr.value, ro, rewards, 1.0, 0.95, micro_rows=4)  # the update before was skipped
    assert all(torch.equal(g, p.grad) for g, p in zip(first, tr.value.parameters()))
