"""GSPO's identities (Zheng et al., 2025, Eq. 7, 13-14) and the clip-share comparison of Sec. 5.2.

- the sequence ratio s_i as a geometric mean of token ratios, `seq_ratio_err`;
- GSPO-token equals GSPO in value and gradient under per-sequence advantages, `token_equivalence`;
- GSPO equals GRPO when every response has one token, `one_token_err`;
- per-run clip share and final reward from training metrics, `clip_share`, `final_mean`, `run_table`.
Derivations live in notebook 04; docstrings name the formula they compute.
"""
from __future__ import annotations

import math

import pandas as pd
import torch

from .config import LossConfig
from .objectives import policy_loss, sequence_log_ratio


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
    seq = LossConfig("sequence", cfg.eps_low, cfg.eps_high, cfg.aggregation, cfg.max_len)
    seq_tok = LossConfig("sequence_token", cfg.eps_low, cfg.eps_high, cfg.aggregation, cfg.max_len)
    return loss_diff(batch, seq, seq_tok)


def one_token_err(batch: dict, cfg: LossConfig) -> tuple[float, float]:
    """GSPO vs GRPO on one-token responses: s_i = rho_{i,1}, so value and gradient agree. (value, grad) errors.

    Uses the first column of the batch as the only token of every response.
    """
    one = {k: (v[:, :1] if v.dim() == 2 else v) for k, v in batch.items()}
    one["mask"] = torch.ones_like(one["mask"])  # (B, 1)
    seq = LossConfig("sequence", cfg.eps_low, cfg.eps_high, cfg.aggregation, cfg.max_len)
    tok = LossConfig("token", cfg.eps_low, cfg.eps_high, cfg.aggregation, cfg.max_len)
    return loss_diff(one, seq, tok)


def clipped_rows(batch: dict, cfg: LossConfig) -> int:
    """Responses whose sequence ratio lies outside [1 - eps_low, 1 + eps_high] (clip may act), Eq. 5."""
    s = torch.exp(sequence_log_ratio(batch["logps"], batch["old_logps"], batch["mask"]))  # (B,)
    return int(((s < 1 - cfg.eps_low) | (s > 1 + cfg.eps_high)).sum())


# ---------------------------------------------------------------- Sec. 5.2: training summaries

def _values(rows: list, key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key) is not None and not math.isnan(float(r[key]))]


def clip_share(metrics: list, key: str = "clip/frac") -> float:
    """Mean of `key` over all steps (share of tokens clipped, averaged over the run); nan if none."""
    vals = _values(metrics, key)
    return sum(vals) / len(vals) if vals else float("nan")


def final_mean(metrics: list, key: str = "reward/mean", frac: float = 0.2) -> float:
    """Mean of `key` over the last max(1, round(frac * n_steps)) steps; nan if none."""
    k = max(1, round(frac * len(metrics)))
    return clip_share(metrics[-k:], key)


def run_table(metrics_by_run: dict, frac: float = 0.2) -> pd.DataFrame:
    """One row per run: mean clip share (all, low, high) over all steps, final reward and accuracy."""
    rows = {run: {"clip/frac": clip_share(m), "clip/low": clip_share(m, "clip/low"),
                  "clip/high": clip_share(m, "clip/high"), "reward (last 20%)": final_mean(m, "reward/mean", frac),
                  "acc (last 20%)": final_mean(m, "acc/mean", frac)}
            for run, m in metrics_by_run.items()}
    return pd.DataFrame.from_dict(rows, orient="index")
