"""The GRPO-family objectives as pure tensor functions.

Three independent axes, composed by `policy_loss` from a `LossConfig`:
  1. the importance ratio: per token (GRPO, DAPO) or per sequence (GSPO);
  2. the surrogate: PPO's clip with decoupled ranges (DAPO Clip-Higher), CISPO's clipped IS weight or
     GMPO's geometric mean (`surrogate_terms`); optionally weighted by the rollout mismatch correction;
  3. the aggregation of token terms into one loss (GRPO, DAPO, Dr. GRPO).
Shapes: B responses, T completion positions; `mask` is 1 on real completion tokens. Each equation
sits in a comment right above the line that computes it; derivations live in the notebooks.
"""
from __future__ import annotations

import torch

from .config import LossConfig
from .geometric import geometric_ratio, ratio_space_range
from .is_weights import cispo_surrogate, mismatch_correction, mismatch_diagnostics
from .metrics import Mean, Range, Share
from .validation import ADV_SCALES, AGGREGATIONS, RATIO_LEVELS

ADV_EPS = 1e-4
"""added to the std in the advantage's denominator (DeepSeekMath Eq. 3 as implemented in practice)"""


# --- advantages --------------------------------------------------------------
def check_scale(scale: str) -> None:
    """Raise unless `scale` is an advantage normalisation: 'group' | 'batch' | 'none'."""
    if scale not in ADV_SCALES:
        raise ValueError(f"scale={scale!r} is invalid; allowed: {' | '.join(map(repr, ADV_SCALES))}")


def group_advantages(rewards: torch.Tensor, group_size: int, scale: str = "group") -> torch.Tensor:
    """Group-relative advantages, DeepSeekMath Eq. 3 (outcome supervision) / Dr. GRPO Sec. 3.2.

    scale='group' divides by the group's std (unbiased), 'batch' by the whole batch's, 'none' keeps
    r_i - mean (Dr. GRPO), 'rloo' subtracts the mean of the other G-1 rewards (= 'none' x G/(G-1)).
    rewards: (N,), consecutive blocks of `group_size` form one group. Returns (N,).
    """
    if rewards.dim() != 1 or rewards.numel() % group_size != 0:
        raise ValueError(f"rewards must be 1-D with a multiple of group_size={group_size} entries, "
                         f"got shape {tuple(rewards.shape)}")
    check_scale(scale)
    r = rewards.float().view(-1, group_size)  # (n_groups, G)
    # r_i - mean(r_group)
    centred = r - r.mean(dim=1, keepdim=True)  # (n_groups, G)
    if scale == "group":
        # A_i = (r_i - mean(r_group)) / (std(r_group) + eps)
        centred = centred / (r.std(dim=1, keepdim=True) + ADV_EPS)
    elif scale == "batch":
        # A_i = (r_i - mean(r_group)) / (std(r_batch) + eps)
        centred = centred / (r.std() + ADV_EPS)
    elif scale == "rloo":
        # A_i = r_i - (1 / (G-1)) sum_{j != i} r_j, the leave-one-out baseline (Ahmadian et al. 2024, RLOO)
        centred = r - (r.sum(dim=1, keepdim=True) - r) / (group_size - 1)
    return centred.reshape(-1)  # (N,)


# --- importance ratios -------------------------------------------------------
def token_log_ratio(logps: torch.Tensor, old_logps: torch.Tensor) -> torch.Tensor:
    """log r_{i,t}, GRPO Eq. 3 / DAPO Eq. 8. (B, T)."""
    # log r_{i,t} = log pi_theta(o_t) - log pi_old(o_t)
    return logps - old_logps


def sequence_log_ratio(logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log s_i, the GSPO sequence ratio, GSPO Eq. 7. Returns (B,)."""
    lengths = mask.sum(dim=1).clamp(min=1)  # (B,) |o_i|
    # log s_i = (1 / |o_i|) sum_t log r_{i,t}
    return (token_log_ratio(logps, old_logps) * mask).sum(dim=1) / lengths


def importance_ratio(logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """The ratio entering the clipped surrogate, per token (B, T), at level 'token' (GRPO), 'sequence'
    (GSPO Eq. 7, s_i broadcast to every token of response i) or 'sequence_token' (GSPO-token Eq. 13-14:
    numerically s_i, gradient that of log pi_theta(o_t) scaled by s_i)."""
    if level == "token":
        # r_{i,t} = pi_theta(o_t) / pi_old(o_t)
        return torch.exp(token_log_ratio(logps, old_logps))
    log_s = sequence_log_ratio(logps, old_logps, mask).unsqueeze(1)  # (B, 1)
    if level == "sequence":
        # s_i = exp(log s_i), the same for every token of response i
        return torch.exp(log_s).expand_as(logps)
    if level == "sequence_token":
        # s_{i,t} = sg[s_i] * pi_theta(o_t) / sg[pi_theta(o_t)]
        return torch.exp(logps - logps.detach() + log_s.detach())
    raise ValueError(f"level={level!r} is invalid; allowed: {' | '.join(map(repr, RATIO_LEVELS))}")


# --- clipping ----------------------------------------------------------------
def clipped_surrogate(ratio: torch.Tensor, advantages: torch.Tensor, eps_low: float, eps_high: float) -> torch.Tensor:
    """Per-token objective of DAPO Eq. 8 (PPO's clip with Clip-Higher's decoupled range), to be maximised.

    ratio: (B, T); advantages: (B,) or (B, T). Returns (B, T).
    """
    adv = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages  # (B, 1) or (B, T)
    # r A
    surr1 = ratio * adv
    # clip(r, 1 - eps_low, 1 + eps_high) A
    surr2 = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv
    # min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)
    return torch.minimum(surr1, surr2)


def clip_masks(ratio: torch.Tensor, advantages: torch.Tensor, eps_low: float, eps_high: float) -> tuple:
    """Where the clip is active: low (r < 1 - eps_low and A < 0), high (r > 1 + eps_high and A > 0). (B, T) each."""
    adv = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages  # (B, 1) or (B, T)
    return (ratio < 1.0 - eps_low) & (adv < 0), (ratio > 1.0 + eps_high) & (adv > 0)


# --- aggregation -------------------------------------------------------------
def aggregate(per_token: torch.Tensor, mask: torch.Tensor, mode: str, max_len: int | None = None) -> torch.Tensor:
    """Reduce (B, T) token terms l_{i,t} to a scalar: 'seq_mean_token_mean' (GRPO Eq. 3, sample-level),
    'token_mean' (DAPO Eq. 8, token-level) or 'seq_mean_token_sum_norm' (Dr. GRPO, constant normaliser)."""
    masked = per_token * mask  # (B, T)
    if mode == "seq_mean_token_mean":
        # (1/B) sum_i (1/|o_i|) sum_t l_{i,t}
        return (masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1)).mean()
    if mode == "token_mean":
        # sum_{i,t} l_{i,t} / sum_i |o_i|
        return masked.sum() / mask.sum().clamp(min=1)
    if mode == "seq_mean_token_sum_norm":
        if max_len is None:
            raise ValueError("max_len is required for aggregation='seq_mean_token_sum_norm'")
        # sum_{i,t} l_{i,t} / (B * max_len)
        return masked.sum() / (per_token.shape[0] * max_len)
    raise ValueError(f"mode={mode!r} is invalid; allowed: {' | '.join(map(repr, AGGREGATIONS))}")


def subset_scale(aggregation: str, rows: int, rows_total: int, tokens: int, tokens_total: int) -> float:
    """Factor that turns a loss aggregated over a subset of rows into its share of the full-batch loss.

    Rows whose advantage is 0 (and beta = 0) add nothing to the numerator of any aggregation, only to
    its denominator; computing the loss on the other rows and scaling by this factor gives the same
    value and gradient while skipping their forward and backward passes.
    """
    if aggregation == "token_mean":
        return tokens / max(tokens_total, 1)
    return rows / max(rows_total, 1)  # both sequence-mean forms divide by the number of rows


# --- KL ----------------------------------------------------------------------
def k3_kl(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """Unbiased, non-negative KL estimator D_KL[pi || pi_ref], DeepSeekMath Eq. 4 (Schulman's k3). (B, T)."""
    log_q_over_p = ref_logps - logps
    # k3 = pi_ref / pi - log(pi_ref / pi) - 1
    return torch.exp(log_q_over_p) - log_q_over_p - 1.0


def k1_kl(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """Naive estimator: unbiased but can be negative, high variance. (B, T)."""
    # k1 = log(pi / pi_ref)
    return logps - ref_logps


# --- the composed loss -------------------------------------------------------
def policy_loss(logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                cfg: LossConfig, ref_logps: torch.Tensor | None = None,
                engine_logps: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """Loss to minimise and its diagnostics; logps/old_logps/mask (B, T), advantages (B,).

    J = aggregate( w * f(r, A) - beta * k3 );  loss = -J, with f the surrogate (`surrogate_terms`; 'clip':
    min(r A, clip(r, 1-eps_low, 1+eps_high) A)) and w the detached mismatch weight (1 unless
    cfg.mismatch_correction is on; engine_logps (B, T) are then required; TRL 1.16 weights its per-token
    loss the same way, before the KL term). engine_logps given without a correction: `mismatch/*` measured only
    (clipped_share: the tokens TIS at the cap would truncate). `info` maps metric names to additive `Mean`s over the masked
    tokens (see `ratio_diagnostics`; with beta > 0 also `kl/mean`, with the correction `mismatch/*`).
    """
    mask = mask.to(logps.dtype)
    old_logps = old_logps.detach()
    # 1. r at the configured level: r_{i,t}, s_i or s_{i,t}
    ratio = importance_ratio(logps, old_logps, mask, cfg.ratio_level)  # (B, T)
    # 2. f(r, A), e.g. min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)
    per_token = surrogate_terms(logps, old_logps, ratio, advantages, mask, cfg)  # (B, T)
    info = ratio_diagnostics(ratio.detach(), logps.detach(), old_logps, advantages, mask, cfg)
    # 3. times w = sg(TIS / MIS weight of pi_old / pi_engine); measured wherever engine log-probs are given
    if cfg.mismatch_correction != "none":
        if engine_logps is None:
            raise ValueError(f"engine_logps are required when mismatch_correction={cfg.mismatch_correction!r}")
        weights, mismatch_info = mismatch_correction(old_logps, engine_logps.detach(), mask,
                                                     cfg.mismatch_correction, cfg.mismatch_cap)
        per_token = per_token * weights  # (B, T)
        info.update(mismatch_info)
    elif engine_logps is not None:
        info.update(mismatch_diagnostics(old_logps, engine_logps.detach(), mask, "token_truncate", cfg.mismatch_cap))
    # 4. minus beta * k3 to the reference
    if cfg.beta > 0:
        if ref_logps is None:
            raise ValueError("ref_logps are required when beta > 0")
        kl = k3_kl(logps, ref_logps.detach())  # (B, T)
        per_token = per_token - cfg.beta * kl
        info["kl/mean"] = Mean.of(kl.detach(), mask)
    # 5. loss = -J = -aggregate(per_token)
    loss = -aggregate(per_token, mask, cfg.aggregation, cfg.max_len)
    return loss, info


def surrogate_terms(logps: torch.Tensor, old_logps: torch.Tensor, ratio: torch.Tensor, advantages: torch.Tensor,
                    mask: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
    """Per-token objective f(r, A) of cfg.surrogate, to be maximised; (B, T).

    'clip': DAPO Eq. 8; 'cispo': sg(clip(r, 1-eps_low, 1+eps_high)) A log pi_theta (MiniMax-M1 Sec. 3.1);
    'gmpo': exp((1/|o_i|) sum_t clip_log(log r_t)) A_i on every token of response i (GMPO Sec. 3), so the
    sequence-mean aggregation gives GMPO's mean over responses.
    """
    if cfg.surrogate == "cispo":
        return cispo_surrogate(logps, ratio, advantages, cfg.eps_low, cfg.eps_high)
    if cfg.surrogate == "gmpo":
        seq = geometric_ratio(logps, old_logps, advantages, mask, cfg.eps_low, cfg.eps_high)  # (B,)
        return (seq * advantages).unsqueeze(1).expand_as(logps)
    return clipped_surrogate(ratio, advantages, cfg.eps_low, cfg.eps_high)


def ratio_diagnostics(ratio: torch.Tensor, logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor,
                      mask: torch.Tensor, cfg: LossConfig) -> dict:
    """Clip shares at the configured ratio level and the spread of the ratio, over the masked tokens.

    Under 'cispo' the shares are of tokens whose IS weight is clipped on the side that bounds the update
    (TRL's cispo_clip_ratio: r > 1 + eps_high and A > 0); under 'gmpo' of token ratios outside GMPO's range.

    clip/low, clip/high, clip/frac: shares of tokens clipped below, above, either (`Share`s);
    clip/high_pi_old: mean pi_old of the tokens clipped above (DAPO Sec. 3.1: mostly low-probability tokens);
    pi_old/mean, ratio/mean; ratio/log_std: std of log r_{i,t} (token level whatever the ratio level);
    ratio/log_range: max - min of log r_{i,t} over tokens with a gradient (A != 0, not clipped; GMPO's ratio range).
    """
    eps = ratio_space_range(cfg.eps_low, cfg.eps_high) if cfg.surrogate == "gmpo" else (cfg.eps_low, cfg.eps_high)
    low, high = clip_masks(ratio, advantages, *eps)  # (B, T) each
    p_old = torch.exp(old_logps)  # (B, T)
    log_r = token_log_ratio(logps, old_logps)  # (B, T)
    n = mask.sum().clamp(min=1)
    mean_lr = (log_r * mask).sum() / n
    log_std = float(torch.sqrt(((log_r - mean_lr) ** 2 * mask).sum() / n))
    adv = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages  # (B, 1) or (B, T)
    # (B, T): A != 0 and not clipped (CISPO's clipped IS weight keeps the gradient)
    with_grad = mask.bool() & (adv != 0) & (True if cfg.surrogate == "cispo" else ~(low | high))
    return {"clip/low": Share.of(low, mask), "clip/high": Share.of(high, mask),
            "clip/frac": Share.of(low | high, mask), "clip/high_pi_old": Mean.of(p_old, high * mask),
            "pi_old/mean": Mean.of(p_old, mask), "ratio/mean": Mean.of(ratio, mask),
            "ratio/log_std": Mean(log_std * float(mask.sum()), float(mask.sum())),
            "ratio/log_range": Range.of(log_r, with_grad)}


# --- GAE: token-level advantages from a value model (PPO / VAPO baselines) ---------
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
