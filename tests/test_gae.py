"""GAE (Schulman et al. 2016 Eq. 16) and VAPO's decoupled, length-adaptive variant, against a plain loop."""
import pytest
import torch

from gpolib.gae import decoupled_gae, gae, length_adaptive_lambda, terminal_rewards


def loop_gae(rewards, values, lengths, gamma, lams):
    """Reference: per response, a Python loop over its own tokens only (no padding, no tensors)."""
    advs, rets = [], []
    for r, v, n, lam in zip(rewards, values, lengths, lams):
        a, out = 0.0, [0.0] * len(r)
        for t in reversed(range(n)):
            v_next = v[t + 1] if t + 1 < n else 0.0
            delta = r[t] + gamma * v_next - v[t]
            a = delta + gamma * lam * a
            out[t] = a
        advs.append(out)
        rets.append([out[t] + (v[t] if t < n else 0.0) for t in range(len(r))])
    return torch.tensor(advs), torch.tensor(rets)


# two responses of lengths 4 and 2 (padded to 4), terminal rewards 1 and 0, hand-made values
REWARDS = [[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]]
VALUES = [[0.5, 0.6, 0.7, 0.8], [0.3, 0.1, 9.0, 9.0]]  # 9.0 on padding must not leak in
LENGTHS = [4, 2]
MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])


@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (1.0, 0.95), (0.9, 0.8), (0.99, 0.0)])
def test_gae_matches_python_loop(gamma, lam):
    adv, ret = gae(torch.tensor(REWARDS), torch.tensor(VALUES), MASK, gamma, lam)
    ref_adv, ref_ret = loop_gae(REWARDS, VALUES, LENGTHS, gamma, [lam, lam])
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(ret, ref_ret)
    assert adv[1, 2:].abs().sum() == 0 and ret[1, 2:].abs().sum() == 0  # zero on padding


def test_gae_hand_numbers():
    """Row 0, gamma = 0.9, lam = 0.8, by hand: deltas then A_t = delta_t + 0.72 A_{t+1}."""
    adv, ret = gae(torch.tensor(REWARDS), torch.tensor(VALUES), MASK, 0.9, 0.8)
    d3 = 1.0 + 0.0 - 0.8            # 0.2
    d2 = 0.0 + 0.9 * 0.8 - 0.7      # 0.02
    d1 = 0.0 + 0.9 * 0.7 - 0.6      # 0.03
    d0 = 0.0 + 0.9 * 0.6 - 0.5      # 0.04
    a3, a2 = d3, d2 + 0.72 * d3     # 0.2, 0.164
    a1 = d1 + 0.72 * a2             # 0.14808
    a0 = d0 + 0.72 * a1             # 0.1466176
    torch.testing.assert_close(adv[0], torch.tensor([a0, a1, a2, a3]))
    torch.testing.assert_close(ret[0], torch.tensor([a0 + 0.5, a1 + 0.6, a2 + 0.7, a3 + 0.8]))
    # row 1 (reward 0, length 2): d1 = 0 - 0.1, d0 = 0.9 * 0.1 - 0.3; A0 = d0 + 0.72 d1
    torch.testing.assert_close(adv[1], torch.tensor([0.09 - 0.3 - 0.072, -0.1, 0.0, 0.0]))


def test_gamma_lambda_one_is_monte_carlo():
    """gamma = lam = 1: the deltas telescope, A_t = R - V_t and the return is R at every token."""
    adv, ret = gae(torch.tensor(REWARDS), torch.tensor(VALUES), MASK, 1.0, 1.0)
    torch.testing.assert_close(ret, torch.tensor([[1.0] * 4, [0.0, 0.0, 0.0, 0.0]]))
    torch.testing.assert_close(adv[0], 1.0 - torch.tensor(VALUES[0]))


def test_lambda_zero_is_one_step_td():
    adv, _ = gae(torch.tensor(REWARDS), torch.tensor(VALUES), MASK, 1.0, 0.0)
    torch.testing.assert_close(adv[0], torch.tensor([0.6 - 0.5, 0.7 - 0.6, 0.8 - 0.7, 1.0 - 0.8]))


def test_per_sequence_lambda_matches_loop():
    lams = torch.tensor([0.5, 0.9])
    adv, ret = gae(torch.tensor(REWARDS), torch.tensor(VALUES), MASK, 1.0, lams)
    ref_adv, ref_ret = loop_gae(REWARDS, VALUES, LENGTHS, 1.0, lams.tolist())
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(ret, ref_ret)


def test_random_batch_matches_loop():
    g = torch.Generator().manual_seed(0)
    B, T = 6, 11
    lengths = [11, 1, 5, 7, 3, 10]
    mask = torch.tensor([[1] * n + [0] * (T - n) for n in lengths])
    values = torch.randn(B, T, generator=g)
    rewards = terminal_rewards(torch.randn(B, generator=g), mask)
    lams = torch.rand(B, generator=g)
    adv, ret = gae(rewards, values, mask, 0.97, lams)
    ref_adv, ref_ret = loop_gae(rewards.tolist(), values.tolist(), lengths, 0.97, lams.tolist())
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(ret, ref_ret)


def test_terminal_reward_on_last_token():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    r = terminal_rewards(torch.tensor([1.0, -0.5, 3.0]), mask)
    assert r.tolist() == [[0, 0, 1, 0], [-0.5, 0, 0, 0], [0, 0, 0, 0]]  # empty row: no reward


def test_length_adaptive_lambda_vapo():
    """lambda = 1 - 1 / (alpha l), alpha = 0.05: l = 40 -> 0.5, 100 -> 0.8, 1000 -> 0.98; l < 20 clamps to 0."""
    lam = length_adaptive_lambda(torch.tensor([40, 100, 1000, 20, 10]), 0.05)
    torch.testing.assert_close(lam, torch.tensor([0.5, 0.8, 0.98, 0.0, 0.0]))
    # the TD-error weights sum to 1 / (1 - lambda) = alpha l: proportional to the length
    torch.testing.assert_close(1 / (1 - lam[:3]), 0.05 * torch.tensor([40.0, 100.0, 1000.0]))


def test_decoupled_gae_critic_target_is_return_policy_uses_own_lambda():
    rewards, values = torch.tensor(REWARDS), torch.tensor(VALUES)
    lam_p = length_adaptive_lambda(MASK.sum(1), 0.05)  # lengths 4, 2 -> both clamp to 0 here
    adv, target = decoupled_gae(rewards, values, MASK, 1.0, lam_p, lam_critic=1.0)
    torch.testing.assert_close(target, torch.tensor([[1.0] * 4, [0.0] * 4]))  # Monte-Carlo return
    ref_adv, _ = loop_gae(REWARDS, VALUES, LENGTHS, 1.0, lam_p.tolist())
    torch.testing.assert_close(adv, ref_adv)


def test_gae_has_no_gradient_path_to_values():
    values = torch.tensor(VALUES, requires_grad=True)
    adv, ret = gae(torch.tensor(REWARDS), values, MASK, 1.0, 0.95)
    assert not adv.requires_grad and not ret.requires_grad
