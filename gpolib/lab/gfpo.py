"""Notebook 05, GFPO (Shrivastava et al., 2025): the filter and its length measures (Sec. 3, Eq. 3-4).

- the retained set S of one group and its advantages next to a hand formula, `filter_demo`;
- the variants compared, `ARMS`; length reduction vs GRPO, 1 - L_variant / L_GRPO, `length_reduction`;
- excess length reduction (Eq. 4), `elr`; held-out accuracy, length, reduction and ELR per run, `variant_table`;
- F1 and F2: `verdict_f1`, `verdict_f2`.
Derivations live in notebook 05; docstrings name the formula they compute.
"""
from __future__ import annotations

import statistics

import pandas as pd
import torch

from ..groups import gfpo_advantages, gfpo_keep, gfpo_scores
from ..objectives import ADV_EPS
from .verdicts import NOT, PARTLY, REPRODUCED, Verdict, at_least

ARMS = {
    # the baseline: the same loss (token-mean, Clip-Higher), G = 8, no filter
    "grpo": {"preset": "gfpo", "name": "grpo", "group_size": 8, "gfpo_k": None},
    "gfpo-k8-g16-short": {"preset": "gfpo", "group_size": 16, "gfpo_k": 8, "gfpo_metric": "length"},
    "gfpo-k4-g16-short": {"preset": "gfpo", "group_size": 16, "gfpo_k": 4, "gfpo_metric": "length"},
    "gfpo-k6-g8-short": {"preset": "gfpo", "group_size": 8, "gfpo_k": 6, "gfpo_metric": "length"},
    "gfpo-k8-g16-eff": {"preset": "gfpo", "group_size": 16, "gfpo_k": 8, "gfpo_metric": "efficiency"},
}
"""run name -> preset and fields: group size G, kept k, ranking metric (equal prompts per step for all)"""


# ---------------------------------------------------------------- Sec. 3, Eq. 3: one filtered group

def filtered_advantages_by_hand(rewards, keep) -> list[float]:
    """A_j = (r_j - mean(r_S)) / (std(r_S) + 1e-4) for j in S (unbiased std), 0 otherwise (Eq. 3)."""
    kept = [r for r, k in zip(rewards, keep) if k]
    mean, std = statistics.mean(kept), statistics.stdev(kept)
    return [(r - mean) / (std + ADV_EPS) if k else 0.0 for r, k in zip(rewards, keep)]


def filter_demo(rewards, lengths, k: int, metric: str = "length") -> pd.DataFrame:
    """One group: reward, |o_i|, score, kept (top-k by `metric`), A from `gfpo_advantages`, A by hand."""
    r, n = torch.tensor(rewards, dtype=torch.float32), torch.tensor(lengths)  # (G,), (G,)
    keep = gfpo_keep(r, n, len(rewards), k, metric)  # (G,) bool
    adv = gfpo_advantages(r, keep, len(rewards))  # (G,)
    return pd.DataFrame({"reward": rewards, "|o_i|": lengths, "score": gfpo_scores(r, n, metric).tolist(),
                         "kept": keep.tolist(), "A": (adv + 0.0).tolist(),  # + 0.0 turns -0.0 into 0.0
                         "A (hand)": filtered_advantages_by_hand(rewards, keep.tolist())})


# ---------------------------------------------------------------- Eq. 4: length measures

def length_reduction(len_variant: float, len_grpo: float) -> float:
    """Share of GRPO's mean length removed: 1 - L_variant / L_GRPO (0.3 = 30% shorter)."""
    return 1.0 - len_variant / len_grpo


def elr(len_grpo: float, len_gfpo: float, len_base: float) -> float:
    """Excess length reduction, GFPO Eq. 4: (L_GRPO - L_GFPO) / (L_GRPO - L_SFT).

    The share of GRPO's length increase over the base (SFT) model that GFPO removes: 1 = back to the base
    length, > 1 = shorter than the base, < 0 = longer than GRPO. nan when GRPO did not lengthen answers
    (L_GRPO <= L_SFT), where the ratio has no meaning.
    """
    excess = len_grpo - len_base
    return (len_grpo - len_gfpo) / excess if excess > 0 else float("nan")


def variant_table(summaries: dict, baseline: str = "grpo") -> pd.DataFrame:
    """Held-out acc and length at the end of each run, reduction and ELR vs `baseline`; rows are runs.

    summaries: run name -> `load_summary` dict. L_SFT is the baseline's `eval_start` `len/mean` (the base
    model on the same held-out prompts before any update).
    """
    base = summaries[baseline]
    l_grpo, l_sft = base["eval_end"]["len/mean"], base["eval_start"]["len/mean"]
    rows = {}
    for run, s in summaries.items():
        acc, length = s["eval_end"]["acc/sample"], s["eval_end"]["len/mean"]
        rows[run] = {"acc": acc, "len": length, "acc - acc GRPO": acc - base["eval_end"]["acc/sample"],
                     "reduction": length_reduction(length, l_grpo), "ELR": elr(l_grpo, length, l_sft)}
    return pd.DataFrame.from_dict(rows, orient="index").astype(float)


# ---------------------------------------------------------------- verdicts

def verdict_f1(e: dict) -> Verdict:
    cut = 1 - e["len_gfpo"] / e["len_grpo"]
    acc_ok = at_least(e["acc_gfpo"] - e["acc_grpo"], -0.03)
    v = REPRODUCED if at_least(cut, 0.30) and acc_ok else PARTLY if cut > 0 else NOT
    return v, (f"length {e['len_grpo']:.0f} -> {e['len_gfpo']:.0f} ({100 * cut:.0f}% shorter); "
               f"acc {e['acc_grpo']:.3f} -> {e['acc_gfpo']:.3f}")


def verdict_f2(e: dict) -> Verdict:
    ok = e["reduction_k4_g16"] > e["reduction_k6_g8"]
    return (REPRODUCED if ok else NOT), (f"length reduction k/G=4/16 {100 * e['reduction_k4_g16']:.0f}% vs "
                                         f"6/8 {100 * e['reduction_k6_g8']:.0f}%")


VERDICTS = {"F1": verdict_f1, "F2": verdict_f2}
