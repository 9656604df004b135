"""Notebook 04, GSPO (Zheng et al., 2025): its identities (Eq. 7, 13-14) and the clip share of Sec. 5.2.

- the sequence ratio s_i as a geometric mean of token ratios, `seq_ratio_err`;
- GSPO-token equals GSPO in value and gradient under per-sequence advantages, `token_equivalence`;
- GSPO equals GRPO when every response has one token, `one_token_err`;
- the two arms of Sec. 5.2, `ARMS`; per-run clip share and final reward, `clip_share`, `final_mean`, `run_table`;
- P1-P5: `verdict_p1` ... `verdict_p5` (P3-P5, GSPO on the MoE, are measured in a later notebook).
Derivations live in notebook 04; docstrings name the formula they compute.
"""
from __future__ import annotations

import dataclasses

import pandas as pd
import torch

from ..config import LossConfig
from ..objectives import policy_loss, sequence_log_ratio
from .runs import mean_over, window
from .verdicts import NOISE_Z, NOT, PARTLY, REPRODUCED, EXACT_TOL, Verdict, at_least, grade, mean, seed_noise, seeds_text

ARMS = {"gspo": {"preset": "gspo"},
        "grpo": {"preset": "grpo", "mu": 4, "loss_eps_high": 0.28}}
"""GSPO Sec. 5.2: GSPO (3e-4 / 4e-4) against GRPO with Clip-Higher (0.2 / 0.28), both with 4 minibatches"""


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
    """Responses whose sequence ratio lies outside [1 - eps_low, 1 + eps_high] (clip may act), Eq. 5."""
    s = torch.exp(sequence_log_ratio(batch["logps"], batch["old_logps"], batch["mask"]))  # (B,)
    return int(((s < 1 - cfg.eps_low) | (s > 1 + cfg.eps_high)).sum())


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


# ---------------------------------------------------------------- verdicts

def verdict_p1(e: dict) -> Verdict:
    keys = ("seq_ratio_err", "token_eq_err_value", "token_eq_err_grad", "one_token_err")
    worst = max(e[k] for k in keys)
    return (REPRODUCED if worst <= EXACT_TOL else NOT), f"largest identity error {worst:.1e}"


def verdict_p2(e: dict) -> Verdict:
    ratio = mean(e["clip_gspo"]) / max(mean(e["clip_grpo"]), 1e-12)
    diff = mean(e["reward_gspo"]) - mean(e["reward_grpo"])
    noise = seed_noise(e["reward_gspo"], e["reward_grpo"])
    v = grade([at_least(ratio, 10), at_least(diff, -NOISE_Z * noise)])
    return v, f"clip share GSPO/GRPO = {ratio:.1f}x; final reward diff {diff:+.3f} (noise {noise:.3f})"


def verdict_p3(e: dict) -> Verdict:
    layers = e["route_change_per_layer"]
    spread = e["ratio_spread_moe"] > e["ratio_spread_dense"]
    v = REPRODUCED if min(layers) > 0.01 and spread else PARTLY if max(layers) > 0.01 or spread else NOT
    return v, ("routing change per layer " + ", ".join(f"{100 * x:.1f}%" for x in layers)
               + f"; token-ratio spread MoE {e['ratio_spread_moe']:.3g} vs dense {e['ratio_spread_dense']:.3g}")


def verdict_p4(e: dict) -> Verdict:
    gspo, plain = e["reward_gspo"], e["reward_grpo_no_replay"]
    diff = mean(gspo) - mean(plain)
    v = REPRODUCED if diff >= 0 else PARTLY if diff >= -NOISE_Z * seed_noise(gspo, plain) else NOT
    return v, (f"final reward GSPO {seeds_text(gspo)}, GRPO no replay {seeds_text(plain)}, "
               f"GRPO + replay {seeds_text(e['reward_grpo_replay'])}")


def verdict_p5(e: dict) -> Verdict:
    eng, rec = e["reward_engine"], e["reward_recompute"]
    diff = mean(eng) - mean(rec)
    v = grade([abs(diff) <= NOISE_Z * seed_noise(eng, rec), e["seq_mismatch"] < e["token_mismatch"]])
    return v, (f"reward engine - recompute {diff:+.3f} (noise {seed_noise(eng, rec):.3f}); "
               f"mismatch seq {e['seq_mismatch']:.3g} vs token {e['token_mismatch']:.3g}")


VERDICTS = {"P1": verdict_p1, "P2": verdict_p2, "P3": verdict_p3, "P4": verdict_p4, "P5": verdict_p5}
