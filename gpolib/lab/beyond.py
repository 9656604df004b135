"""Notebook 09, the family since GSPO: CISPO, GMPO, RLOO and truncated importance sampling (claims C1-C4).

- the arms, `ARMS` (GRPO at mu = 1 = notebook 01's runs, `HOME`): C1 CISPO against DAPO without dynamic sampling,
  C2 GMPO against GRPO, both at mu = 4; C3 GRPO sampled by the W8A8 engine without and with TIS (C = 2) against
  GRPO on the float32 engine;
- C1 (`C1_RULE`), C2 (`C2_RULE`), C3 (`C3_RULE`, conditional on the engines' measured mismatch) and C4 (exact):
  `c1_evidence` ... `verdict_c4`;
- beside the verdicts: per-seed evidence and paired differences, `evidence_table`, `paired_table`; the engines'
  measured mismatch, `mismatch_table`; what the notebook may say, no stronger than the verdicts, `statements`;
- C4's identity for one group, `rloo_table`; one token's gradient under each surrogate, `token_gradients`; every
  objective of the workbook on the three axes, `axes_table`.
Derivations live in notebook 09; docstrings name the formula they compute.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import torch

from .. import paths, presets
from ..objectives import group_advantages
from . import grpo, stats
from .runs import end_accuracy, mean_over, run_key
from .verdicts import EXACT_TOL, Exact, exact

MU = 4
"""minibatch updates per rollout batch for C1 and C2: at mu = 1 every ratio is 1 and neither a clip nor a
geometric mean acts"""

ARMS = {
    "grpo": grpo.ARMS["grpo"],  # C3's float32-engine reference (mu = 1): notebook 01's runs
    "grpo_w8a8": {"preset": "grpo", "rollout_weights": "w8a8"},
    "grpo_w8a8_tis": {"preset": "grpo", "rollout_weights": "w8a8", "loss_mismatch_correction": "token_truncate",
                      "loss_mismatch_cap": 2.0},
    "dapo_mu4": {"preset": "dapo", "dynamic_sampling": False, "mu": MU},
    "cispo_mu4": {"preset": "cispo", "mu": MU, "overlong": "shaping", "overlong_cache": 0.2},
    "grpo_mu4": {"preset": "grpo", "mu": MU},
    "gmpo_mu4": {"preset": "gmpo", "mu": MU},
}
"""run name -> preset and fields, 3 seeds x 100 steps each, equal prompts, G, lr and budget.
C1: CISPO (MiniMax-M1 Sec. 3.1, its preset) with DAPO's soft overlong punishment, against DAPO without dynamic
sampling (equal samples per step): the two differ only in the surrogate and its range. C2: GMPO against GRPO,
the same loss otherwise. C3: GRPO's defaults with the 8-bit engine of weights and activations (W8A8,
`TrainConfig.rollout_weights`), without and with token-level TIS at C = 2 (Yao et al. 2025)."""
HOME = {"grpo": "01_grpo"}
"""the float32 GRPO arm is notebook 01's runs (same configuration): trained once, reused here"""

C1_RULE = stats.Greater("held-out accuracy (T = 1), CISPO - DAPO without dynamic sampling (mu = 4)", "accuracy")
"""C1: CISPO learns faster than DAPO, read as higher held-out accuracy at equal steps (DESIGN, claims)"""
C2_RANGE = stats.Greater("run-mean of the per-step range of log ratios of tokens with a gradient, GRPO - GMPO "
                         "(mu = 4)", "log_ratio_range", fmt="+.4f")
C2_ACC = stats.NotWorse("held-out accuracy (T = 1), GMPO - GRPO (mu = 4)")
C2_RULE = stats.AllOf(parts=(C2_RANGE, C2_ACC))
"""C2: GMPO's ratios stay in a narrower range than GRPO's, at no loss of accuracy"""
C3_CONDITION = stats.AtLeast("engine/trainer k3 KL per token, W8A8 engine / bf16 engine (seed means, "
                             "benchmarks/engine_mismatch_cpu.json)", at_least=1.0, fmt=".2f")
C3_CONDITION_MAX = stats.AtLeast("engine/trainer max |log ratio|, W8A8 engine / bf16 engine (seed means, "
                                 "benchmarks/engine_mismatch_cpu.json)", at_least=1.0, fmt=".2f")
C3_NOT_WORSE = stats.NotWorse("held-out accuracy (T = 1), W8A8 + TIS - float32 engine")
C3_GAIN = stats.Greater("held-out accuracy (T = 1), W8A8 + TIS - W8A8 without correction", "accuracy")
C3_RULE = stats.AllOf(parts=(C3_NOT_WORSE, C3_GAIN), conditions=(C3_CONDITION, C3_CONDITION_MAX))
"""C3: TIS recovers the float32 engine's accuracy and beats no correction, if the 8-bit engine's mismatch is larger
than the bf16 engine's on both measures DESIGN names, mean KL and max |log ratio| (else not tested)"""
RULES = {"C1": C1_RULE, "C2": C2_RULE, "C3": C3_RULE}
"""claim id -> the rule that judges it and writes its criterion"""

MISMATCH_FILE = "benchmarks/engine_mismatch_cpu.json"
"""the engines' measured mismatch on one rollout per seed (`benchmarks/old_logps_drift.py`), C3's condition"""
RUN_MISMATCH = ("mismatch/kl", "mismatch/max_log_ratio", "mismatch/clipped_share")
"""what the W8A8 runs log at every update (`gpolib.objectives.mismatch_diagnostics`)"""


# ---------------------------------------------------------------- the surrogates on single tokens

def token_gradients(ratios, advantages, objectives=("grpo", "dapo", "cispo", "gmpo")) -> pd.DataFrame:
    """d f / d log pi_theta of one token with ratio r = pi_theta / pi_old and advantage A, per objective (its preset's
    `LossConfig`), by autograd through its surrogate's `terms` on one-token responses (GMPO's geometric mean of
    one token is its own clipped ratio). Rows (r, A); columns the objectives. By hand: r A inside the clip, 0 where
    PPO's clip binds (r > 1 + eps_high with A > 0, r < 1 - eps_low with A < 0); CISPO clip(r) A always."""
    r = torch.tensor([float(x) for x in ratios for _ in advantages], dtype=torch.float64).unsqueeze(1)  # (N, 1)
    adv = torch.tensor([float(a) for _ in ratios for a in advantages], dtype=torch.float64)  # (N,)
    old = torch.zeros_like(r)
    out = {"r": r[:, 0].tolist(), "A": adv.tolist()}
    for name in objectives:
        cfg = presets.get(name).loss
        logps = torch.log(r).requires_grad_(True)
        f = cfg.surrogate.terms(logps, old, torch.exp(logps - old), adv, torch.ones_like(r))  # (N, 1)
        (g,) = torch.autograd.grad(f.sum(), logps)
        out[name] = g[:, 0].tolist()
    return pd.DataFrame(out).set_index(["r", "A"])


# ---------------------------------------------------------------- evidence from the runs

LABELS = {"grpo": "GRPO, float32 engine", "grpo_w8a8": "W8A8 engine", "grpo_w8a8_tis": "W8A8 engine + TIS"}
"""arm -> its name in figures (`runs.relabel`): C3's three GRPO arms differ only in their engine, so each gets its
own colour"""
CLAIM_ARMS = {"C1": ("dapo_mu4", "cispo_mu4"), "C2": ("grpo_mu4", "gmpo_mu4"),
              "C3": ("grpo", "grpo_w8a8", "grpo_w8a8_tis"), "C4": ()}
"""claim id -> the arms whose runs are its evidence"""
PAIRS = {
    "C1": {"accuracy, CISPO - DAPO": ("acc_cispo", "acc_dapo")},
    "C2": {"log-ratio range (tokens with a gradient), GRPO - GMPO": ("range_grpo", "range_gmpo"),
           "log-ratio std (all tokens), GRPO - GMPO": ("log_std_grpo", "log_std_gmpo"),
           "accuracy, GMPO - GRPO": ("acc_gmpo", "acc_grpo")},
    "C3": {"accuracy, W8A8 + TIS - float32 engine": ("acc_tis", "acc_fp32"),
           "accuracy, W8A8 + TIS - W8A8": ("acc_tis", "acc_w8a8"),
           "accuracy, W8A8 - float32 engine": ("acc_w8a8", "acc_fp32")},
}
"""claim id -> label -> (evidence key A, key B): the paired differences shown beside its verdict (`paired_table`)"""


def _run_mean(metrics: dict, arm: str, key, seeds) -> list:
    """Per seed: mean of `key` over the run's steps that logged it (NaN where none did); `key` a tuple of names: the
    first the run logged."""
    out = []
    for s in seeds:
        rows = metrics[run_key(arm, s)]
        names = (key,) if isinstance(key, str) else key
        out.append(mean_over(rows, next((k for k in names if any(k in row for row in rows)), names[0])))
    return out


CISPO_CAPPED = ("capped/frac", "clip/frac")
"""CISPO's share of tokens whose IS weight its cap holds: its own name, and the name its runs logged before each
surrogate reported only its own diagnostics (the committed runs; the same count)"""


def c1_evidence(summaries: dict, metrics: dict, seeds) -> dict:
    """C1 per seed: end accuracy of CISPO and DAPO (no dynamic sampling), and the run mean of the per-step share of
    tokens whose gradient DAPO's clip removes (`clip/frac`) and of tokens whose IS weight CISPO caps (gradient kept,
    `CISPO_CAPPED`)."""
    return {"acc_cispo": end_accuracy(summaries, "cispo_mu4", seeds), "acc_dapo": end_accuracy(summaries, "dapo_mu4", seeds),
            "clip_share_dapo": _run_mean(metrics, "dapo_mu4", "clip/frac", seeds),
            "clip_share_cispo": _run_mean(metrics, "cispo_mu4", CISPO_CAPPED, seeds)}


def c2_evidence(summaries: dict, metrics: dict, seeds) -> dict:
    """C2 per seed: the run mean of `ratio/log_range` (max - min of log r over the tokens with a gradient, pooled over
    a step's mu minibatches) and of `ratio/log_std` (all tokens) of GRPO and GMPO at mu = 4; their end accuracies."""
    return {"range_grpo": _run_mean(metrics, "grpo_mu4", "ratio/log_range", seeds),
            "range_gmpo": _run_mean(metrics, "gmpo_mu4", "ratio/log_range", seeds),
            "acc_grpo": end_accuracy(summaries, "grpo_mu4", seeds), "acc_gmpo": end_accuracy(summaries, "gmpo_mu4", seeds),
            "log_std_grpo": _run_mean(metrics, "grpo_mu4", "ratio/log_std", seeds),
            "log_std_gmpo": _run_mean(metrics, "gmpo_mu4", "ratio/log_std", seeds)}


def engine_mismatch(root=None) -> dict:
    """engine ('fp32', 'bf16', 'int8', 'w8a8') -> {'kl': [per seed k3 KL per token], 'max_log_ratio': [...],
    'mean_abs': [...]}, from `MISMATCH_FILE` (one rollout of 16 prompts x 8 per seed)."""
    data = json.loads((Path(root) if root else paths.repo_root()).joinpath(MISMATCH_FILE).read_text())
    seeds = lambda e: sorted(data["engines"][e], key=int)  # noqa: E731
    return {e: {"kl": [data["engines"][e][s]["token/k3_kl"] for s in seeds(e)],
                "max_log_ratio": [data["engines"][e][s]["token/max_abs"] for s in seeds(e)],
                "mean_abs": [data["engines"][e][s]["token/mean_abs"] for s in seeds(e)]} for e in data["engines"]}


def mismatch_table(mismatch: dict) -> pd.DataFrame:
    """`engine_mismatch` as rows engine, columns the seed means of k3 KL, max |log ratio| and mean |log ratio|."""
    return pd.DataFrame({e: {k: sum(v) / len(v) for k, v in m.items()} for e, m in mismatch.items()}).T.rename(
        columns={"kl": "k3 KL per token", "max_log_ratio": "max |log ratio|", "mean_abs": "mean |log ratio|"})


def c3_evidence(summaries: dict, metrics: dict, seeds, mismatch: dict) -> dict:
    """C3 per seed: end accuracy of GRPO on the float32 engine, the W8A8 engine and W8A8 + TIS; the benchmark's
    k3 KL and max log ratio of the W8A8 and bf16 engines (`engine_mismatch`); the W8A8 runs' own run-mean KL and
    share of tokens above the cap C = 2."""
    return {"acc_fp32": end_accuracy(summaries, "grpo", seeds), "acc_w8a8": end_accuracy(summaries, "grpo_w8a8", seeds),
            "acc_tis": end_accuracy(summaries, "grpo_w8a8_tis", seeds),
            "kl_w8a8": mismatch["w8a8"]["kl"], "kl_bf16": mismatch["bf16"]["kl"],
            "max_log_ratio_w8a8": mismatch["w8a8"]["max_log_ratio"], "max_log_ratio_bf16": mismatch["bf16"]["max_log_ratio"],
            "run_kl_w8a8": _run_mean(metrics, "grpo_w8a8", "mismatch/kl", seeds),
            "run_kl_tis": _run_mean(metrics, "grpo_w8a8_tis", "mismatch/kl", seeds),
            "run_capped_tis": _run_mean(metrics, "grpo_w8a8_tis", "mismatch/clipped_share", seeds)}


def evidence_table(e: dict) -> pd.DataFrame:
    """An evidence dict as a table: rows the seed index, columns its keys (NaN where a key has fewer values)."""
    return pd.DataFrame({k: pd.Series(v, dtype=float) for k, v in e.items()}).rename_axis("seed index")


def paired_table(e: dict, pairs: dict) -> pd.DataFrame:
    """label -> (key A, key B) of `PAIRS`: mean of A_s - B_s over seeds and its 95% t-interval (NaN with one seed)."""
    rows = {}
    for label, (a, b) in pairs.items():
        iv = stats.paired(e[a], e[b])
        rows[label] = {"mean": iv.mean, "95% lo": iv.lo, "95% hi": iv.hi, "n": iv.n}
    return pd.DataFrame.from_dict(rows, orient="index").astype(float)


# ---------------------------------------------------------------- verdicts

def verdict_c1(e: dict) -> stats.Verdict:
    m = stats.seed_mean
    return C1_RULE.judge(e["acc_cispo"], e["acc_dapo"]).with_note(
        f"tokens whose gradient DAPO's clip removes, run mean of the per-step share {m(e['clip_share_dapo'], '.3%')}; "
        f"tokens whose IS weight CISPO caps (gradient kept) {m(e['clip_share_cispo'], '.3%')}; accuracy (seed means) "
        f"CISPO {m(e['acc_cispo'])}, DAPO {m(e['acc_dapo'])}; loss parity with TRL's loss_type='cispo' and verl's "
        "'cispo': tests/test_trl_family_parity.py, tests/test_verl_parity.py")


def verdict_c2(e: dict) -> stats.Verdict:
    m = stats.seed_mean
    return C2_RULE.judge([C2_RANGE.judge(e["range_grpo"], e["range_gmpo"]),
                          C2_ACC.judge(e["acc_gmpo"], e["acc_grpo"])]).with_note(
        f"seed means: range GRPO {m(e['range_grpo'], '.4f')}, GMPO {m(e['range_gmpo'], '.4f')}; std of log r over "
        f"all tokens GRPO {m(e['log_std_grpo'], '.4f')}, GMPO {m(e['log_std_gmpo'], '.4f')}; accuracy GRPO "
        f"{m(e['acc_grpo'])}, GMPO {m(e['acc_gmpo'])}; parity with TRL's GMPO and verl's geo_mean: "
        "tests/test_trl_family_parity.py, tests/test_verl_parity.py")


def kl_ratio(e: dict, key: str = "kl") -> float:
    """C3's condition: the W8A8 engine's mismatch over the bf16 engine's (seed means), for `key` "kl" (mean k3 KL)
    or "max_log_ratio" (max |log ratio|)."""
    a, b = e[f"{key}_w8a8"], e[f"{key}_bf16"]
    return (sum(a) / len(a)) / (sum(b) / len(b))


def _larger(a: list, b: list) -> str:
    """'k of n seeds': how many seeds' values of `a` exceed `b`'s (paired by position)."""
    return f"{sum(x > y for x, y in zip(a, b))} of {min(len(a), len(b))} seeds"


def verdict_c3(e: dict) -> stats.Verdict:
    m = stats.seed_mean
    return C3_RULE.judge([C3_NOT_WORSE.judge(e["acc_tis"], e["acc_fp32"]), C3_GAIN.judge(e["acc_tis"], e["acc_w8a8"])],
                         conditions=[C3_CONDITION.judge(kl_ratio(e)),
                                     C3_CONDITION_MAX.judge(kl_ratio(e, "max_log_ratio"))]).with_note(
        f"k3 KL per token W8A8 {m(e['kl_w8a8'], '.2e')} vs bf16 {m(e['kl_bf16'], '.2e')} (larger in "
        f"{_larger(e['kl_w8a8'], e['kl_bf16'])}); max |log ratio| {m(e['max_log_ratio_w8a8'], '.2f')} vs "
        f"{m(e['max_log_ratio_bf16'], '.2f')} (larger in {_larger(e['max_log_ratio_w8a8'], e['max_log_ratio_bf16'])}); "
        f"in training the W8A8 runs' k3 KL {m(e['run_kl_w8a8'], '.2e')}, share of tokens "
        f"above C = 2 under TIS {m(e['run_capped_tis'], '.1e')}; accuracy (seed means) float32 {m(e['acc_fp32'])}, "
        f"W8A8 {m(e['acc_w8a8'])}, W8A8 + TIS {m(e['acc_tis'])}; parity of the weights with TRL's "
        "vllm_importance_sampling_mode: tests/test_trl_family_parity.py")


def rloo_table(rewards, G: int) -> pd.DataFrame:
    """C4 for one group: r_i, the leave-one-out advantage by hand r_i - (1/(G-1)) sum_{j != i} r_j (RLOO, Ahmadian
    et al. 2024 Sec. 3), `group_advantages(., 'rloo')`, and Dr. GRPO's centred reward x G/(G-1), with the error."""
    r = torch.as_tensor(rewards, dtype=torch.float64)
    if r.numel() != G:
        raise ValueError(f"one group of G={G} rewards expected, got {r.numel()}")
    hand = [float(r[i] - (r.sum() - r[i]) / (G - 1)) for i in range(G)]
    code = group_advantages(r, G, "rloo").tolist()
    dr = (group_advantages(r, G, "none") * G / (G - 1)).tolist()
    err = [max(abs(h - c), abs(h - d)) for h, c, d in zip(hand, code, dr)]
    return pd.DataFrame({"reward": r.tolist(), "RLOO (hand)": hand, "group_advantages 'rloo'": code,
                         "Dr. GRPO x G/(G-1)": dr, "abs err": err})


def verdict_c4(e: dict) -> Exact:
    return exact([e["rloo_err"] <= EXACT_TOL]), f"max |RLOO - centred reward x G/(G-1)| = {e['rloo_err']:.1e}"


VERDICTS = {"C1": verdict_c1, "C2": verdict_c2, "C3": verdict_c3, "C4": verdict_c4}


# ---------------------------------------------------------------- what the notebook may say, from the verdicts

def _say(v: stats.Verdict, yes: str, no: str, unsure: str, fmt: str = "+.3f") -> str:
    """One judged comparison in words, by its word (reproduced: `yes`, not reproduced: `no`, else `unsure`), with
    its paired mean and interval."""
    iv = v.interval
    if iv is None:
        return f"{unsure} (a seed has no value)"
    ci = f"95% CI [{format(iv.lo, fmt)}, {format(iv.hi, fmt)}]" if iv.lo is not None else "one seed: no interval"
    if v.null is not None and v.null.equivalent:  # not reproduced because the difference is within +-delta
        return (f"{unsure}, and any difference is within +-{format(v.null.delta, fmt.lstrip('+'))} (equivalent: "
                f"{format(iv.mean, fmt)}, {ci})")
    words = {stats.REPRODUCED: yes, stats.NOT: no}.get(v.word, unsure)
    return f"{words} ({format(iv.mean, fmt)}, {ci})"


def _c1(v: stats.Verdict, e: dict) -> str:
    acc = _say(v, "CISPO ended above DAPO in held-out accuracy", "CISPO ended below DAPO in held-out accuracy",
               "our seeds do not tell CISPO's held-out accuracy from DAPO's")
    return (f"C1 ({v.word}): {acc}. DAPO's clip removed the gradient of {stats.seed_mean(e['clip_share_dapo'], '.3%')} "
            "of the tokens of a step (run mean); CISPO keeps the gradient of such tokens.")


def _c2(v: stats.Verdict, e: dict) -> str:
    g, p, margin = presets.get("grpo").loss, presets.get("gmpo").loss, C2_ACC.margin
    narrow = _say(v.parts[0], "GMPO's log ratios spanned a narrower range than GRPO's",
                  "GMPO's log ratios spanned a wider range than GRPO's",
                  "our seeds do not tell GMPO's range of log ratios from GRPO's", "+.4f")
    acc = _say(v.parts[1], f"GMPO's accuracy was within {margin:g} of GRPO's or above",
               f"GMPO's accuracy was more than {margin:g} below GRPO's",
               f"our seeds cannot tell whether GMPO's accuracy is within {margin:g} of GRPO's")
    p, g = p.surrogate, g.surrogate
    clips = (f"[{-p.log_clip_low:g}, {p.log_clip_high:g}] (GMPO) and [{math.log(1 - g.eps_low):.3f}, "
             f"{math.log(1 + g.eps_high):.3f}] (GRPO)")
    return (f"C2 ({v.word}): {narrow} (tokens with a gradient, GRPO - GMPO); {acc}. The clips bound the log ratios "
            f"that keep a gradient, on the side the advantage pushes, at {clips}.")


def _c3(v: stats.Verdict, e: dict) -> str:
    if v.word == stats.NOT_TESTED:
        return (f"C3 (not tested): the W8A8 engine's mismatch is not larger than the bf16 engine's on both measures: "
                f"k3 KL {kl_ratio(e):.2f}x, max |log ratio| {kl_ratio(e, 'max_log_ratio'):.2f}x.")
    margin = C3_NOT_WORSE.margin
    tis = _say(v.parts[0], f"with TIS, GRPO on the W8A8 engine was within {margin:g} of the float32 engine's accuracy "
               "or above", f"with TIS it was more than {margin:g} below the float32 engine",
               f"our seeds cannot tell whether TIS is within {margin:g} of the float32 engine")
    gain = _say(v.parts[1], "TIS beat no correction", "TIS ended below no correction",
                "our seeds do not tell TIS from no correction")
    base = _say(C3_GAIN.judge(e["acc_w8a8"], e["acc_fp32"]), "without correction the W8A8 engine ended above the "
                "float32 engine", "without correction the W8A8 engine ended below the float32 engine",
                "without correction our seeds do not tell the W8A8 engine from the float32 engine")
    return (f"C3 ({v.word}): the W8A8 engine's k3 KL is {kl_ratio(e):.2f}x the bf16 engine's; {tis}; {gain}; "
            f"{base}. TIS capped {stats.seed_mean(e['run_capped_tis'], '.1e')} of the tokens (run mean).")


def statements(verdicts: dict, evidence: dict) -> list:
    """One sentence per claim, no stronger than its verdict (`report.judge`, after `stats.for_profile`): the smoke
    profile says nothing; C4 is exact."""
    said = {"C1": _c1, "C2": _c2, "C3": _c3}
    out = []
    for cid, v in verdicts.items():
        if v.word == stats.SMOKE:
            out.append(f"{cid}: smoke run, no statement (the full profile is the replication).")
        else:
            out.append(said[cid](v, evidence[cid]) if cid in said else f"{cid} ({v.word}): {v.text}.")
    return out


# ---------------------------------------------------------------- the workbook's objectives on the three axes

AGGREGATION = {"seq_mean_token_mean": "mean over responses of each one's token mean",
               "token_mean": "mean over the batch's tokens",
               "seq_mean_token_sum_norm": "token sum / (B L_max), a constant"}
"""LossConfig.aggregation -> in words"""


def axes(cfg) -> dict:
    """One objective on the three axes (ratio granularity, sampling, clipping), with its aggregation and advantage,
    read from its TrainConfig (not typed by hand)."""
    lc = cfg.loss
    granularity = lc.surrogate.granularity or {"token": "token", "sequence": "sequence (length-normalised)"}.get(
        lc.ratio_level, lc.ratio_level)
    sampling = f"all G = {cfg.group_size}"
    if cfg.dynamic_sampling:
        sampling = f"dynamic: only groups of mixed reward, G = {cfg.group_size}"
    if cfg.gfpo_k:
        best = {"length": "shortest", "efficiency": "most reward per token"}[cfg.gfpo_metric]
        sampling = f"filter: keep the {cfg.gfpo_k} {best} of G = {cfg.group_size}"
    if lc.top_entropy_quantile < 1:
        sampling = f"all G = {cfg.group_size}; top {lc.top_entropy_quantile:.0%} tokens by entropy"
    if lc.off_policy_mask_threshold is not None:
        sampling += f"; off-policy mask, delta {lc.off_policy_mask_threshold:g}"
    if cfg.advantage_estimator == "gae":
        advantage = "GAE from a value model"
    else:
        advantage = {"group": "(r - mean) / std of the group", "none": "r - mean of the group",
                     "rloo": "r - mean of the other G - 1", "batch": "(r - mean) / std of the batch"}[cfg.adv_scale]
    return {"granularity": granularity, "sampling": sampling, "clipping": lc.surrogate.clipping(lc),
            "aggregation": AGGREGATION[lc.aggregation], "advantage": advantage}


def axes_table() -> pd.DataFrame:
    """Every preset of the workbook (and RLOO, an advantage on Dr. GRPO's loss) on the three axes, with its notebook
    (`presets.RECIPES`)."""
    rows = {name: {**axes(presets.get(name)), "notebook": r.notebook or "-"} for name, r in presets.RECIPES.items()}
    rows["rloo"] = {**axes(presets.get("dr_grpo", adv_scale="rloo")), "notebook": "09 (C4)"}
    return pd.DataFrame.from_dict(rows, orient="index")
