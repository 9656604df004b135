"""Notebook 06, Dr. GRPO (Liu et al., 2025): the two biases of GRPO it removes (Sec. 3.1), measured exactly.

- question-level difficulty bias: the group std in the advantage, `advantage_check`;
- response-level length bias: the 1/|o_i| normaliser, `token_weights` / `weight_check`;
- incorrect answers growing longer during training (Sec. 3.2), `ARMS`, `growth` / `growth_table`;
- R1 (exact) and R2 (`R2_RULE`: GRPO's growth > 0, and > Dr. GRPO's paired by seed): `verdict_r1`, `verdict_r2`;
  the sentence a notebook may print about it, only as strong as the verdict, `r2_statement`;
- beside the verdict: each arm's growth with its interval and the paired difference, `growth_intervals`; held-out
  accuracy, lengths and token efficiency at the end, Dr. GRPO minus GRPO paired by seed, `end_comparison`.
Derivations live in notebook 06; docstrings name the formula they compute.
"""
from __future__ import annotations

import math

import pandas as pd
import torch

from ..config import LossConfig
from ..objectives import ADV_EPS, group_advantages, policy_loss
from . import grpo, stats
from .runs import mean_over, run_key, window
from .verdicts import EXACT_TOL, NOT, REPRODUCED, Exact

ARMS = {"grpo": grpo.ARMS["grpo"], "dr_grpo": {"preset": "dr_grpo"}}
"""Sec. 3.2: GRPO against Dr. GRPO, everything else shared"""
HOME = {"grpo": "01_grpo"}
"""the GRPO arm is notebook 01's runs (same budget, same configuration): trained once, reused here"""


# ---------------------------------------------------------------- question level: std scaling

def binary_advantages(k: int, G: int, scale: str) -> tuple[float, float]:
    """(A of a correct, A of an incorrect response) in a group of G with k correct, 0/1 rewards.

    mean = p = k/G; unbiased std = sqrt(G/(G-1) p(1-p)); A = (r - p) / (std + 1e-4) for 'group',
    A = r - p for 'none' (Dr. GRPO).
    """
    p = k / G
    std = math.sqrt(G / (G - 1) * p * (1 - p))
    div = std + ADV_EPS if scale == "group" else 1.0
    return (1 - p) / div, -p / div


def advantage_check(G: int, ks, scales=("group", "none")) -> pd.DataFrame:
    """One row per (k correct of G, scale): hand-computed advantages, `group_advantages`' output, |error|."""
    rows = []
    for k in ks:
        rewards = torch.tensor([1.0] * k + [0.0] * (G - k))  # (G,) one group
        for scale in scales:
            a = group_advantages(rewards, G, scale)  # (G,)
            hand_c, hand_w = binary_advantages(k, G, scale)
            err = max(abs(float(a[0]) - hand_c), abs(float(a[-1]) - hand_w))
            rows.append({"correct": f"{k}/{G}", "scale": scale, "A correct (hand)": hand_c,
                         "A correct": float(a[0]), "A incorrect (hand)": hand_w, "A incorrect": float(a[-1]),
                         "abs err": err})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- response level: 1/|o_i|

def token_weights(cfg: LossConfig, lengths, advantages) -> torch.Tensor:
    """d loss / d log pi_theta(o_{i,t}) at pi_theta = pi_old, by autograd on `policy_loss`. Returns (B, T).

    At ratio 1 the clip is inert and every token of response i gets the same weight:
    -A_i / (B |o_i|) under GRPO's sample-level mean, -A_i / (B max_len) under Dr. GRPO.
    Padding positions are 0.
    """
    lengths = torch.as_tensor(lengths)
    B, T = len(lengths), int(lengths.max())
    mask = (torch.arange(T) < lengths[:, None]).float()  # (B, T)
    logps = torch.full((B, T), -1.0, dtype=torch.float64, requires_grad=True)  # (B, T)
    adv = torch.as_tensor(advantages, dtype=torch.float64)  # (B,)
    loss, _ = policy_loss(logps, logps.detach().clone(), adv, mask.double(), cfg)
    loss.backward()
    return logps.grad * mask  # (B, T)


def hand_weight(cfg: LossConfig, length: int, advantage: float, B: int) -> float:
    """The per-token weight of `token_weights` by formula (Dr. GRPO Sec. 3.1, Eq. 3 vs Eq. 4)."""
    if cfg.aggregation == "seq_mean_token_mean":
        return -advantage / (B * length)
    if cfg.aggregation == "seq_mean_token_sum_norm":
        return -advantage / (B * cfg.max_len)
    raise ValueError(f"aggregation={cfg.aggregation!r} has no hand formula here")


def weight_check(losses: dict, lengths, rewards, advantages: dict) -> pd.DataFrame:
    """One row per (objective, response): A, per-token weight by autograd and by formula, |error|.

    losses: name -> LossConfig; advantages: name -> (B,) advantages of that objective.
    """
    rows = []
    for name, cfg in losses.items():
        w = token_weights(cfg, lengths, advantages[name])  # (B, T)
        for i, (n, r) in enumerate(zip(lengths, rewards)):
            a = float(advantages[name][i])
            hand = hand_weight(cfg, n, a, len(lengths))
            rows.append({"objective": name, "response": "correct" if r > 0 else "incorrect", "|o_i|": n,
                         "A": a, "weight": float(w[i, 0]), "weight (hand)": hand,
                         "abs err": float((w[i, :n] - hand).abs().max())})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- training: incorrect answers growing

def growth(metrics: list, key: str = "len/incorrect", frac: float = 0.2) -> float:
    """mean(key over the last `frac` of steps) - mean(key over the first `frac`); None values skipped.

    Each window holds max(1, round(frac * n_steps)) steps; nan when a window has no value.
    """
    return mean_over(window(metrics, frac, "last"), key) - mean_over(window(metrics, frac, "first"), key)


def growth_table(metrics_by_run: dict, keys=("len/incorrect", "len/correct", "len/mean", "acc/mean"),
                 frac: float = 0.2) -> pd.DataFrame:
    """`growth` of each key (columns) for each run (rows)."""
    return pd.DataFrame({k: {run: growth(m, k, frac) for run, m in metrics_by_run.items()} for k in keys})


# ---------------------------------------------------------------- verdicts

def verdict_r1(e: dict) -> Exact:
    worst = max(e["adv_err"], e["weight_err"])
    return (REPRODUCED if worst <= EXACT_TOL else NOT), f"largest error vs hand-computed advantages/weights {worst:.1e}"


R2_GROWS = stats.growth("incorrect-answer length growth under GRPO (tokens, last - first 20% of steps)", measure="length",
                        fmt="+.2f")
R2_MORE = stats.Greater("incorrect-answer length growth, GRPO - Dr. GRPO (tokens)", "length", fmt="+.2f")
R2_RULE = stats.AllOf(parts=(R2_GROWS, R2_MORE))
"""R2: incorrect answers grow longer under GRPO, and more than under Dr. GRPO; partly if only one half holds"""
RULES = {"R2": R2_RULE}
"""claim id -> the rule that judges it and writes its criterion"""


def verdict_r2(e: dict) -> stats.Verdict:
    """R2: `R2_RULE` on GRPO's per-seed growth (one-sample) and the paired difference with Dr. GRPO."""
    return R2_RULE.judge([R2_GROWS.judge(e["growth_grpo"]), R2_MORE.judge(e["growth_grpo"], e["growth_dr"])])


VERDICTS = {"R1": verdict_r1, "R2": verdict_r2}


# ---------------------------------------------------------------- beside the verdict

def _row(iv: stats.Interval) -> dict:
    return {"mean": iv.mean, "95% lo": iv.lo, "95% hi": iv.hi, "n": iv.n}


def growth_intervals(growth: pd.DataFrame, seeds, key: str = "len/incorrect") -> pd.DataFrame:
    """`growth_table` column `key` over seeds: each arm's mean growth with its one-sample 95% t-interval, and
    GRPO minus Dr. GRPO paired by seed (rows "grpo", "dr_grpo", "grpo - dr_grpo")."""
    seeds = list(seeds)
    g = {arm: [float(growth.loc[run_key(arm, s), key]) for s in seeds] for arm in ARMS}
    rows = {arm: _row(stats.mean_interval(v)) for arm, v in g.items()}
    rows["grpo - dr_grpo"] = _row(stats.paired(g["grpo"], g["dr_grpo"]))
    return pd.DataFrame.from_dict(rows, orient="index")


def token_efficiency(evaluation: dict) -> float:
    """Held-out correct answers per 1,000 generated tokens: 1000 * acc/sample / len/mean (one evaluation)."""
    return 1000.0 * evaluation["acc/sample"] / evaluation["len/mean"]


END_KEYS = ("acc/sample", "acc/greedy", "len/mean", "len/correct", "len/incorrect", "token efficiency")
"""held-out quantities `end_comparison` compares at the end of training"""


def end_comparison(summaries: dict, seeds, keys=END_KEYS) -> pd.DataFrame:
    """Held-out values at the end of training: rows `keys`; columns the seed means of GRPO and Dr. GRPO, the
    change of each over its run (end - start, seed mean), and Dr. GRPO - GRPO paired by seed with its 95%
    t-interval. 'token efficiency' is `token_efficiency`."""
    seeds = list(seeds)

    def val(arm, s, k, when="end"):
        e = summaries[run_key(arm, s)][f"eval_{when}"]
        return token_efficiency(e) if k == "token efficiency" else e[k]

    rows = {}
    for k in keys:
        end = {arm: [val(arm, s, k) for s in seeds] for arm in ARMS}
        change = {arm: [val(arm, s, k) - val(arm, s, k, "start") for s in seeds] for arm in ARMS}
        iv = stats.paired(end["dr_grpo"], end["grpo"])
        rows[k] = {"GRPO": sum(end["grpo"]) / len(seeds), "Dr. GRPO": sum(end["dr_grpo"]) / len(seeds),
                   "GRPO change": sum(change["grpo"]) / len(seeds), "Dr. GRPO change": sum(change["dr_grpo"]) / len(seeds),
                   **{f"Dr - GRPO {c}": v for c, v in _row(iv).items()}}
    return pd.DataFrame.from_dict(rows, orient="index")


def r2_statement(v: stats.Verdict) -> str:
    """What notebook 06 may say about R2 in words, no stronger than the verdict `v` (from `verdict_r2`, after
    `stats.for_profile`): GRPO 'grows incorrect answers longer' only when that half is reproduced."""
    if v.word == stats.SMOKE:
        return "Smoke run: no statement about R2 (the full profile is the replication)."
    grows, more = v.parts[0], v.parts[1]
    if grows.word == REPRODUCED:
        first = "In our runs GRPO grew its incorrect answers longer (growth above 0, interval excluding 0)"
    elif grows.word == stats.INCONCLUSIVE:
        first = ("Our runs do not establish that GRPO grows incorrect answers longer: the interval of its growth "
                 "includes 0")
    else:
        first = "Our runs do not show GRPO growing incorrect answers longer (mean growth not above 0)"
    if more.word == REPRODUCED:
        second = "and they grew more under GRPO than under Dr. GRPO (paired interval above 0)."
    elif more.word == stats.INCONCLUSIVE:
        second = "and the paired interval of the difference from Dr. GRPO includes 0."
    else:
        second = "and they did not grow more under GRPO than under Dr. GRPO."
    return f"{first}, {second}"
