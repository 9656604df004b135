"""Notebook 05, GFPO (Shrivastava et al., 2025): the filter and its length measures (Sec. 3, Eq. 3-4).

- the retained set S of one group and its advantages next to a hand formula, `filter_demo`;
- the variants compared, `ARMS`; length reduction vs GRPO, 1 - L_variant / L_GRPO, `length_reduction`;
- excess length reduction (Eq. 4), `elr`; held-out accuracy, length, reduction and ELR per run, `variant_table`;
- F1 and F2 over seeds, paired by seed, resting on the premise that GRPO lengthens answers (`stats`):
  `f_evidence`, `verdict_f1`, `verdict_f2`; `ELR_WHY` says why an ELR is missing; the variant table averaged
  over seeds, `seed_table`.
Derivations live in notebook 05; docstrings name the formula they compute.
"""
from __future__ import annotations

import statistics

import pandas as pd
import torch

from ..groups import gfpo_advantages, gfpo_keep, gfpo_scores
from ..objectives import ADV_EPS
from . import stats

ARMS = {
    # the baseline: the same loss (token-mean, Clip-Higher), G = 8, no filter
    "grpo": {"preset": "gfpo", "name": "grpo", "group_size": 8, "gfpo_k": None},
    "gfpo-k8-g16-short": {"preset": "gfpo", "group_size": 16, "gfpo_k": 8, "gfpo_metric": "length"},
    "gfpo-k4-g16-short": {"preset": "gfpo", "group_size": 16, "gfpo_k": 4, "gfpo_metric": "length"},
    "gfpo-k6-g8-short": {"preset": "gfpo", "group_size": 8, "gfpo_k": 6, "gfpo_metric": "length"},
    "gfpo-k8-g16-eff": {"preset": "gfpo", "group_size": 16, "gfpo_k": 8, "gfpo_metric": "efficiency"},
    # GFPO Alg. 2: G = 16, k from the prompt's mean-reward quartile over a running record of group means:
    # easiest quartile keeps gfpo_k = 4, the next 6, the two hardest 8 (harder prompts keep more answers)
    "gfpo-adaptive-g16": {"preset": "gfpo", "group_size": 16, "gfpo_k": 4, "gfpo_metric": "length",
                          "gfpo_adaptive": True},
}
"""run name -> preset and fields: group size G, kept k, ranking metric (equal prompts per step for all)"""
F1_ARM = "gfpo-k8-g16-short"
"""the variant F1 compares with GRPO"""
PREMISE = stats.AtLeast("GRPO's held-out length over the base's, L_GRPO / L_SFT - 1", at_least=0.10, fmt=".1%")
"""F1 and F2 rest on GRPO lengthening answers: without excess length there is nothing for the filter to cut"""
F1_CUT = stats.Greater(f"length cut of {F1_ARM}, 1 - L_GFPO / L_GRPO", at_least=0.30, partly_at_least=0.10,
                       paired=False, fmt="+.1%")
F1_ACC = stats.NotWorse(f"held-out accuracy (T = 1), {F1_ARM} - GRPO")
F1_RULE = stats.AllOf(parts=(F1_CUT, F1_ACC), premises=(PREMISE,))
F2_MORE = stats.Greater("length reduction vs GRPO, k/G 4/16 - 6/8", fmt="+.1%")
F2_RULE = stats.AllOf(parts=(F2_MORE,), premises=(PREMISE,))
RULES = {"F1": F1_RULE, "F2": F2_RULE}
"""claim id -> the rule that judges it and writes its criterion"""
ELR_WHY = "GRPO did not lengthen answers over the base (L_GRPO <= L_SFT): Eq. 4 has no excess length to divide by"
"""why an ELR is null in the evidence (`report.record(..., why={"elr": ELR_WHY})`)"""


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


def seed_table(summaries: dict, seeds, baseline: str = "grpo") -> pd.DataFrame:
    """`variant_table` of each seed (runs named "<arm>/seed<s>"), averaged over the seeds; an ELR that is NaN
    in any seed stays NaN in the mean (nothing is averaged over a subset of seeds)."""
    per = [variant_table({arm: summaries[f"{arm}/seed{s}"] for arm in ARMS}, baseline) for s in seeds]
    return sum(per[1:], per[0]) / len(per)


# ---------------------------------------------------------------- verdicts

def _at(summaries: dict, arm: str, seed: int, key: str, when: str = "end"):
    """`key` of the held-out evaluation at the start or end of run "<arm>/seed<seed>"."""
    return summaries[f"{arm}/seed{seed}"][f"eval_{when}"][key]


def f_evidence(summaries: dict, seeds) -> dict:
    """F1/F2 evidence per seed (held-out values at the end of each run): lengths of the base (GRPO's start),
    GRPO and F1's variant, their accuracies, the reductions of 4/16 and 6/8 vs GRPO, and every variant's ELR
    (NaN where GRPO did not lengthen answers, see `ELR_WHY`)."""
    seeds = list(seeds)
    out = {"len_base": [_at(summaries, "grpo", s, "len/mean", "start") for s in seeds]}
    for name, key in (("len", "len/mean"), ("acc", "acc/sample")):
        out[f"{name}_grpo"] = [_at(summaries, "grpo", s, key) for s in seeds]
        out[f"{name}_gfpo"] = [_at(summaries, F1_ARM, s, key) for s in seeds]
    variants = {arm: [_at(summaries, arm, s, "len/mean") for s in seeds] for arm in ARMS if arm != "grpo"}
    out["reduction_k4_g16"] = list(map(length_reduction, variants["gfpo-k4-g16-short"], out["len_grpo"]))
    out["reduction_k6_g8"] = list(map(length_reduction, variants["gfpo-k6-g8-short"], out["len_grpo"]))
    out["elr"] = {arm: list(map(elr, out["len_grpo"], lens, out["len_base"])) for arm, lens in variants.items()}
    return out


def _premise(e: dict) -> stats.Verdict:
    growth = [g / b - 1 if g is not None and b is not None else None for g, b in zip(e["len_grpo"], e["len_base"])]
    return PREMISE.judge(growth)


def verdict_f1(e: dict) -> stats.Verdict:
    """F1: `F1_RULE`, the per-seed length cut and the paired accuracy difference, if GRPO lengthens answers."""
    cut = [1 - f / g if f is not None and g is not None else None for f, g in zip(e["len_gfpo"], e["len_grpo"])]
    v = F1_RULE.judge([F1_CUT.judge(cut), F1_ACC.judge(e["acc_gfpo"], e["acc_grpo"])], [_premise(e)])
    return v.with_note(f"length base {stats.seed_mean(e['len_base'], '.1f')}, GRPO {stats.seed_mean(e['len_grpo'], '.1f')}, "
                       f"GFPO {stats.seed_mean(e['len_gfpo'], '.1f')} tokens (seed means)")


def verdict_f2(e: dict) -> stats.Verdict:
    """F2: `F2_RULE`, reduction of 4/16 minus that of 6/8 paired by seed, if GRPO lengthens answers."""
    return F2_RULE.judge([F2_MORE.judge(e["reduction_k4_g16"], e["reduction_k6_g8"])], [_premise(e)])


VERDICTS = {"F1": verdict_f1, "F2": verdict_f2}
