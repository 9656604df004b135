"""Notebook 01, GRPO (DeepSeekMath, Shao et al. 2024): claims G1 and G2.

- group-relative advantages of a real batch (Eq. 3), `advantage_table`;
- the k3 KL estimator against the exact KL on a small vocabulary (Eq. 4), `kl_samples`, `kl_check`;
- G1 (held-out accuracy rises, paired by seed against the base, `stats.Greater`) and G2 (k3 unbiased and
  >= 0): `g1_evidence`, `verdict_g1`, `verdict_g2`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..objectives import group_advantages, k1_kl, k3_kl
from . import stats
from .verdicts import TOL, Exact, exact

G1_RULE = stats.Greater("held-out accuracy (T = 1), GRPO - base", "accuracy", at_least=0.05)
"""G1: the accuracy of each seed's run after training minus the base's, >= 5 points (DESIGN, claims)"""
RULES = {"G1": G1_RULE}
"""claim id -> the rule that judges it and writes its criterion"""


ARMS = {"grpo": {"preset": "grpo", "adapter_steps": (0.5,)}}
"""G1's one arm: GRPO with the defaults (notebooks 05, 06 and 07 reuse these runs as their baseline); the adapter
half-way is kept (not part of the run's identity) for D2's fixed panel at steps 0, 50 and 100 (`lab.panel`)"""


def advantage_table(rewards: torch.Tensor, group_size: int) -> pd.DataFrame:
    """Rewards and group-relative advantages (DeepSeekMath Eq. 3) under scale 'group' and 'none' (Dr. GRPO)."""
    n = len(rewards)
    return pd.DataFrame({"group": np.arange(n) // group_size, "reward": rewards.float().numpy(),
                         "A (group)": group_advantages(rewards, group_size, "group").numpy(),
                         "A (none)": group_advantages(rewards, group_size, "none").numpy()})


def random_categoricals(vocab: int, seed: int = 0, scale: float = 0.3) -> tuple:
    """Two random distributions over `vocab` tokens as log-probs (pi, pi_ref), each (V,).

    Logits are iid N(0, scale^2); scale 0.3 gives KL ~ 0.06 nats, a policy close to its reference.
    """
    gen = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(2, vocab, generator=gen, dtype=torch.float64)  # (2, V)
    logp = torch.log_softmax(logits, dim=-1)
    return logp[0], logp[1]


def kl_samples(logp: torch.Tensor, ref_logp: torch.Tensor, n: int, seed: int = 0) -> dict:
    """Exact KL[pi || pi_ref] and n per-sample k1, k3 estimates with tokens drawn from pi (DeepSeekMath Eq. 4)."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.multinomial(logp.exp(), n, replacement=True, generator=gen)  # (n,)
    exact = float((logp.exp() * (logp - ref_logp)).sum())
    return {"exact": exact, "k1": k1_kl(logp[tokens], ref_logp[tokens]).numpy(),
            "k3": k3_kl(logp[tokens], ref_logp[tokens]).numpy()}


def kl_check(vocab: int = 12, n: int = 100_000, seed: int = 0, scale: float = 0.3) -> dict:
    """G2 evidence: exact KL, k1/k3 means, relative error of k3, min k3, variances."""
    s = kl_samples(*random_categoricals(vocab, seed, scale), n, seed)
    k1, k3 = s["k1"], s["k3"]
    return {"exact": s["exact"], "k1_mean": float(k1.mean()), "k3_mean": float(k3.mean()),
            "k1_rel_err": abs(float(k1.mean()) - s["exact"]) / s["exact"],
            "k3_rel_err": abs(float(k3.mean()) - s["exact"]) / s["exact"],
            "k1_min": float(k1.min()), "k3_min": float(k3.min()),
            "k1_var": float(k1.var(ddof=1)), "k3_var": float(k3.var(ddof=1))}


# ---------------------------------------------------------------- verdicts

def g1_evidence(summaries: dict) -> dict:
    """G1 evidence, one value per run (seed) in `summaries` order: held-out accuracy at T = 1 and greedy, and the
    held-out mean length (tokens, T = 1), of the base (`eval_start`) and after GRPO (`eval_end`)."""
    runs = list(summaries.values())
    return {f"{name}_{when}": [s[f"eval_{at}"][key] for s in runs]
            for name, key in (("acc", "acc/sample"), ("greedy", "acc/greedy"), ("len", "len/mean"))
            for when, at in (("before", "start"), ("after", "end"))}


def verdict_g1(e: dict) -> stats.Verdict:
    """G1: `G1_RULE` on acc_after - acc_before per seed; greedy accuracy and held-out length reported beside it."""
    m = {k: stats.seed_mean(e[k]) for k in ("acc_before", "acc_after", "greedy_before", "greedy_after")}
    n = {k: stats.seed_mean(e[k], ".1f") for k in ("len_before", "len_after")}
    return G1_RULE.judge(e["acc_after"], e["acc_before"]).with_note(
        f"seed means: T = 1 {m['acc_before']} -> {m['acc_after']}, greedy {m['greedy_before']} -> {m['greedy_after']}, "
        f"held-out length {n['len_before']} -> {n['len_after']} tokens")


def verdict_g2(e: dict) -> Exact:
    v = exact([e["k3_min"] >= 0, e["k3_rel_err"] <= 0.02 + TOL])
    return v, (f"min k3 {e['k3_min']:.2e}, rel. err {100 * e['k3_rel_err']:.2f}%, "
               f"Var k3/Var k1 = {e['k3_var'] / e['k1_var']:.3f}")


VERDICTS = {"G1": verdict_g1, "G2": verdict_g2}
