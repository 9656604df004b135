"""Notebook 05, GFPO (Shrivastava et al., 2025): the filter and its length measures (Sec. 3, Eq. 3-4).

- the retained set S of one group and its advantages next to a hand formula, `filter_demo`;
- the arms compared, `ARMS` (GRPO = notebook 01's runs, `HOME`); length reduction vs GRPO, 1 - L_variant / L_GRPO,
  `length_reduction`; excess length reduction (Eq. 4), `elr`; held-out accuracy, length, reduction and ELR per run,
  `variant_table`;
- F1 and F2 over seeds, paired by seed, resting on the premise that GRPO lengthens answers (`stats`):
  `f_evidence`, `verdict_f1` (Shortest 4/24's ELR and accuracy), `verdict_f2` (ELR at k = 4, G = 24 vs 8);
  `ELR_WHY` says why an ELR is missing; the variant table averaged over seeds, `seed_table`; what the premise
  measured, in words, `premise_note`;
- beside the verdicts: held-out accuracy of each variant minus GRPO's with its paired interval and non-inferiority
  word, `accuracy_vs_grpo`; ELR per variant with its interval beside the paper's averages, `elr_table`, drawn by
  `elr_plot` (per-seed dots, the paper's value marked) and, at k = 4 against G, `elr_vs_group_plot`; generation
  cost per step from the runs' metrics, `generation_cost`;
- where the length went, from completions sampled on held-out prompts with each final policy (`heldout_completions`):
  mean length by difficulty bucket, `bucket_lengths`; tokens per kind of line and product lines written long or
  direct, `line_budget`; both per run, then `arm_means` over seeds, and `vs_grpo`: variant - GRPO paired by seed.
Derivations live in notebook 05; docstrings name the formula they compute.
"""
from __future__ import annotations

import math
import statistics

import pandas as pd
import torch

from .. import presets
from ..groups import gfpo_advantages, gfpo_keep, gfpo_scores
from ..objectives import ADV_EPS
from ..tasks import line_kinds, product_steps
from . import grpo, regime, runs, stats
from .runs import run_key

GRPO_LOSS = presets.get("grpo").loss
"""notebook 01's GRPO loss (DeepSeekMath Eq. 3: sample-level mean, clip 0.2): every GFPO arm takes it, so that
against notebook 01's GRPO runs the filter (G, k, metric) is the only difference"""


def _filtered(group_size: int, k: int, metric: str = "length", **more) -> dict:
    """An arm of the `gfpo` preset with GRPO's loss: sample G = group_size per prompt, keep k by `metric`."""
    return {"preset": "gfpo", "group_size": group_size, "gfpo_k": k, "gfpo_metric": metric, "loss": GRPO_LOSS,
            **more}


ARMS = {
    # the baseline: notebook 01's GRPO runs (G = 8, no filter), the same configuration, not trained here (`HOME`)
    "grpo": grpo.ARMS["grpo"],
    "gfpo-k4-g8-short": _filtered(8, 4),
    "gfpo-k4-g16-short": _filtered(16, 4),
    "gfpo-k4-g24-short": _filtered(24, 4),
    "gfpo-k8-g16-short": _filtered(16, 8),
    "gfpo-k8-g16-eff": _filtered(16, 8, "efficiency"),
    # GFPO Alg. 2: G = 16, k from the prompt's mean-reward quartile over a running record of group means:
    # easiest quartile keeps gfpo_k = 4, the next 6, the two hardest 8 (harder prompts keep more answers)
    "gfpo-adaptive-g16": _filtered(16, 4, gfpo_adaptive=True),
}
"""run name -> preset and fields: group size G, kept k, ranking metric (equal prompts per step for all)"""
HOME = {"grpo": "01_grpo"}
"""the GRPO arm is notebook 01's runs (same budget, same configuration): trained once, reused here"""
LABELS = {"grpo": "grpo G8", "gfpo-k4-g8-short": "shortest 4/8", "gfpo-k4-g16-short": "shortest 4/16",
          "gfpo-k4-g24-short": "shortest 4/24", "gfpo-k8-g16-short": "shortest 8/16",
          "gfpo-k8-g16-eff": "token eff. 8/16", "gfpo-adaptive-g16": "adaptive G16"}
"""arm -> its name in figures: the GFPO variants' names do not start with 'gfpo', so each gets its own colour"""
F1_ARM = "gfpo-k4-g24-short"
"""the arm F1 judges: Shortest 4/24, the paper's headline (ELR 46-71%)"""
PREMISE = stats.Greater("GRPO's held-out length over the base's, L_GRPO - L_SFT (tokens)", "length", fmt="+.1f")
"""F1 and F2 rest on GRPO lengthening answers (A > B, paired by seed): without excess length Eq. 4 has nothing to divide"""
F1_ELR = stats.growth("ELR of Shortest 4/24, (L_GRPO - L_GFPO) / (L_GRPO - L_SFT), GFPO Eq. 4", measure="elr",
                      at_least=0.46, fmt="+.1%")
F1_ACC = stats.NotWorse("held-out accuracy (T = 1), Shortest 4/24 - GRPO")
F1_RULE = stats.AllOf(parts=(F1_ELR, F1_ACC), premises=(PREMISE,))
F2_ARMS = ("gfpo-k4-g24-short", "gfpo-k4-g8-short")
"""F2 at fixed k = 4: G = 24 against G = 8 (4/16 shown between)"""
K4_ARMS = {8: "gfpo-k4-g8-short", 16: "gfpo-k4-g16-short", 24: "gfpo-k4-g24-short"}
"""G -> the Shortest arm keeping k = 4 of G (F2's axis)"""
F2_MORE = stats.Greater("ELR at fixed k = 4, G = 24 - G = 8", "elr", fmt="+.1%")
F2_RULE = stats.AllOf(parts=(F2_MORE,), premises=(PREMISE,))
RULES = {"F1": F1_RULE, "F2": F2_RULE}
"""claim id -> the rule that judges it and writes its criterion"""
PAPER_ELR = {"gfpo-k4-g24-short": (0.582, "4/24"), "gfpo-k8-g16-short": (0.297, "8/16"),
             "gfpo-k8-g16-eff": (0.795, "token efficiency 8/16"), "gfpo-adaptive-g16": (0.460, "adaptive difficulty")}
"""arm -> (the paper's average ELR over its benchmarks, the paper's setting); 4/8 and 4/16: no number in the paper's
tables of averages"""
ELR_WHY = "GRPO did not lengthen answers over the base (L_GRPO <= L_SFT): Eq. 4 has no excess length to divide by"
"""why an ELR is null in the evidence (`report.record(..., why={"elr": ELR_WHY})`)"""


def relabel(by_run: dict) -> dict:
    """Keys "<arm>" or "<arm>/seed<s>" renamed with `LABELS` (figures); other keys and the values unchanged."""
    return runs.relabel(by_run, LABELS)


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
    per = [variant_table({arm: summaries[run_key(arm, s)] for arm in ARMS}, baseline) for s in seeds]
    return sum(per[1:], per[0]) / len(per)


# ---------------------------------------------------------------- verdicts

def _at(summaries: dict, arm: str, seed: int, key: str, when: str = "end"):
    """`key` of the held-out evaluation at the start or end of run "<arm>/seed<seed>"."""
    return summaries[run_key(arm, seed)][f"eval_{when}"][key]


def _present(summaries: dict, seeds) -> list:
    """The variants (arms other than GRPO) with a summary in every seed, in `ARMS` order."""
    return [arm for arm in ARMS if arm != "grpo" and all(run_key(arm, s) in summaries for s in seeds)]


def f_evidence(summaries: dict, seeds) -> dict:
    """F1/F2 evidence per seed (held-out values at the end of each run): the base's length (GRPO's start), GRPO's
    length and accuracy, each present variant's length, accuracy and ELR (NaN where GRPO did not lengthen answers,
    see `ELR_WHY`), and Shortest 4/24's accuracy (`acc_k4_g24`) once its runs exist."""
    seeds = list(seeds)
    out = {"len_base": [_at(summaries, "grpo", s, "len/mean", "start") for s in seeds],
           "len_grpo": [_at(summaries, "grpo", s, "len/mean") for s in seeds],
           "acc_grpo": [_at(summaries, "grpo", s, "acc/sample") for s in seeds]}
    variants = _present(summaries, seeds)
    out["len"] = {arm: [_at(summaries, arm, s, "len/mean") for s in seeds] for arm in variants}
    out["acc"] = {arm: [_at(summaries, arm, s, "acc/sample") for s in seeds] for arm in variants}
    out["elr"] = {arm: list(map(elr, out["len_grpo"], out["len"][arm], out["len_base"])) for arm in variants}
    if F1_ARM in variants:
        out["acc_k4_g24"] = out["acc"][F1_ARM]
    return out


def _premise(e: dict) -> stats.Verdict:
    return PREMISE.judge(e["len_grpo"], e["len_base"])


def _elr_note(e: dict) -> str:
    """Every arm's ELR (seed mean) beside the paper's for that setting."""
    return "ELR per arm: " + ", ".join(
        f"{LABELS.get(arm, arm)} {stats.seed_mean(v, '+.1%')}"
        + (f" (paper {PAPER_ELR[arm][1]}: {PAPER_ELR[arm][0]:.1%})" if arm in PAPER_ELR else "")
        for arm, v in e["elr"].items() if isinstance(v, list))  # '<arm>_why' keys: jsonio's reasons for nulls


def _not_run(claim: str, rule, e: dict, missing: list) -> stats.Verdict:
    """'not yet run': the arms the criterion judges have no runs; the premise on the runs there is, in the text."""
    names = ", ".join(LABELS.get(a, a) for a in missing)
    return stats.Verdict(stats.NOT_RUN, f"{claim}: no runs of {names}; premise: {_premise(e).text}",
                         rule.criterion, parts=(_premise(e),))


def verdict_f1(e: dict) -> stats.Verdict:
    """F1: `F1_RULE`, Shortest 4/24's ELR per seed and its accuracy minus GRPO's paired by seed, if GRPO lengthens
    answers (the premise); 'not yet run' without the 4/24 runs."""
    if F1_ARM not in e["elr"] or "acc_k4_g24" not in e:
        return _not_run("F1", F1_RULE, e, [F1_ARM])
    v = F1_RULE.judge([F1_ELR.judge(e["elr"][F1_ARM]), F1_ACC.judge(e["acc_k4_g24"], e["acc_grpo"])],
                      [_premise(e)])
    return v.with_note(_elr_note(e))


def verdict_f2(e: dict) -> stats.Verdict:
    """F2: `F2_RULE`, ELR of 4/24 minus that of 4/8 paired by seed, if GRPO lengthens answers; 'not yet run'
    without those runs."""
    missing = [arm for arm in F2_ARMS if arm not in e["elr"]]
    if missing:
        return _not_run("F2", F2_RULE, e, missing)
    v = F2_RULE.judge([F2_MORE.judge(e["elr"][F2_ARMS[0]], e["elr"][F2_ARMS[1]])], [_premise(e)])
    return v.with_note(_elr_note(e))


VERDICTS = {"F1": verdict_f1, "F2": verdict_f2}


def premise_note(e: dict, steps: int) -> str:
    """The premise in words, from the runs: GRPO's held-out length over the base's after `steps` steps (seed means),
    the excess as a share of the base length, and the premise's verdict line (its interval)."""
    base, grpo = statistics.fmean(e["len_base"]), statistics.fmean(e["len_grpo"])
    return (f"after {steps} steps GRPO's held-out answers average {grpo:.1f} tokens against the base's {base:.1f} "
            f"(excess {grpo - base:+.1f} tokens, {(grpo - base) / base:+.1%} of the base): this excess is the "
            f"denominator of every ELR. Premise: {_premise(e).line()}")


def _interval_words(v: stats.Verdict, fmt: str) -> str:
    """'+0.55 (95% CI [+0.43, +0.67], n = 3): reproduced', or the verdict's own text when it has no interval."""
    iv = v.interval
    if iv is None or iv.lo is None:
        return f"{v.text} ({v.word})"
    return (f"{format(iv.mean, fmt)} (95% CI [{format(iv.lo, fmt)}, {format(iv.hi, fmt)}], n = {iv.n}): "
            f"{v.word}")


def f_statement(v1: stats.Verdict, v2: stats.Verdict, e: dict, steps: int) -> str:
    """What notebook 05 may say about F1 and F2 in the paper's terms, from the verdicts (`verdict_f1`, `verdict_f2`
    after `stats.for_profile`) and their evidence, never stronger than the words: the paper's number, ours with
    its interval and word for each part, and the premise every ELR divides by."""
    if stats.SMOKE in (v1.word, v2.word):
        return "Smoke run: no statement about F1 or F2 (the full profile is the replication)."
    if stats.NOT_RUN in (v1.word, v2.word):
        return f"F1: {v1.word} ({v1.text}). F2: {v2.word} ({v2.text})."
    elr_part, acc_part, premise = v1.parts
    paper, setting = PAPER_ELR[F1_ARM]
    k4 = ", ".join(f"4/{g} {stats.seed_mean(e['elr'][arm], '+.1%')}" for g, arm in K4_ARMS.items() if arm in e["elr"])
    return (f"The paper's Shortest {setting} removes {paper:.1%} of GRPO's excess length on average (GFPO Eq. 4) at "
            f"matched accuracy. Here, after {steps} steps, GRPO's excess length over the base (tokens, the premise) is "
            f"{_interval_words(premise, '+.1f')}. F1: Shortest 4/24's ELR "
            f"{_interval_words(elr_part, '+.1%')}; its held-out accuracy minus GRPO's "
            f"{_interval_words(acc_part, '+.3f')}; F1 {v1.word}. F2: ELR at k = 4 (seed means {k4}); 4/24 - 4/8 "
            f"{_interval_words(v2.parts[0], '+.1%')}; F2 {v2.word}.")


# ---------------------------------------------------------------- beside the verdicts: intervals per variant

def _interval_row(iv: stats.Interval) -> dict:
    return {"mean": iv.mean, "95% lo": iv.lo, "95% hi": iv.hi, "n": iv.n}


def accuracy_vs_grpo(summaries: dict, seeds, key: str = "acc/sample") -> pd.DataFrame:
    """Held-out `key` at the end of each variant minus GRPO's, paired by seed: rows variants; columns the
    seed means of both, the mean difference and its 95% t-interval (n-1 df; no interval from one seed), and the
    word of non-inferiority (`stats.NotWorse`, margin 0.03: F1's accuracy rule applied to every arm)."""
    seeds = list(seeds)
    grpo = [_at(summaries, "grpo", s, key) for s in seeds]
    rows = {}
    for arm in _present(summaries, seeds):
        ours = [_at(summaries, arm, s, key) for s in seeds]
        iv = stats.paired(ours, grpo)
        rows[arm] = {key: sum(ours) / len(ours), f"{key} GRPO": sum(grpo) / len(grpo),
                     **{f"diff {k}": v for k, v in _interval_row(iv).items()},
                     "not worse (margin 0.03)": stats.NotWorse(f"{key}, {arm} - GRPO").judge(ours, grpo).word}
    return pd.DataFrame.from_dict(rows, orient="index")


def elr_table(e: dict) -> pd.DataFrame:
    """ELR of each variant (`f_evidence(...)["elr"]`, one per seed): mean and 95% t-interval over seeds beside the
    paper's average and setting (`PAPER_ELR`). NaN throughout when an ELR is undefined in any seed (`ELR_WHY`)."""
    rows = {}
    for arm, vals in e["elr"].items():
        paper, setting = PAPER_ELR.get(arm, (float("nan"), ""))
        defined = all(v is not None and math.isfinite(v) for v in vals)
        iv = _interval_row(stats.mean_interval(vals)) if defined else {
            "mean": float("nan"), "95% lo": None, "95% hi": None, "n": len(vals)}
        rows[arm] = {**{f"ELR {k}": v for k, v in iv.items()}, "ELR per seed": [round(v, 3) for v in vals],
                     "paper ELR": paper, "paper setting": setting}
    return pd.DataFrame.from_dict(rows, orient="index")


def _finite(vals) -> list:
    return [v for v in vals if v is not None and math.isfinite(v)]


def elr_plot(e: dict):
    """ELR per arm (`f_evidence(...)["elr"]`): a bar at the seed mean, a dot per seed, the paper's average ELR for
    that setting as a red diamond (`PAPER_ELR`), and F1's line at 0.46 dashed. Seeds without an ELR (`ELR_WHY`) get
    no dot, an arm without any no bar."""
    import matplotlib.pyplot as plt

    from . import plots
    arms = [a for a, v in e["elr"].items() if isinstance(v, list)]
    labels = [LABELS.get(a, a) for a in arms]
    colours = plots.palette(labels)
    fig, ax = plt.subplots(figsize=(max(4.5, 0.95 * len(arms) + 2), 3.6))
    for i, (arm, lab) in enumerate(zip(arms, labels)):
        vals = _finite(e["elr"][arm])
        if vals:
            ax.bar(i, statistics.fmean(vals), color=colours[lab], alpha=0.55, width=0.7)
            ax.scatter([i + 0.12 * (j - (len(vals) - 1) / 2) for j in range(len(vals))], vals, color="k", s=14, zorder=3,
                       label="our seeds" if i == 0 else None)
        if arm in PAPER_ELR:
            ax.scatter(i, PAPER_ELR[arm][0], marker="D", color="crimson", s=36, zorder=4,
                       label="paper (average)" if not any(a in PAPER_ELR for a in arms[:i]) else None)
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.axhline(F1_ELR.at_least, color="crimson", lw=0.8, ls="--", label="F1 line (4/24)")
    ax.set_xticks(range(len(arms)), labels, rotation=20)
    ax.set(ylabel="ELR = (L_GRPO - L_GFPO) / (L_GRPO - L_SFT)")
    ax.legend(fontsize=7)
    plots.title(ax, "F1", "excess length reduction per arm")
    fig.tight_layout()
    return fig


def elr_vs_group_plot(e: dict):
    """F2: ELR of Shortest k = 4 against G (`K4_ARMS`): one thin line per seed (paired across G), the mean over seeds
    with its 95% t-interval (no interval from one seed)."""
    import matplotlib.pyplot as plt

    from . import plots
    groups = [g for g, arm in K4_ARMS.items() if arm in e["elr"]]
    per_g = [e["elr"][K4_ARMS[g]] for g in groups]
    fig, ax = plt.subplots(figsize=(4.6, 3.4))
    for s, seed_vals in enumerate(zip(*per_g)):
        ax.plot(groups, [math.nan if v is None else v for v in seed_vals], color="grey", lw=0.8, marker=".",
                label="per seed" if s == 0 else None)
    means = [stats.mean_interval(v) if len(_finite(v)) == len(v) else None for v in per_g]
    mid = [m.mean if m else math.nan for m in means]
    err = [[m.mean - m.lo if m and m.lo is not None else 0.0 for m in means],
           [m.hi - m.mean if m and m.hi is not None else 0.0 for m in means]]
    ax.errorbar(groups, mid, yerr=err, color="k", marker="o", capsize=3, label="mean, 95% interval")
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xticks(groups)
    ax.set(xlabel="G, responses sampled per prompt (k = 4 kept)", ylabel="ELR")
    ax.legend(fontsize=7)
    plots.title(ax, "F2", "sample more, keep 4: ELR against G")
    fig.tight_layout()
    return fig


COST_KEYS = {"samples / step": "gen/samples", "tokens / step": "gen/tokens", "rollout s / step": "time/rollout_s",
             "update s / step": "time/train_s"}
"""column -> metric: what each step generated and how long generating and updating took"""


def generation_cost(metrics: dict, seeds, baseline: str = "grpo") -> pd.DataFrame:
    """Per arm: `COST_KEYS` averaged over the steps of each run, then over seeds; the step's wall time (rollout +
    update) and each variant's samples and wall time as a multiple of the baseline's."""
    seeds = list(seeds)
    rows = {}
    for arm in ARMS:
        per_seed = [{col: statistics.fmean(float(m[k]) for m in metrics[run_key(arm, s)]) for col, k in COST_KEYS.items()}
                    for s in seeds]
        rows[arm] = {col: statistics.fmean(r[col] for r in per_seed) for col in COST_KEYS}
        rows[arm]["step s"] = rows[arm]["rollout s / step"] + rows[arm]["update s / step"]
    out = pd.DataFrame.from_dict(rows, orient="index")
    out["samples x GRPO"] = out["samples / step"] / out.loc[baseline, "samples / step"]
    out["step s x GRPO"] = out["step s"] / out.loc[baseline, "step s"]
    return out


# ---------------------------------------------------------------- where the length went (held-out completions)

def heldout_completions(cfg, run_dir, n_prompts: int, n_samples: int, seed: int, device: str = "cpu",
                        dtype: str = "float32"):
    """(rollout, tasks): `n_samples` responses at T = 1, top-p 1 to each of the first `n_prompts` held-out prompts,
    from the final policy of the run of `cfg` in `run_dir` (its LoRA adapter), or from the base model when
    `run_dir` is None. Torch seed `seed` before sampling: every policy sees the same prompts and random stream."""
    import torch

    from ..models import load_policy
    from ..rollout import generate
    from ..tasks import load_tasks, render_prompt
    from ..train import EVAL_TEMPERATURE

    if run_dir is None:
        model, tok = load_policy(cfg.model, lora_r=0, device=device, dtype=dtype)
    else:
        model, tok = regime.trained_policy(cfg, run_dir, device=device, dtype=dtype)
    tasks = load_tasks(cfg.task_eval)[:n_prompts]
    prompts = [render_prompt(tok, t["prompt"], cfg.prompt_style) for t in tasks]
    torch.manual_seed(seed)
    with torch.no_grad():
        ro = generate(model.eval(), tok, prompts, n_samples, cfg.max_new_tokens, EVAL_TEMPERATURE, 1.0, cfg.backend)
    return ro, tasks


def line_budget(texts: list) -> pd.DataFrame:
    """One row per completion: tokens (characters) per kind of line (`tasks.line_kinds`: long products, direct
    products, sums, answer, other), the number of product lines written long and direct, and of those the
    hard ones (a multiplicand of >= 3 digits)."""
    rows = []
    for t in texts:
        steps = product_steps(t)
        hard = [p for p in steps if p["digits"] >= 3]
        rows.append({**{f"{k} tokens": v for k, v in line_kinds(t).items()},
                     "long lines": sum(p["form"] == "long" for p in steps),
                     "direct lines": sum(p["form"] == "direct" for p in steps),
                     "hard long lines": sum(p["form"] == "long" for p in hard),
                     "hard direct lines": sum(p["form"] == "direct" for p in hard)})
    return pd.DataFrame(rows)


def run_lines(table: pd.DataFrame, texts: list) -> pd.Series:
    """One run's completions summarised: mean `line_budget` per response, mean length, accuracy, and the share of
    hard product lines (multiplicand >= 3 digits) written long. `table` is `regime.completion_table`."""
    lines = line_budget(texts).mean()
    hard = lines["hard long lines"] + lines["hard direct lines"]
    return pd.concat([pd.Series({"length": float(table["length"].mean()), "acc": float(table["correct"].mean())}),
                      lines, pd.Series({"hard long share": lines["hard long lines"] / hard if hard else float("nan")})])


def bucket_lengths(table: pd.DataFrame) -> pd.Series:
    """One run's mean completion length per difficulty bucket (`regime.BUCKETS`, by `tasks` hardness)."""
    return table.groupby("bucket")["length"].mean().reindex([b for b, _, _ in regime.BUCKETS])


def arm_means(per_run: dict) -> pd.DataFrame:
    """Run name -> Series, averaged over the seeds of each arm ("<arm>/seed<s>" -> "<arm>"); other names kept."""
    frame = pd.DataFrame(per_run).T
    return frame.groupby(lambda run: run.split("/seed")[0], sort=False).mean()


def vs_grpo(per_run: dict, seeds, cols=None) -> pd.DataFrame:
    """Variant minus GRPO, paired by seed, for each column of per-run Series ("<arm>/seed<s>" -> Series, e.g.
    `run_lines` or `bucket_lengths`): rows (arm, column), the mean difference and its 95% t-interval. A column
    without a value in some seed (an empty bucket) gets NaN and no interval."""
    seeds = list(seeds)
    cols = list(cols if cols is not None else per_run[run_key("grpo", seeds[0])].index)
    rows = {}
    for arm in ARMS:
        if arm == "grpo":
            continue
        for col in cols:
            a = [float(per_run[run_key(arm, s)][col]) for s in seeds]
            b = [float(per_run[run_key("grpo", s)][col]) for s in seeds]
            if all(map(math.isfinite, a + b)):
                rows[(arm, col)] = _interval_row(stats.paired(a, b))
            else:
                rows[(arm, col)] = {"mean": float("nan"), "95% lo": None, "95% hi": None, "n": len(seeds)}
    return pd.DataFrame.from_dict(rows, orient="index")
