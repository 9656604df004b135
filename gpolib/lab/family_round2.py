"""Notebook 10, the family since GSPO, second round: SAPO, LUSPO and high-entropy token selection (claims C5-C7),
with VESPO's weight and the off-policy sequence mask shown on a batch (no claim).

- the arms, `ARMS`, all at mu = 4 (at mu = 1 every ratio is 1 and neither a gate nor a clip acts): GRPO (notebook
  09's `grpo_mu4` runs, `HOME`), GSPO, SAPO, LUSPO, and GRPO on the top 20% of tokens by entropy;
- C5 (`C5_RULE`), C6 (`C6_RULE`, conditional on GSPO's length bias at our scale) and C7 (`C7_RULE`):
  `c5_evidence` ... `verdict_c7`; a claim whose runs are absent is "not yet run" (`NOT_RUN`);
- beside the verdicts: `paired_table` (notebook 09's), the per-surrogate gradient of one token
  (`token_gradients`) and VESPO's weight and the off-policy mask on a batch (`vespo_weights`, `off_policy_demo`).
Derivations live in notebook 10; docstrings name the formula they compute.
"""
from __future__ import annotations

import pandas as pd
import torch

from .. import presets
from ..config import LossConfig
from ..objectives import policy_loss
from ..objectives.vespo import Vespo
from . import beyond, stats
from .beyond import evidence_table, paired_table  # noqa: F401  (the notebook's tables, shared with notebook 09)
from .runs import end_accuracy, mean_over, run_key
from .verdicts import NOT_RUN

MU = 4
"""minibatch updates per rollout batch for every arm"""

ARMS = {
    "grpo_mu4": beyond.ARMS["grpo_mu4"],
    "gspo_mu4": {"preset": "gspo", "mu": MU},
    "sapo_mu4": {"preset": "sapo", "mu": MU},
    "luspo_mu4": {"preset": "luspo", "mu": MU},
    "top_entropy_mu4": {"preset": "grpo_top_entropy", "mu": MU},
}
"""run name -> preset and fields, 3 seeds x 100 steps each, equal prompts, G, lr and budget. C5: SAPO (its preset,
tau 1.0 / 1.05) against GSPO and GRPO; C6: LUSPO against GSPO, GRPO for the premise; C7: GRPO on the top 20% of
tokens by entropy against GRPO on all tokens (the same loss otherwise)."""
HOME = {"grpo_mu4": "09_beyond"}
"""GRPO at mu = 4 is notebook 09's runs (same configuration): trained once, reused here"""

C5_GSPO = stats.Greater("held-out accuracy (T = 1), SAPO - GSPO (mu = 4)", "accuracy")
C5_GRPO = stats.NotWorse("held-out accuracy (T = 1), SAPO - GRPO (mu = 4)")
C5_CHECK = stats.AtLeast("1 - the share of SAPO's tokens whose gradient the gate zeroes (run max, gate/zeroed_frac)",
                         at_least=1.0, every=True, fmt=".6f")
C5_RULE = stats.AllOf(parts=(C5_GSPO, C5_GRPO), checks=(C5_CHECK,))
"""C5: SAPO above GSPO and not worse than GRPO in held-out accuracy; its gate zeroes no token (a check). The MoE
part of DESIGN's criterion waits for P4's operating point."""
C6_PREMISE = stats.Greater("held-out response length (tokens), GRPO - GSPO (mu = 4)", "length", fmt="+.1f")
C6_LENGTH = stats.Greater("held-out response length (tokens), LUSPO - GSPO (mu = 4)", "length", fmt="+.1f")
C6_ACC = stats.NotWorse("held-out accuracy (T = 1), LUSPO - GSPO (mu = 4)")
C6_RULE = stats.AllOf(parts=(C6_LENGTH, C6_ACC), conditions=(C6_PREMISE,))
"""C6: if GSPO's responses end shorter than GRPO's (else not tested), LUSPO's end longer than GSPO's at no loss of
accuracy"""
C7_RULE = stats.NotWorse("held-out accuracy (T = 1), top 20% entropy tokens - all tokens (GRPO, mu = 4)")
"""C7: the gradient on the top rho = 0.2 tokens by entropy is not worse than on all tokens (non-inferiority)"""
RULES = {"C5": C5_RULE, "C6": C6_RULE, "C7": C7_RULE}
"""claim id -> the rule that judges it and writes its criterion"""

CLAIM_ARMS = {"C5": ("grpo_mu4", "gspo_mu4", "sapo_mu4"), "C6": ("grpo_mu4", "gspo_mu4", "luspo_mu4"),
              "C7": ("grpo_mu4", "top_entropy_mu4")}
"""claim id -> the arms whose runs are its evidence"""
PAIRS = {
    "C5": {"accuracy, SAPO - GSPO": ("acc_sapo", "acc_gspo"), "accuracy, SAPO - GRPO": ("acc_sapo", "acc_grpo")},
    "C6": {"length, GRPO - GSPO": ("len_grpo", "len_gspo"), "length, LUSPO - GSPO": ("len_luspo", "len_gspo"),
           "accuracy, LUSPO - GSPO": ("acc_luspo", "acc_gspo")},
    "C7": {"accuracy, top-entropy - all tokens": ("acc_top_entropy", "acc_grpo")},
}
"""claim id -> label -> (evidence key A, key B): the paired differences shown beside its verdict"""


# ---------------------------------------------------------------- the objectives on single tokens and a batch

def token_gradients(ratios, advantages) -> pd.DataFrame:
    """d f / d log pi_theta of one token, GRPO's clip, GSPO's (one-token response), SAPO's gate and CISPO's cap
    (`beyond.token_gradients`). By hand for SAPO: 4 sigma (1 - sigma) r A, sigma = sigmoid(tau (r - 1))."""
    return beyond.token_gradients(ratios, advantages, objectives=("grpo", "gspo", "sapo", "cispo"))


def vespo_weights(log_ratios, surrogate: Vespo | None = None) -> pd.DataFrame:
    """VESPO's phi(w) = exp(lambda + k ln w - lambda w) at w = e^(sum log r) for A = +1 and A = -1 (its preset's
    (k, lambda)), beside GSPO's length-normalised ratio of the same response: rows ln w."""
    s = surrogate or presets.get("vespo").loss.surrogate
    rows = {}
    for lw in log_ratios:
        logps = torch.tensor([[float(lw)]], dtype=torch.float64)
        old = torch.zeros_like(logps)
        rows[float(lw)] = {f"phi, A {a:+g}": float(s.weight(logps, old, torch.tensor([a], dtype=torch.float64),
                                                            torch.ones_like(logps))) for a in (1.0, -1.0)}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("ln w")


def off_policy_demo(drifts, advantages, delta: float = 0.1) -> pd.DataFrame:
    """The off-policy sequence mask on one-token responses with mean log(pi_sample / pi_theta) = drift and advantage
    A: kept (1) unless A < 0 and drift > delta; its gradient on GRPO's loss shows the dropped ones at 0."""
    d = torch.tensor([float(x) for x in drifts for _ in advantages], dtype=torch.float64).unsqueeze(1)  # (N, 1)
    adv = torch.tensor([float(a) for _ in drifts for a in advantages], dtype=torch.float64)  # (N,)
    logps = torch.zeros_like(d).requires_grad_(True)
    cfg = LossConfig(off_policy_mask_threshold=delta)
    loss, _ = policy_loss(logps, logps.detach(), adv, torch.ones_like(d), cfg, engine_logps=d)
    (g,) = torch.autograd.grad(loss, logps)
    return pd.DataFrame({"drift": d[:, 0].tolist(), "A": adv.tolist(), "kept": (g[:, 0] != 0).int().tolist()})


# ---------------------------------------------------------------- evidence from the runs

def _finished(summaries: dict, arms, seeds) -> bool:
    return all(run_key(a, s) in summaries for a in arms for s in seeds)


def _run_max(metrics: dict, arm: str, key: str, seeds) -> list:
    """Per seed: the largest value of `key` over the run's steps (0.0 where none logged it)."""
    return [max((r[key] for r in metrics[run_key(arm, s)] if key in r and r[key] is not None), default=0.0)
            for s in seeds]


def end_length(summaries: dict, arm: str, seeds) -> list:
    """Per seed: mean held-out response length (tokens, T = 1) at the end of the run."""
    return [summaries[run_key(arm, s)]["eval_end"]["len/mean"] for s in seeds]


def c5_evidence(summaries: dict, metrics: dict, seeds) -> dict:
    """C5 per seed: end accuracy of SAPO, GSPO, GRPO; SAPO's run max of `gate/zeroed_frac` and run means of its
    gate's weight and of the share below 0.1. Empty lists when a run is absent (the claim is then not yet run)."""
    if not _finished(summaries, CLAIM_ARMS["C5"], seeds):
        return {"acc_sapo": [], "acc_gspo": [], "acc_grpo": [], "zeroed_sapo": []}
    return {"acc_sapo": end_accuracy(summaries, "sapo_mu4", seeds), "acc_gspo": end_accuracy(summaries, "gspo_mu4", seeds),
            "acc_grpo": end_accuracy(summaries, "grpo_mu4", seeds),
            "zeroed_sapo": _run_max(metrics, "sapo_mu4", "gate/zeroed_frac", seeds),
            "gate_mean_sapo": [mean_over(metrics[run_key("sapo_mu4", s)], "gate/mean") for s in seeds],
            "gate_low_sapo": [mean_over(metrics[run_key("sapo_mu4", s)], "gate/low_frac") for s in seeds]}


def c6_evidence(summaries: dict, metrics: dict, seeds) -> dict:
    """C6 per seed: end held-out length and accuracy of LUSPO, GSPO and GRPO (empty when a run is absent)."""
    if not _finished(summaries, CLAIM_ARMS["C6"], seeds):
        return {"len_luspo": [], "len_gspo": [], "len_grpo": [], "acc_luspo": [], "acc_gspo": []}
    return {"len_luspo": end_length(summaries, "luspo_mu4", seeds), "len_gspo": end_length(summaries, "gspo_mu4", seeds),
            "len_grpo": end_length(summaries, "grpo_mu4", seeds),
            "acc_luspo": end_accuracy(summaries, "luspo_mu4", seeds), "acc_gspo": end_accuracy(summaries, "gspo_mu4", seeds)}


def c7_evidence(summaries: dict, metrics: dict, seeds) -> dict:
    """C7 per seed: end accuracy with the top-entropy selection and without; the run means of the share of tokens
    the selection keeps (1 - `select/entropy_dropped`) and of their entropy (`select/entropy_kept`)."""
    if not _finished(summaries, CLAIM_ARMS["C7"], seeds):
        return {"acc_top_entropy": [], "acc_grpo": []}
    rows = [metrics[run_key("top_entropy_mu4", s)] for s in seeds]
    return {"acc_top_entropy": end_accuracy(summaries, "top_entropy_mu4", seeds),
            "acc_grpo": end_accuracy(summaries, "grpo_mu4", seeds),
            "kept_share": [1 - mean_over(r, "select/entropy_dropped") for r in rows],  # NaN where none measured
            "kept_entropy": [mean_over(r, "select/entropy_kept") for r in rows],
            "entropy_all": [mean_over(r, "entropy/mean") for r in rows]}


# ---------------------------------------------------------------- verdicts

def _absent(e: dict, keys) -> bool:
    return any(not e.get(k) for k in keys)


NOT_YET = "not yet run: the notebook's runs are absent (the full profile trains them)"


def verdict_c5(e: dict):
    if _absent(e, ("acc_sapo", "acc_gspo", "acc_grpo", "zeroed_sapo")):
        return NOT_RUN, NOT_YET
    m = stats.seed_mean
    v = C5_RULE.judge([C5_GSPO.judge(e["acc_sapo"], e["acc_gspo"]), C5_GRPO.judge(e["acc_sapo"], e["acc_grpo"])],
                      checks=[C5_CHECK.judge([1 - z for z in e["zeroed_sapo"]])])
    extra = (f"; SAPO's gate weight (run mean) {m(e['gate_mean_sapo'], '.3f')}, share below 0.1 "
             f"{m(e['gate_low_sapo'], '.3%')}" if e.get("gate_mean_sapo") else "")
    return v.with_note(f"accuracy (seed means) SAPO {m(e['acc_sapo'])}, GSPO {m(e['acc_gspo'])}, GRPO "
                       f"{m(e['acc_grpo'])}{extra}; loss parity with TRL's loss_type='sapo' and verl's 'sapo': "
                       "tests/test_trl_family_parity.py, tests/test_verl_parity.py")


def verdict_c6(e: dict):
    if _absent(e, ("len_luspo", "len_gspo", "len_grpo", "acc_luspo", "acc_gspo")):
        return NOT_RUN, NOT_YET
    m = stats.seed_mean
    return C6_RULE.judge([C6_LENGTH.judge(e["len_luspo"], e["len_gspo"]), C6_ACC.judge(e["acc_luspo"], e["acc_gspo"])],
                         conditions=[C6_PREMISE.judge(e["len_grpo"], e["len_gspo"])]).with_note(
        f"held-out length (seed means) GRPO {m(e['len_grpo'], '.1f')}, GSPO {m(e['len_gspo'], '.1f')}, LUSPO "
        f"{m(e['len_luspo'], '.1f')}; loss parity with TRL's loss_type='luspo': tests/test_trl_family_parity.py")


def verdict_c7(e: dict):
    if _absent(e, ("acc_top_entropy", "acc_grpo")):
        return NOT_RUN, NOT_YET
    m = stats.seed_mean
    extra = (f"; tokens with a gradient (run mean) {m(e['kept_share'], '.1%')}, their entropy "
             f"{m(e['kept_entropy'], '.3f')} nats against {m(e['entropy_all'], '.3f')} over all tokens"
             if e.get("kept_share") else "")
    return C7_RULE.judge(e["acc_top_entropy"], e["acc_grpo"]).with_note(
        f"accuracy (seed means) top-entropy {m(e['acc_top_entropy'])}, all tokens {m(e['acc_grpo'])}{extra}; "
        "parity with TRL's top_entropy_quantile: tests/test_trl_family_parity.py")


VERDICTS = {"C5": verdict_c5, "C6": verdict_c6, "C7": verdict_c7}


def statements(verdicts: dict) -> list:
    """One sentence per claim, no stronger than its verdict: its word and text (smoke and not-yet-run say so)."""
    out = []
    for cid, v in verdicts.items():
        if v.word == stats.SMOKE:
            out.append(f"{cid}: smoke run, no statement (the full profile is the replication).")
        else:
            out.append(f"{cid} ({v.word}): {v.text}.")
    return out
