"""GAE: token-level advantages from a value model, for the PPO / VAPO baselines (beside `gpolib.value`, the model).

Schulman et al. 2016 Eq. 16 (PPO Eq. 11-12) on the token-level MDP of VAPO Sec. 2 (one terminal reward per
response), VAPO's Decoupled-GAE (Sec. 3) and Length-Adaptive GAE (Sec. 4.1). Shapes: B responses, T completion
positions, right-padded; `mask` is 1 on real completion tokens.
"""
from __future__ import annotations

import torch


def terminal_rewards(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Outcome reward placed on each response's last real token, 0 elsewhere: (B,) -> (B, T).

    The token-level MDP of VAPO Sec. 2: r_t = 0 for t < |y| - 1, r_{|y|-1} = score. Empty rows stay 0.
    """
    last = (mask.sum(dim=1).long() - 1).clamp(min=0)  # (B,)
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)  # (B, T)
    has_tokens = (mask.sum(dim=1) > 0).float()  # (B,)
    out.scatter_(1, last.unsqueeze(1), (scores.float() * has_tokens).unsqueeze(1))
    return out


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
        lam) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation, Schulman et al. 2016 Eq. 16 (PPO Eq. 11-12).

    rewards, values, mask: (B, T), right-padded; values[:, t] = V(s_t), the state before token t.
    The state after a response's last token is terminal: V = 0 there. lam: a float or a (B,) tensor
    (one lambda per response, VAPO's length-adaptive GAE). Returns (advantages, returns), both (B, T),
    zero on padding; returns = advantages + values is the regression target of the value model.
    """
    B, T = values.shape
    mask = mask.to(torch.float32)
    v = values.detach().float() * mask  # (B, T)
    lam = torch.as_tensor(lam, dtype=torch.float32, device=v.device).expand(B)  # (B,)
    adv = torch.zeros_like(v)  # (B, T)
    next_v = torch.zeros(B, device=v.device)  # V(s_{t+1}); 0 past the end of a response
    next_a = torch.zeros(B, device=v.device)  # A_{t+1}
    for t in reversed(range(T)):
        # delta_t = r_t + gamma V(s_{t+1}) - V(s_t)
        delta = rewards[:, t].float() + gamma * next_v - v[:, t]  # (B,)
        # A_t = delta_t + gamma lam A_{t+1} = sum_l (gamma lam)^l delta_{t+l}
        adv[:, t] = (delta + gamma * lam * next_a) * mask[:, t]
        next_v, next_a = v[:, t], adv[:, t]
    return adv, adv + v


def length_adaptive_lambda(lengths: torch.Tensor, alpha: float) -> torch.Tensor:
    """VAPO Sec. 4.1 (length-adaptive GAE): lambda_policy = 1 - 1 / (alpha |y|), one per response. (B,).

    The TD-error weights of GAE sum to 1 / (1 - lambda); setting that sum to alpha |y| keeps it
    proportional to the length. Departure: responses shorter than 1 / alpha tokens would get lambda < 0
    (the paper's responses are thousands of tokens long); we clamp to [0, 1] (lambda = 0: one-step TD).
    """
    lam = 1.0 - 1.0 / (alpha * lengths.float().clamp(min=1))  # (B,)
    return lam.clamp(0.0, 1.0)


def decoupled_gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
                  lam_policy, lam_critic: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """VAPO Sec. 3 (Decoupled-GAE, from VC-PPO): one lambda for the policy, another for the value target.

    Policy advantages A^{lam_policy} (B, T); value targets A^{lam_critic} + V (B, T). With
    lam_critic = 1 and gamma = 1 the target is the Monte-Carlo return: the final reward at every token.
    """
    adv, _ = gae(rewards, values, mask, gamma, lam_policy)
    _, target = gae(rewards, values, mask, gamma, lam_critic)
    return adv, target
