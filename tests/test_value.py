"""Value model: hand-computed losses, gradients, adapter isolation, fitting a fixed target, memory arithmetic."""
import pytest
import torch

from gpolib.models import EMBEDDED, load_policy
from gpolib.rollout import Rollout
from gpolib.gae import gae, length_adaptive_lambda
from gpolib.value import (ValueModel, cost_arithmetic, explained_variance, positive_lm_loss, pretrain,
                          token_advantages, value_loss, value_step)


# --- pure losses --------------------------------------------------------------------
def test_value_loss_hand_numbers():
    v, r, m = torch.tensor([[1.0, 2.0, 5.0]]), torch.zeros(1, 3), torch.tensor([[1, 1, 0]])
    loss, info = value_loss(v, r, m)
    assert loss.item() == pytest.approx(0.5 * (1 + 4) / 2)  # 1.25; the padded 5.0 is ignored
    assert info["value/loss"] == pytest.approx(1.25)


def test_clipped_value_loss_hand_numbers():
    """V = [1, 3], V_old = [0, 2.5], R = [2, 2], c = 0.2: V_clip = [0.2, 2.7]; max((V-R)^2, (V_clip-R)^2) = [3.24, 1]."""
    v, old, r, m = torch.tensor([[1.0, 3.0]]), torch.tensor([[0.0, 2.5]]), torch.tensor([[2.0, 2.0]]), torch.ones(1, 2)
    loss, info = value_loss(v, r, m, old, clip=0.2)
    assert loss.item() == pytest.approx(0.5 * (3.24 + 1.0) / 2)  # 1.06
    assert info["value/clip_frac"] == 0.5


def test_value_loss_gradient():
    """d/dV 0.5 mean (V - R)^2 = (V - R) m / n; where the clipped branch binds, the gradient is 0."""
    v = torch.tensor([[1.0, 3.0, 4.0]], requires_grad=True)
    r, m = torch.tensor([[2.0, 2.0, 0.0]]), torch.tensor([[1, 1, 0]])
    value_loss(v, r, m)[0].backward()
    torch.testing.assert_close(v.grad, torch.tensor([[-0.5, 0.5, 0.0]]))
    v.grad = None
    value_loss(v, r, m, torch.tensor([[0.0, 2.5, 0.0]]), clip=0.2)[0].backward()
    torch.testing.assert_close(v.grad, torch.tensor([[0.0, 0.5, 0.0]]))  # token 0: clipped branch, constant
    vd = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    rd, od = torch.randn(2, 4, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64)
    md = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda x: value_loss(x, rd, md, od, clip=0.3)[0], (vd,))


def test_explained_variance():
    r, m = torch.tensor([[0.0, 1.0, 2.0, 3.0]]), torch.ones(1, 4)
    assert explained_variance(r, r, m) == pytest.approx(1.0)
    assert explained_variance(torch.full((1, 4), 1.5), r, m) == pytest.approx(0.0)
    # R - V = [0, 0, 0, 1]: var 0.25; var R = 5/3 -> 1 - 0.15 = 0.85
    assert explained_variance(torch.tensor([[0.0, 1.0, 2.0, 2.0]]), r, m) == pytest.approx(0.85)
    assert explained_variance(r, torch.ones(1, 4), m) is None  # constant targets: undefined


def test_positive_lm_loss_hand_numbers_and_gradient():
    logps = torch.tensor([[-1.0, -2.0, -9.0], [-3.0, 0.0, 0.0], [-4.0, -4.0, -4.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    loss, info = positive_lm_loss(logps, mask, torch.tensor([1, 0, 1]))
    assert loss.item() == pytest.approx(15 / 5) and info["positive_tokens"] == 5  # -(-1-2-4-4-4)/5
    loss.backward()
    torch.testing.assert_close(logps.grad, -0.2 * torch.tensor([[1.0, 1, 0], [0, 0, 0], [1, 1, 1]]))
    none, _ = positive_lm_loss(logps, mask, torch.zeros(3))
    assert none.item() == 0.0 and none.requires_grad


# --- the model on the embedded policy ------------------------------------------------
@pytest.fixture
def policy():
    torch.manual_seed(0)
    model, _ = load_policy(EMBEDDED["dense"], lora_r=4, lora_alpha=8)
    return model


def _rollout(B=6, P=5, T=7, seed=0):
    """Random tokens, left-padded prompts and right-padded completions of different lengths."""
    g = torch.Generator().manual_seed(seed)
    p_len, c_len = torch.randint(2, P + 1, (B,), generator=g), torch.randint(1, T + 1, (B,), generator=g)
    c_len[0] = T
    p_mask = (torch.arange(P) >= P - p_len.unsqueeze(1)).long()  # (B, P)
    c_mask = (torch.arange(T) < c_len.unsqueeze(1)).long()  # (B, T)
    p_ids, c_ids = torch.randint(2, 99, (B, P), generator=g) * p_mask, torch.randint(2, 99, (B, T), generator=g) * c_mask
    return Rollout(p_ids, p_mask, c_ids, c_mask, torch.zeros(B, T), torch.zeros(B, dtype=torch.bool),
                   [""] * B, torch.arange(B))


def test_value_starts_at_zero_and_is_causal(policy):
    vm = ValueModel(policy, lr=1e-2)
    ro = _rollout()
    assert vm.predict(ro).abs().sum() == 0  # zero head
    torch.nn.init.normal_(vm.head.weight)
    v = vm.predict(ro)
    # V(s_t) is the state before token t: changing token 3 leaves V at t <= 3 unchanged and moves t = 4
    ro.completion_ids[0, 3] = (ro.completion_ids[0, 3] + 1) % 97 + 2
    v2 = vm.predict(ro)
    torch.testing.assert_close(v2[0, :4], v[0, :4])
    assert not torch.allclose(v2[0, 4:], v[0, 4:])
    assert (v2 * (1 - ro.completion_mask)).abs().sum() == 0  # 0 on padding
    # the same value whatever the batch's padding: row 1 alone equals row 1 in the batch
    alone = Rollout(*(x[1:2] for x in (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                                          ro.sample_logps, ro.truncated)), [""], torch.arange(1))
    n = int(ro.completion_mask[1].sum())
    torch.testing.assert_close(vm.predict(alone)[0, :n], v2[1, :n], atol=1e-5, rtol=1e-5)


def test_value_updates_leave_the_policy_alone(policy):
    ro = _rollout()
    ids = torch.cat([ro.prompt_ids, ro.completion_ids], 1)
    before = policy(input_ids=ids).logits.detach()
    flags = {n: p.requires_grad for n, p in policy.named_parameters()}
    policy_lora = {n: p.detach().clone() for n, p in policy.named_parameters() if p.requires_grad}
    vm = ValueModel(policy, lr=1e-2)
    lora_before = [p.detach().clone() for p in vm.lora]
    for _ in range(3):
        value_step(vm, ro, torch.ones(6), 1.0, 1.0, [torch.arange(6)])
    assert policy.active_adapter == "default"
    assert {n: p.requires_grad for n, p in policy.named_parameters() if ".value." not in n} == flags
    assert all(torch.equal(p, dict(policy.named_parameters())[n]) for n, p in policy_lora.items())
    torch.testing.assert_close(policy(input_ids=ids).logits, before)  # the policy's output did not move
    assert any(not torch.equal(a, b) for a, b in zip(lora_before, vm.lora))  # the value adapter did
    assert vm.head.weight.abs().sum() > 0


def test_value_model_fits_a_fixed_target(policy):
    """Monte-Carlo returns of fixed 0/1 scores: in 20 steps the loss falls > 10x and explained variance passes 0.8."""
    ro = _rollout(B=8, seed=1)
    scores = torch.tensor([1.0, 0, 1, 0, 0, 1, 1, 0])
    vm = ValueModel(policy, lr=3e-3)
    log = pretrain(vm, lambda i: (ro, scores), steps=20)
    assert log[0]["value/loss"] == pytest.approx(0.5 * float((scores.unsqueeze(1) ** 2 * ro.completion_mask).sum()
                                                        / ro.completion_mask.sum()))  # V = 0 at the start
    assert log[-1]["value/loss"] < 0.1 * log[0]["value/loss"]
    assert log[-1]["value/explained_var"] > 0.8


def test_token_advantages_vapo_and_ppo(policy):
    """VAPO: lambda_policy = 1 - 1/(0.05 |y|) per response, value target = the final reward at every token;
    PPO (lam_critic None): target = A^0.95 + V_old. Checked against gae() on the model's own V_old."""
    ro = _rollout(T=7)
    vm = ValueModel(policy, lr=1e-2)
    torch.nn.init.normal_(vm.head.weight, std=0.1)
    rewards = torch.tensor([1.0, 0, 1, 0, 0.5, 1])
    adv, target, old, stats = token_advantages(vm, ro, rewards, 1.0, 0.95, lam_critic=1.0, alpha=0.05)
    mask = ro.completion_mask
    torch.testing.assert_close(target, rewards.unsqueeze(1) * mask)  # Monte-Carlo return
    torch.testing.assert_close(old, vm.predict(ro))
    r_tok = torch.zeros(6, 7)
    r_tok[torch.arange(6), mask.sum(1) - 1] = rewards
    lam = 1 - 1 / (0.05 * mask.sum(1).float())  # lengths 1..7 -> negative: clamped to 0 (one-step TD)
    torch.testing.assert_close(length_adaptive_lambda(mask.sum(1), 0.05), lam.clamp(0, 1))
    torch.testing.assert_close(adv, gae(r_tok, old, mask, 1.0, lam.clamp(0, 1))[0])
    assert stats["value/loss"] == pytest.approx(value_loss(old, target, mask)[0].item())
    adv_p, target_p, _, _ = token_advantages(vm, ro, rewards, 1.0, 0.95)
    ref_adv, ref_ret = gae(r_tok, old, mask, 1.0, 0.95)
    torch.testing.assert_close(adv_p, ref_adv)
    torch.testing.assert_close(target_p, ref_ret)


def test_value_state_roundtrip(policy):
    ro = _rollout()
    vm = ValueModel(policy, lr=1e-2)
    value_step(vm, ro, torch.ones(6), 1.0, 1.0, [torch.arange(6)])
    state, v = vm.state_dict(), vm.predict(ro)
    value_step(vm, ro, torch.zeros(6), 1.0, 1.0, [torch.arange(6)])
    vm.load_state_dict(state)
    torch.testing.assert_close(vm.predict(ro), v)


def test_value_model_needs_lora():
    model, _ = load_policy(EMBEDDED["dense"], lora_r=0)
    with pytest.raises(ValueError, match="lora_r > 0"):
        ValueModel(model, lr=1e-3)


def test_cost_arithmetic_counts():
    """LoRA and base counts agree with the embedded model; at Qwen2.5-0.5B they are P = 494.0M, L = 8.80M."""
    from transformers import Qwen2Config
    model, _ = load_policy(EMBEDDED["dense"], lora_r=16, lora_alpha=32)
    c = cost_arithmetic(model.get_base_model().config, 16)
    assert c["L"] == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert c["P"] == sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)
    q = cost_arithmetic(Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                    num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                                    tie_word_embeddings=True), 16)
    # per layer r (in + out): q 16*1792 + k, v 16*1024 each + o 16*1792 + gate, up, down 16*5760 each = 366592
    assert q["L"] == 24 * 366592 and q["P"] == 494_032_768
    assert q["ratio_shared"] == pytest.approx(1.1247, abs=1e-4) and q["ratio_copy"] == pytest.approx(2.0, abs=1e-4)
