"""Notebook 04, GSPO (Zheng et al., 2025): its identities (Eq. 7, 13-14) and the clip share of Sec. 5.2.

- the sequence ratio s_i as a geometric mean of token ratios, `seq_ratio_err`;
- GSPO-token equals GSPO in value and gradient under per-sequence advantages, `token_equivalence`;
- GSPO equals GRPO when every response has one token, `one_token_err`;
- the two arms of Sec. 5.2, `ARMS`; per-run clip share and final reward, `clip_share`, `final_mean`, `run_table`;
- Sec. 5.4 (P5), engine vs trainer log-probs: `token_mismatch`, `sequence_mismatch`, `mismatch_stats`;
- Sec. 5.3 (P3), routing volatility: `expert_set_change`, `routing_change_after_step`, and the token log-ratio
  spread at a matched update size, `update_at_kl` (exact KL(pi_old || pi_new), `old_new_kl`); a rollout as
  full sequences and masks for both, `rollout_sequences`;
- P1, P2: `verdict_p1`, `verdict_p2`; P2 on per-seed evidence, `p2_evidence`: clip ratio in every seed and
  non-inferior held-out accuracy (`stats`). P3-P5 are measured and judged in notebook 08 (`gspo_moe.py`), which
  uses the Sec. 5.3-5.4 helpers above.
Derivations live in notebook 04; docstrings name the formula they compute.
"""
from __future__ import annotations

import dataclasses

import pandas as pd
import torch

from ..config import LossConfig
from ..logprobs import position_ids
from ..moe import is_moe, record_routing
from ..objectives import policy_loss, sequence_log_ratio
from . import stats
from .runs import mean_over, run_key, window
from .verdicts import NOT, REPRODUCED, EXACT_TOL, Exact

ARMS = {"gspo": {"preset": "gspo"},
        "grpo": {"preset": "grpo", "mu": 4, "loss_eps_high": 0.28}}
"""GSPO Sec. 5.2: GSPO (3e-4 / 4e-4) against GRPO with Clip-Higher (0.2 / 0.28), both with 4 minibatches"""
P2_CLIP = stats.AtLeast("clip share GSPO / GRPO", at_least=10, every=True, fmt=".1f")
P2_ACC = stats.NotWorse("held-out accuracy (T = 1), GSPO - GRPO")
P2_RULE = stats.AllOf(parts=(P2_CLIP, P2_ACC))
"""P2: GSPO clips >= 10x more tokens than GRPO in every seed, and its held-out accuracy is not worse"""
RULES = {"P2": P2_RULE}
"""claim id -> the rule that judges it and writes its criterion"""


# ---------------------------------------------------------------- random inputs

def random_batch(B: int = 6, T: int = 12, scale: float = 0.05, seed: int = 0) -> dict:
    """float64 logps (B, T), old_logps (B, T), mask (B, T) with lengths 1..T, advantages (B,).

    log pi_theta - log pi_old ~ N(0, scale^2) per token, so some sequence ratios leave a small clip range.
    """
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3 - 0.01  # (B, T) log-probs < 0
    logps = old + scale * torch.randn(B, T, generator=g, dtype=torch.float64)  # (B, T)
    lengths = torch.randint(1, T + 1, (B,), generator=g)  # (B,)
    lengths[0] = T  # at least one full-length response
    mask = (torch.arange(T) < lengths[:, None]).double()  # (B, T)
    adv = torch.randn(B, generator=g, dtype=torch.float64)  # (B,)
    return {"logps": logps, "old_logps": old, "mask": mask, "advantages": adv}


# ---------------------------------------------------------------- Eq. 7: the sequence ratio

def sequence_ratio_direct(logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """s_i = (prod_t pi_theta(y_t) / pi_old(y_t))^(1/|y_i|) as a literal product of probability ratios. (B,)."""
    ratio = torch.exp(logps) / torch.exp(old_logps)  # (B, T)
    ratio = torch.where(mask > 0, ratio, torch.ones_like(ratio))  # padding contributes a factor 1
    return ratio.prod(dim=1) ** (1.0 / mask.sum(dim=1))


def seq_ratio_err(logps: torch.Tensor, old_logps: torch.Tensor, mask: torch.Tensor) -> float:
    """max_i |exp(mean_t log rho_{i,t}) - direct product^(1/|y_i|)|, GSPO Eq. 7."""
    s_lib = torch.exp(sequence_log_ratio(logps, old_logps, mask))  # (B,)
    return float((s_lib - sequence_ratio_direct(logps, old_logps, mask)).abs().max())


# ---------------------------------------------------------------- Eq. 13-14: GSPO-token

def loss_and_grad(batch: dict, cfg: LossConfig) -> tuple[float, torch.Tensor]:
    """(loss, d loss / d logps) of `policy_loss` on a batch from `random_batch`."""
    logps = batch["logps"].clone().requires_grad_(True)  # (B, T)
    loss, _ = policy_loss(logps, batch["old_logps"], batch["advantages"], batch["mask"], cfg)
    loss.backward()
    return float(loss.detach()), logps.grad * batch["mask"]  # (B, T)


def loss_diff(batch: dict, cfg_a: LossConfig, cfg_b: LossConfig) -> tuple[float, float]:
    """(|loss_a - loss_b|, max |grad_a - grad_b|) on the same batch."""
    la, ga = loss_and_grad(batch, cfg_a)
    lb, gb = loss_and_grad(batch, cfg_b)
    return abs(la - lb), float((ga - gb).abs().max())


def token_equivalence(batch: dict, cfg: LossConfig) -> tuple[float, float]:
    """GSPO-token (Eq. 13-14, s_{i,t} = sg[s_i] pi_theta(y_t)/sg[pi_theta(y_t)]) vs GSPO (Eq. 5-7).

    With A_{i,t} = A_i both have the same value and gradient; returns (value error, gradient error).
    `cfg` fixes clip ranges and aggregation; only `ratio_level` is switched.
    """
    seq = dataclasses.replace(cfg, ratio_level="sequence")
    return loss_diff(batch, seq, dataclasses.replace(cfg, ratio_level="sequence_token"))


def one_token_err(batch: dict, cfg: LossConfig) -> tuple[float, float]:
    """GSPO vs GRPO on one-token responses: s_i = rho_{i,1}, so value and gradient agree. (value, grad) errors.

    Uses the first column of the batch as the only token of every response.
    """
    one = {k: (v[:, :1] if v.dim() == 2 else v) for k, v in batch.items()}
    one["mask"] = torch.ones_like(one["mask"])  # (B, 1)
    seq = dataclasses.replace(cfg, ratio_level="sequence")
    return loss_diff(one, seq, dataclasses.replace(cfg, ratio_level="token"))


def clipped_rows(batch: dict, cfg: LossConfig) -> int:
    """Responses whose sequence ratio lies outside [1 - eps_low, 1 + eps_high] of the config's clip (where it may act),
    Eq. 5."""
    clip = cfg.surrogate
    s = torch.exp(sequence_log_ratio(batch["logps"], batch["old_logps"], batch["mask"]))  # (B,)
    return int(((s < 1 - clip.eps_low) | (s > 1 + clip.eps_high)).sum())


# ---------------------------------------------------------------- Sec. 5.2: training summaries

def clip_share(metrics: list, key: str = "clip/frac") -> float:
    """Mean of `key` over all steps (share of tokens clipped, averaged over the run); nan if none."""
    return mean_over(metrics, key)


def final_mean(metrics: list, key: str = "reward/mean", frac: float = 0.2) -> float:
    """Mean of `key` over the last max(1, round(frac * n_steps)) steps; nan if none."""
    return mean_over(window(metrics, frac, "last"), key)


def run_table(metrics_by_run: dict, frac: float = 0.2) -> pd.DataFrame:
    """One row per run: mean clip share (all, low, high) over all steps, final reward and accuracy."""
    rows = {run: {"clip/frac": clip_share(m), "clip/low": clip_share(m, "clip/low"),
                  "clip/high": clip_share(m, "clip/high"), "reward (last 20%)": final_mean(m, "reward/mean", frac),
                  "acc (last 20%)": final_mean(m, "acc/mean", frac)}
            for run, m in metrics_by_run.items()}
    return pd.DataFrame.from_dict(rows, orient="index")


# ---------------------------------------------------------------- Sec. 5.4: engine vs trainer likelihoods

def token_mismatch(engine_logps: torch.Tensor, trainer_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """|log pi_engine(y_t) - log pi_trainer(y_t)| of every masked token, flattened. (n_tokens,)."""
    return (engine_logps - trainer_logps).abs()[mask > 0]


def sequence_mismatch(engine_logps: torch.Tensor, trainer_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """|log s_i| with s_i = exp(mean_t log pi_trainer/pi_engine): the sequence ratio GSPO sees (Eq. 7). (B,)."""
    return sequence_log_ratio(trainer_logps, engine_logps, mask).abs()


def mismatch_stats(engine_logps: torch.Tensor, trainer_logps: torch.Tensor, mask: torch.Tensor) -> dict:
    """Means and 99th percentiles of the token-level and sequence-level mismatch (P5's two distributions)."""
    tok, seq = token_mismatch(engine_logps, trainer_logps, mask), sequence_mismatch(engine_logps, trainer_logps, mask)
    q = lambda x: float(torch.quantile(x.double(), 0.99)) if len(x) else float("nan")
    return {"token_mismatch": float(tok.mean()), "seq_mismatch": float(seq.mean()),
            "token_mismatch_p99": q(tok), "seq_mismatch_p99": q(seq)}


# ---------------------------------------------------------------- Sec. 5.3: routing volatility (P3)

def expert_set_change(before: torch.Tensor, after: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Share of masked (token, layer) pairs whose top-k expert *set* differs, per layer.

    before/after (L, B, T, k) expert ids (`expert_ids`), mask (B, T) -> (L,) in [0, 1].
    """
    changed = (before.sort(dim=-1).values != after.sort(dim=-1).values).any(dim=-1)  # (L, B, T)
    m = mask.bool().unsqueeze(0)  # (1, B, T)
    return (changed & m).sum(dim=(1, 2)).float() / m.sum().clamp(min=1)


def rollout_sequences(ro) -> tuple:
    """A Rollout as full sequences: ids and attention (B, P+T), its completion positions (B, P+T) for
    `expert_set_change`, and the positions that predict a completion token (B, P+T-1) for `update_at_kl`."""
    ids = torch.cat([ro.prompt_ids, ro.completion_ids], dim=1)  # (B, P+T)
    attn = torch.cat([ro.prompt_mask, ro.completion_mask], dim=1)  # (B, P+T)
    comp = torch.cat([torch.zeros_like(ro.prompt_mask), ro.completion_mask], dim=1)  # (B, P+T)
    return ids, attn, comp, comp[:, 1:].double()


@torch.no_grad()
def expert_ids(model, ids: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    """Top-k experts of every (layer, row, position) in the trainer's forward (positions skip left padding)."""
    picked: list = []
    model.eval()
    with record_routing(model, picked):
        model(input_ids=ids, attention_mask=attn, position_ids=position_ids(attn), use_cache=False)
    return torch.stack([p.reshape(*ids.shape, -1) for p in picked]).long()  # (L, B, T, k)


def routing_change_after_step(model, ids: torch.Tensor, attn: torch.Tensor, mask: torch.Tensor,
                              step_fn) -> torch.Tensor:
    """Top-k expert sets of `ids` (B, T) before and after `step_fn()` (one optimiser step, e.g.
    `lambda: trainer.update(batch, 0)` with mu=1); their change per layer over `mask` (B, T). (L,)."""
    before = expert_ids(model, ids, attn)  # (L, B, T, k)
    step_fn()
    return expert_set_change(before, expert_ids(model, ids, attn), mask)


@torch.no_grad()
def next_token_logprobs(model, ids: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    """float64 log pi(. | y_<t) at positions 0..T-2, each predicting token t+1. (B, T-1, V)."""
    model.eval()
    logits = model(input_ids=ids, attention_mask=attn, position_ids=position_ids(attn),
                   use_cache=False).logits[:, :-1]  # (B, T-1, V)
    return torch.log_softmax(logits.double(), dim=-1)


def old_new_kl(old: torch.Tensor, new: torch.Tensor, mask: torch.Tensor) -> float:
    """Exact mean over masked positions of KL(pi_old || pi_new) = sum_v p_old (log p_old - log p_new).
    old/new (B, T-1, V) log-probs, mask (B, T-1)."""
    kl = (old.exp() * (old - new)).sum(-1)  # (B, T-1)
    return float((kl * mask).sum() / mask.sum())


def log_ratio_std(old: torch.Tensor, new: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> float:
    """Spread of the token log-ratios log pi_new(y_t)/pi_old(y_t) of the tokens `ids[:, 1:]` over the mask."""
    tok = ids[:, 1:].unsqueeze(-1)  # (B, T-1, 1)
    r = (new.gather(-1, tok) - old.gather(-1, tok)).squeeze(-1)[mask > 0]  # (n,)
    return float(r.std())


@torch.no_grad()
def _set_update(params: dict, before: dict, after: dict, alpha: float) -> None:
    """theta = theta_old + alpha (theta_step - theta_old) for every trainable parameter."""
    for n, p in params.items():
        p.copy_(before[n] + alpha * (after[n] - before[n]))


def update_at_kl(model, ids, attn, mask, step_fn, target_kl: float, rtol: float = 1e-4, iters: int = 40) -> dict:
    """The step of `step_fn()` rescaled to KL(pi_old || pi_new) = target_kl (matched update size, P3).

    theta(alpha) = theta_old + alpha * delta, alpha found by doubling then bisection on the exact KL
    (`old_new_kl`, monotone in alpha near 0) to a relative tolerance `rtol`; ids/attn (B, T) full sequences,
    mask (B, T-1) the predicted positions that count. Returns alpha, the KL reached, the token log-ratio
    spread and, on an MoE, the per-layer top-k set change at that alpha over every real token (prompt and
    completion: all are context of the log-probs). The model is left at theta(alpha).
    """
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    before = {n: p.detach().clone() for n, p in params.items()}
    old = next_token_logprobs(model, ids, attn)  # (B, T-1, V)
    routes = expert_ids(model, ids, attn) if is_moe(model) else None
    step_fn()
    after = {n: p.detach().clone() for n, p in params.items()}

    def kl(alpha):
        _set_update(params, before, after, alpha)
        return old_new_kl(old, next_token_logprobs(model, ids, attn), mask)
    lo, hi = 0.0, 1.0
    while kl(hi) < target_kl and hi < 2.0 ** 20:
        lo, hi = hi, 2 * hi
    for _ in range(iters):  # bisection until |KL - target| <= rtol * target
        mid = (lo + hi) / 2
        reached = kl(mid)
        if abs(reached - target_kl) <= rtol * target_kl:
            break
        lo, hi = (mid, hi) if reached < target_kl else (lo, mid)
    new = next_token_logprobs(model, ids, attn)  # (B, T-1, V) at theta(alpha)
    out = {"alpha": mid, "kl": reached, "log_ratio_std": log_ratio_std(old, new, ids, mask)}
    if routes is not None:
        out["route_change"] = expert_set_change(routes, expert_ids(model, ids, attn), attn).tolist()
    return out


# ---------------------------------------------------------------- verdicts

def verdict_p1(e: dict) -> Exact:
    keys = ("seq_ratio_err", "token_eq_err_value", "token_eq_err_grad", "one_token_err")
    worst = max(e[k] for k in keys)
    return (REPRODUCED if worst <= EXACT_TOL else NOT), f"largest identity error {worst:.1e}"


def p2_evidence(metrics_by_run: dict, summaries: dict, seeds) -> dict:
    """P2 evidence per seed (runs named "<arm>/seed<s>"): mean clip share over all steps, held-out accuracy
    at the end (T = 1), and the final training reward (reported)."""
    return {f"{key}_{arm}": [fn(run_key(arm, s)) for s in seeds] for arm in ("gspo", "grpo") for key, fn in (
        ("clip", lambda run: clip_share(metrics_by_run[run])),
        ("acc", lambda run: summaries[run]["eval_end"]["acc/sample"]),
        ("reward", lambda run: final_mean(metrics_by_run[run])))}


def verdict_p2(e: dict) -> stats.Verdict:
    """P2: `P2_RULE` on the per-seed clip ratio and the paired accuracy difference."""
    ratios = [g / max(r, 1e-12) if g is not None and r is not None else None
              for g, r in zip(e["clip_gspo"], e["clip_grpo"])]
    v = P2_RULE.judge([P2_CLIP.judge(ratios), P2_ACC.judge(e["acc_gspo"], e["acc_grpo"])])
    return v.with_note(f"final training reward GSPO {stats.seed_mean(e['reward_gspo'])}, "
                       f"GRPO {stats.seed_mean(e['reward_grpo'])} (seed means)")


VERDICTS = {"P1": verdict_p1, "P2": verdict_p2}
"""P3-P5 (GSPO on the MoE) are judged in gspo_moe.py, beside notebook 08's measurements"""
