"""Notebook 03, DAPO (Yu et al., 2025): Clip-Higher, dynamic sampling, token-level loss, overlong shaping.

- the arms, one ablation ladder whose rungs also serve D1-D4, `ARMS` (`LADDER`: label and the paper's
  number per rung); the shortened budget `MAX_NEW_TOKENS` and the base's truncation at any budget,
  `truncation_at`;
- Eq. 13 by hand against the library, `eq13_by_hand`, `eq13_table`;
- zero-variance groups per step (all-correct / all-wrong / mixed), `group_shares`; what dynamic sampling
  generated and trained, `sampling_table`; held-out accuracy at equal generated samples, `eval_at_samples`;
- the per-token gradient weights of sample- and token-level aggregation by autograd on any lengths,
  `aggregation_weights`;
- D1-D5 evidence (`d_evidence`) and their rules (`RULES`, `stats`): `verdict_d1` ... `verdict_d5`; the numbers
  behind them in words, `what_we_saw`.
Derivations live in notebook 03; docstrings name the formula they compute.
"""
from __future__ import annotations

import math

import pandas as pd
import torch

from ..config import LossConfig
from ..metrics import mean_of
from ..objectives import Clip, group_advantages
from ..rewards import soft_overlong_penalty
from . import stats
from .equivalence import delta_for
from .dr_grpo import token_weights
from .prose import say
from .runs import arm_of, by_arm, end_accuracy, mean_over, run_key, window
from .verdicts import EXACT_TOL, NOT, REPRODUCED

MAX_NEW_TOKENS = 144
"""L_max of every arm: the largest budget of (96, 104, 112, 120, 128, 144, 160) at which the base truncates >= 5%
of its responses on the validation split (512 prompts x 4 at T = 1: 7.0% at 144, 2.9% at 160, 0.2% at the
regime's 192; notebook 03 repeats the measurement), so that D4 has truncation to cut with a margin over its
3% premise; L_cache is the preset's share 0.2 of it (DAPO: 4096 of 20480), 29 tokens"""
OVERLONG_CACHE = 0.2
"""L_cache as a share of L_max (DAPO Sec. 4.1: 4096 of 20480)"""
MU = 4
"""minibatch updates per rollout batch (DAPO Sec. 4.1: 16 updates per rollout); at mu = 1 the ratio is 1
and no clip acts, so Clip-Higher (D1) needs mu > 1"""
DS_EVAL_EVERY = 5
"""held-out evaluation every 5 steps in the dynamic-sampling arm: its accuracy is read at the last
evaluation whose generated samples do not exceed those of the other rungs (D5 at equal samples)"""

_COMMON = {"mu": MU, "max_new_tokens": MAX_NEW_TOKENS}
ARMS = {
    "grpo": {"preset": "grpo", **_COMMON},
    "overlong_filter": {"preset": "grpo", **_COMMON, "overlong": "filter"},
    "clip_higher": {"preset": "grpo", **_COMMON, "loss_eps_high": 0.28},
    "overlong": {"preset": "grpo", **_COMMON, "loss_eps_high": 0.28, "overlong": "shaping",
                 "overlong_cache": OVERLONG_CACHE},
    "token_mean": {"preset": "grpo", **_COMMON, "loss_eps_high": 0.28, "overlong": "shaping",
                   "overlong_cache": OVERLONG_CACHE, "loss_aggregation": "token_mean"},
    "dapo": {"preset": "dapo", **_COMMON, "overlong_cache": OVERLONG_CACHE, "eval_every": DS_EVAL_EVERY},
}
"""the ladder in DAPO Tab. 1's order (equal prompts, G, lr, budget and seeds), each rung adding one component
to its `PARENT`: naive GRPO (clip 0.2/0.2, sample-level mean) -> overlong filtering (side rung, D4) ->
Clip-Higher (0.2/0.28; D1 vs grpo) -> soft overlong punishment (Eq. 13; D4 vs clip_higher) -> token-level
loss (D3 vs overlong) -> dynamic sampling = DAPO (D2)"""
PARENT = {"overlong_filter": "grpo", "clip_higher": "grpo", "overlong": "clip_higher", "token_mean": "overlong",
          "dapo": "token_mean"}
"""rung -> the rung it adds one component to. Overlong filtering is a side rung on naive GRPO: filtering
masks the loss of truncated responses while the soft punishment gives them its -1, so stacked under the
later rungs the filter would silence the punishment of truncated answers (DAPO's final recipe keeps the
punishment). The paper's rows are cumulative; ours from Clip-Higher on build on naive GRPO without the filter."""
LADDER = {"grpo": ("naive GRPO", 30), "overlong_filter": ("+ overlong filtering", 36),
          "clip_higher": ("+ Clip-Higher", 38), "overlong": ("+ soft overlong punishment", 41),
          "token_mean": ("+ token-level loss", 42), "dapo": ("+ dynamic sampling (DAPO)", 50)}
"""arm -> (row label, the paper's AIME24 avg@32 of that row, DAPO Tab. 1)"""

D1_ENTROPY = stats.Greater("policy entropy over the last 25% of steps (nats/token), Clip-Higher - GRPO", "entropy",
                           fmt="+.4f")
D1_ACC = stats.NotWorse("held-out accuracy (T = 1), Clip-Higher - GRPO")
D1_RULE = stats.AllOf(parts=(D1_ENTROPY,), guards=(D1_ACC,))
D2_RISE = stats.growth("all-correct share on the fixed panel (256 training prompts x 8), step 100 - step 0, "
                       "notebook 01's GRPO runs", measure="share")
D2_BATCH = "all-correct share of GRPO's training batches, last 20% - first 20% of steps"
"""reported beside D2 (different prompts every step: noisy, and confounded by which prompts were drawn)"""
D2_CLEAN = stats.AtLeast("share of dynamic-sampling steps whose trained batch holds no zero-variance group",
                         at_least=1.0, every=True)
D2_RULE = stats.AllOf(parts=(D2_RISE,), checks=(D2_CLEAN,))
D4_BASE = stats.AtLeast("base truncation share on the held-out prompts at L_max", at_least=0.03)
D4_EQ13 = stats.AtLeast("Eq. 13 equals its hand formula at every tested length (1 = yes)", at_least=1.0, fmt=".0f")
D4_CUT = stats.Greater("truncation share over the last 20% of steps, no shaping - shaping", "share", fmt="+.4f")
D4_RULE = stats.AllOf(parts=(D4_CUT,), checks=(D4_EQ13,), premises=(D4_BASE,))
D5_GAIN = stats.Greater("held-out accuracy at equal generated samples, DAPO - naive GRPO", "accuracy")
D5_STEPS = stats.AtLeast("upper end of the 95% interval of the worst rung-to-rung accuracy change", at_least=0.0,
                         fmt="+.3f")
D5_RULE = stats.AllOf(parts=(D5_GAIN, D5_STEPS))
RULES = {"D1": D1_RULE, "D2": D2_RULE, "D4": D4_RULE, "D5": D5_RULE}
"""claim id -> the rule that judges it and writes its criterion (D3 is an identity, see `verdict_d3`)"""
ENTROPY_FRAC, WINDOW_FRAC = 0.25, 0.2
"""D1's window (last 25% of steps); D2's and D4's windows (first / last 20%)"""


# ---------------------------------------------------------------- the budget: truncation of the base

def truncation_at(lengths, truncated, budget: int) -> float:
    """Share of responses sampled with a larger budget that a budget of `budget` tokens would truncate.

    A length counts the EOS token, so a response ends within `budget` tokens iff it has an EOS and its
    length is <= budget: truncated at `budget` = (length > budget) or (no EOS at all).
    """
    n = torch.as_tensor(lengths)
    cut = (n > budget) | torch.as_tensor(truncated).bool()
    return float(cut.float().mean())


def budget_table(lengths, truncated, correct, budgets=(96, 112, 128, 144, 160, 192)) -> pd.DataFrame:
    """Per budget: share truncated, and the accuracy left if every truncated response scores 0."""
    n, c = torch.as_tensor(lengths), torch.as_tensor(correct).float()
    rows = {}
    for b in budgets:
        cut = (n > b) | torch.as_tensor(truncated).bool()
        rows[b] = {"truncated": float(cut.float().mean()), "accuracy": float((c * (~cut).float()).mean())}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("L_max")


# ---------------------------------------------------------------- Eq. 13 by hand

def eq13_by_hand(length: int, max_len: int, cache_len: int) -> float:
    """DAPO Eq. 13: 0 up to L_max - L_cache, then a linear ramp to -1 at L_max, -1 beyond."""
    start = max_len - cache_len
    if length <= start:
        return 0.0
    if length <= max_len:
        return (start - length) / cache_len
    return -1.0


def eq13_table(max_len: int, cache_len: int) -> pd.DataFrame:
    """`soft_overlong_penalty` beside `eq13_by_hand` at 0, both ends and the middle of the ramp, L_max, L_max + 1."""
    start = max_len - cache_len
    lengths = [0, start - 1, start, start + 1, start + cache_len // 2, max_len - 1, max_len, max_len + 1]
    lib = soft_overlong_penalty(torch.tensor(lengths), max_len, cache_len).tolist()
    rows = [{"|y|": n, "R_length (library)": v, "R_length (hand)": eq13_by_hand(n, max_len, cache_len)}
            for n, v in zip(lengths, lib)]
    df = pd.DataFrame(rows)
    df["abs err"] = (df["R_length (library)"] - df["R_length (hand)"]).abs()
    return df


# ---------------------------------------------------------------- Sec. 3.2: groups and dynamic sampling

def group_shares(metrics: list) -> pd.DataFrame:
    """Per step, the fresh batch's groups: all-correct, all-wrong, mixed (by correctness) and zero-variance
    (by shaped reward: these carry no gradient), and the zero-variance share of the trained batch."""
    df = pd.DataFrame(metrics)
    out = pd.DataFrame({"step": df["step"], "all correct": df["groups/all_correct"],
                        "all wrong": df["groups/all_wrong"]})
    out["mixed"] = 1.0 - out["all correct"] - out["all wrong"]
    out["zero variance"] = df["groups/zero_var"]
    out["zero variance (trained)"] = df["groups/zero_var_trained"]
    return out


def window_mean(metrics: list, key: str, frac: float, which: str) -> float:
    """Mean of `key` over the first or last max(1, round(frac * n)) steps."""
    return mean_over(window(metrics, frac, which), key)


def sampling_table(metrics_by_run: dict, max_gen_batches: int) -> pd.DataFrame:
    """Per run: mean generation batches and generated responses per step, share of steps that hit
    `max_gen_batches`, mean groups trained per step, zero-variance groups trained (mean share and steps with any)."""
    rows = {}
    for run, m in metrics_by_run.items():
        df = pd.DataFrame(m)
        rows[run] = {"gen batches / step": df["gen/batches"].mean(), "samples / step": df["gen/samples"].mean(),
                     "steps at max_gen_batches": float((df["gen/batches"] >= max_gen_batches).mean()),
                     "groups trained / step": df["groups/kept"].mean(),
                     "zero-var trained (share)": df["groups/zero_var_trained"].mean(),
                     "steps with a zero-var group trained": int((df["groups/zero_var_trained"] > 0).sum())}
    return pd.DataFrame.from_dict(rows, orient="index")


def cumulative_samples(metrics: list) -> list:
    """Responses generated before each step boundary: [0, after step 1, ..., after the last step]."""
    out = [0]
    for row in metrics:
        out.append(out[-1] + int(row["gen/samples"]))
    return out


def eval_at_samples(summary: dict, metrics: list, samples: int) -> dict:
    """The run's last held-out evaluation taken after at most `samples` generated responses, with the step
    and the samples generated by then (keys 'step', 'samples' added)."""
    cum = cumulative_samples(metrics)
    ok = [e for e in summary["eval"] if cum[min(e["step"], len(cum) - 1)] <= samples]
    e = ok[-1]
    return {**e, "samples": cum[min(e["step"], len(cum) - 1)]}


# ---------------------------------------------------------------- Sec. 3.3: per-token weights

def aggregation_weights(lengths, rewards, G: int, aggregations=("seq_mean_token_mean", "token_mean")) -> pd.DataFrame:
    """Per response and aggregation: |o_i|, A_i (group-std advantages of `rewards`), and the per-token
    weight d(-J)/d log pi(o_{i,t}) by autograd through `policy_loss` at pi = pi_old (every token of a
    response gets the same weight; its spread within the response is reported as 'spread').

    Sample-level mean: -A_i / (B |o_i|); token-level mean: -A_i / sum_j |o_j|.
    """
    adv = group_advantages(torch.as_tensor(rewards, dtype=torch.float32), G, "group")  # (B,)
    rows = []
    for agg in aggregations:
        cfg = LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=0.28), aggregation=agg)
        w = token_weights(cfg, lengths, adv)  # (B, T)
        for i, n in enumerate(lengths):
            wi = w[i, :n]
            rows.append({"aggregation": agg, "response": i, "|o_i|": int(n), "A": float(adv[i]),
                         "weight": float(wi.mean()), "spread": float(wi.max() - wi.min())})
    return pd.DataFrame(rows)


def weight_ratio(lengths=(10, 100), rewards=(1.0, 1.0, 0.0, 0.0)) -> dict:
    """Per aggregation: per-token weight of a 10-token response / that of a 100-token response with the
    same advantage (one group of 4: correct 10 and 100, incorrect 10 and 100 tokens)."""
    lens = [lengths[0], lengths[1], lengths[0], lengths[1]]
    df = aggregation_weights(lens, list(rewards), len(lens))
    return {agg: float(g["weight"].iloc[0] / g["weight"].iloc[1]) for agg, g in df.groupby("aggregation")}


# ---------------------------------------------------------------- evidence and verdicts

def _arm(metrics: dict, arm: str, s: int) -> list:
    return metrics[run_key(arm, s)]


def d_evidence(metrics: dict, summaries: dict, seeds, samples_budget: int) -> dict:
    """D1, D2, D4, D5 evidence per seed from the runs of `ARMS` ("<arm>/seed<s>").

    samples_budget: responses generated by a rung without dynamic sampling over the whole run (steps x
    prompts x G); the dynamic-sampling rung is read at its last evaluation within that many samples.
    """
    seeds = list(seeds)
    end = {arm: end_accuracy(summaries, arm, seeds) for arm in ARMS}
    equal = {arm: list(end[arm]) for arm in ARMS}
    ds_at = [eval_at_samples(summaries[run_key("dapo", s)], _arm(metrics, "dapo", s), samples_budget) for s in seeds]
    equal["dapo"] = [e["acc/sample"] for e in ds_at]
    up = [mean_over(_arm(metrics, "clip_higher", s), "clip/high_pi_old") for s in seeds]
    return {
        "entropy_high": [window_mean(_arm(metrics, "clip_higher", s), "entropy/mean", ENTROPY_FRAC, "last") for s in seeds],
        "entropy_base": [window_mean(_arm(metrics, "grpo", s), "entropy/mean", ENTROPY_FRAC, "last") for s in seeds],
        "acc_high": end["clip_higher"], "acc_base": end["grpo"], "pi_old_upclipped": up,
        "all_correct_first": [window_mean(_arm(metrics, "grpo", s), "groups/all_correct", WINDOW_FRAC, "first")
                              for s in seeds],
        "all_correct_last": [window_mean(_arm(metrics, "grpo", s), "groups/all_correct", WINDOW_FRAC, "last")
                             for s in seeds],
        "ds_clean_steps": [float(sum(r["groups/zero_var_trained"] == 0 for r in _arm(metrics, "dapo", s))
                                 / len(_arm(metrics, "dapo", s))) for s in seeds],
        "gen_batches_per_step": [mean_over(_arm(metrics, "dapo", s), "gen/batches") for s in seeds],
        "trunc_base": [summaries[run_key("grpo", s)]["eval_start"]["trunc/frac"] for s in seeds],
        "trunc_with_shaping": [window_mean(_arm(metrics, "overlong", s), "trunc/frac", WINDOW_FRAC, "last")
                               for s in seeds],
        "trunc_without_shaping": [window_mean(_arm(metrics, "clip_higher", s), "trunc/frac", WINDOW_FRAC, "last")
                                  for s in seeds],
        "trunc_with_filter": [window_mean(_arm(metrics, "overlong_filter", s), "trunc/frac", WINDOW_FRAC, "last")
                              for s in seeds],
        "trunc_naive": [window_mean(_arm(metrics, "grpo", s), "trunc/frac", WINDOW_FRAC, "last") for s in seeds],
        "acc_filter": end["overlong_filter"],
        "ladder": equal, "ladder_steps": end, "ds_eval_step": [e["step"] for e in ds_at],
        "ds_eval_samples": [e["samples"] for e in ds_at],
    }


def verdict_d1(e: dict) -> stats.Verdict:
    """D1: `D1_RULE` (entropy higher with Clip-Higher; accuracy not worse, a guard), entropy's delta 10% of the base
    model's mean per-token entropy on held-out prompts (`base_entropy`, its card); mean pi_old of up-clipped tokens
    noted."""
    entropy = D1_ENTROPY.with_delta(delta_for("entropy", e.get("base_entropy")))
    v = D1_RULE.judge([entropy.judge(e["entropy_high"], e["entropy_base"])],
                      guards=[D1_ACC.judge(e["acc_high"], e["acc_base"])])
    return v.with_note(f"base model's entropy on held-out prompts {e['base_entropy']:.4f} nats/token (its card); "
                       f"mean pi_old of up-clipped tokens {stats.seed_mean(e['pi_old_upclipped'])} (paper: < 0.2)")


def verdict_d2(e: dict) -> stats.Verdict:
    """D2: `D2_RULE` (the all-correct share on a fixed panel rises from step 0 to 100: the empirical part; dynamic
    sampling trains no zero-variance group: a check, the filter does that by construction). The training-batch share
    of the same runs (notebook 01's GRPO) and the share predicted from per-prompt accuracy are reported beside;
    without the panel (`panel_rise` absent) the claim is not yet run."""
    clean = D2_CLEAN.judge(e["ds_clean_steps"])
    batch = [b - a for a, b in zip(e["all_correct_first"], e["all_correct_last"])]
    note = (stats.describe(stats.mean_interval(batch), D2_BATCH) + " (notebook 01's GRPO runs); generation batches "
            f"per step with dynamic sampling {stats.seed_mean(e['gen_batches_per_step'], '.2f')}")
    if "panel_rise" not in e:
        return stats.Verdict(stats.NOT_RUN, f"fixed-panel rise: not yet run; check: {clean.text}; {note}",
                             D2_RULE.criterion, parts=(clean,), roles=("check",))
    note = (f"panel at steps {e['panel_steps']}: all-correct share {stats.seed_mean(e['panel_first'])} -> "
            f"{stats.seed_mean(e['panel_last'])}, accuracy rise {stats.seed_mean(e['panel_acc_rise'])}; rise of the "
            f"share predicted from per-prompt accuracy (mean p^8) {stats.seed_mean(e['panel_predicted_rise'])}, not "
            "an independent prediction (p is estimated from the same 8 samples); " + note)
    return D2_RULE.judge([D2_RISE.judge(e["panel_rise"])], checks=[clean]).with_note(note)


def verdict_d3(e: dict) -> tuple:
    """D3, an identity: weight ratio 10 vs 100 tokens = 10 under the sample-level mean, 1 under the token-level mean."""
    ok = (abs(e["weight_ratio_seq_mean"] - 10) <= EXACT_TOL and abs(e["weight_ratio_token_mean"] - 1) <= EXACT_TOL)
    return (REPRODUCED if ok else NOT), (f"weight ratio len 10 / 100: seq-mean {e['weight_ratio_seq_mean']:.6g}, "
                                         f"token-mean {e['weight_ratio_token_mean']:.6g}")


def verdict_d4(e: dict) -> stats.Verdict:
    """D4: `D4_RULE` (Eq. 13 exact; truncation lower with shaping), if the base truncates >= 3% at L_max; the
    overlong-filtering side arm against naive GRPO is noted (reported, not judged: DESIGN's D4 is the shaping)."""
    v = D4_RULE.judge([D4_CUT.judge(e["trunc_without_shaping"], e["trunc_with_shaping"])],
                      [D4_BASE.judge(e["trunc_base"])], checks=[D4_EQ13.judge(1.0 if e["eq13_exact"] else 0.0)])
    if "trunc_with_filter" not in e:
        return v
    return v.with_note(f"overlong filtering vs naive GRPO: truncation share over the last 20% of steps "
                       f"{stats.seed_mean(e['trunc_with_filter'], '.4f')} vs {stats.seed_mean(e['trunc_naive'], '.4f')}; "
                       + stats.describe(stats.paired(e["acc_filter"], e["acc_base"]),
                                        "held-out accuracy, filtering - naive GRPO"))


def step_intervals(ladder: dict) -> list:
    """(rung, paired interval of its accuracy minus its `PARENT`'s) for each rung of `ladder` whose parent is there."""
    return [(b, stats.paired(ladder[b], ladder[PARENT[b]])) for b in ladder if PARENT.get(b) in ladder]


def verdict_d5(e: dict) -> stats.Verdict:
    """D5: `D5_RULE` (DAPO > naive GRPO at equal generated samples; no rung's change has its interval below 0)."""
    ladder = e["ladder"]
    steps = step_intervals(ladder)
    his = [iv.hi if iv.hi is not None else iv.mean for _, iv in steps]
    worst = min(range(len(his)), key=his.__getitem__)
    v = D5_RULE.judge([D5_GAIN.judge(ladder["dapo"], ladder["grpo"]),
                       D5_STEPS.judge(his[worst]).with_note(
                           f"worst rung: {steps[worst][0]}" + (" (one seed: its change, no interval)"
                                                               if steps[worst][1].hi is None else ""))])
    return v.with_note("ladder " + " -> ".join(f"{100 * sum(a) / len(a):.1f}" for a in ladder.values()))


VERDICTS = {"D1": verdict_d1, "D2": verdict_d2, "D3": verdict_d3, "D4": verdict_d4, "D5": verdict_d5}


# ---------------------------------------------------------------- the numbers in words

def _mean(xs) -> float:
    return mean_of(xs, empty=float("nan"))


class _Runs:
    """The runs of `ARMS` as `what_we_saw` reads them: means over seeds per arm."""

    def __init__(self, metrics: dict, summaries: dict):
        self.metrics, self.summaries = metrics, summaries
        self.seeds = sorted({int(n.split("seed")[1]) for n in metrics})
        self.steps = max(len(m) for m in metrics.values())

    def mean(self, arm: str, key: str, frac: float = 1.0, which: str = "last") -> float:
        return _mean(window_mean(m, key, frac, which) for m in by_arm(self.metrics, arm).values())

    def held(self, arm: str, when: str) -> float:
        return _mean(self.summaries[run_key(arm, s)][f"eval_{when}"]["acc/sample"] for s in self.seeds)


def _words_d1(e: dict, r: _Runs, word: str) -> list:
    clip_hi, up = r.mean("grpo", "clip/high"), _mean(e["pi_old_upclipped"])
    lines = [say("D1.main", word=word, entropy_base=_mean(e["entropy_base"]), entropy_high=_mean(e["entropy_high"]),
                 acc_base=_mean(e["acc_base"]), acc_high=_mean(e["acc_high"]), clip_hi=clip_hi,
                 clip_lo=r.mean("grpo", "clip/low"), mu=MU)]
    if clip_hi < 0.01:
        lines.append(say("D1.rarely_clipped", indent=True))
    lines.append(say("D1.none_upclipped", indent=True) if not math.isfinite(up) else
                 say("D1.upclipped", indent=True, pi_old_up=up, holds="holds" if up < 0.2 else "does not hold"))
    return lines


def _words_d2(e: dict, r: _Runs, word: str, max_gen: int) -> list:
    first, last, W = _mean(e["all_correct_first"]), _mean(e["all_correct_last"]), WINDOW_FRAC
    at_cap = sampling_table(by_arm(r.metrics, "dapo"), max_gen)["steps at max_gen_batches"].mean()
    panel = ([say("D2.panel", word=word, steps=e["panel_steps"], first=_mean(e["panel_first"]),
                  last=_mean(e["panel_last"]), rise=_mean(e["panel_rise"]), lo=min(e["panel_rise"]),
                  hi=max(e["panel_rise"]), acc_rise=_mean(e["panel_acc_rise"]),
                  predicted_rise=_mean(e["panel_predicted_rise"]))] if "panel_first" in e else [])
    return panel + [say("D2.main", word=word, first=first, last=last, change=last - first,
                acc_first=r.mean("grpo", "acc/mean", W, "first"), acc_last=r.mean("grpo", "acc/mean", W),
                held_start=r.held("grpo", "start"), held_end=r.held("grpo", "end")),
            say("D2.noisy_batches", indent=True, steps=r.steps),
            say("D2.dynamic_sampling", indent=True, gen_batches=_mean(e["gen_batches_per_step"]), max_gen=max_gen,
                at_cap=at_cap, dirty=1 - _mean(e["ds_clean_steps"]))]


def _words_d4(e: dict, r: _Runs, word: str, l_max: int) -> list:
    W = WINDOW_FRAC
    return [say("D4.shaping", word=word, trunc_base=_mean(e["trunc_base"]), l_max=l_max,
                trunc_without=_mean(e["trunc_without_shaping"]), trunc_with=_mean(e["trunc_with_shaping"]),
                len_without=r.mean("clip_higher", "len/mean", W), len_with=r.mean("overlong", "len/mean", W),
                acc_without=r.held("clip_higher", "end"), acc_with=r.held("overlong", "end")),
            say("D4.filter", indent=True, trunc_filter=_mean(e["trunc_with_filter"]), trunc_naive=_mean(e["trunc_naive"]),
                len_filter=r.mean("overlong_filter", "len/mean", W), len_naive=r.mean("grpo", "len/mean", W),
                acc_filter=r.held("overlong_filter", "end"), acc_naive=r.held("grpo", "end"))]


def _words_d5(e: dict, r: _Runs, word: str, l_max: int) -> list:
    W = WINDOW_FRAC
    lines = [say("D5.ladder", word=word, ladder=" -> ".join(f"{100 * _mean(v):.1f}" for v in e["ladder"].values()),
                 ds_eval_step=e["ds_eval_step"], dapo_end=100 * _mean(e["ladder_steps"]["dapo"]),
                 base=100 * r.held("grpo", "start"))]
    gain = r.held("grpo", "end") - r.held("grpo", "start")
    if gain < 0.02:
        lines.append(say("D5.little_gain", indent=True, gain=100 * gain, steps=r.steps))
    lines.append(say("D5.length", indent=True, len_first=r.mean("grpo", "len/mean", W, "first"),
                     len_last=r.mean("grpo", "len/mean", W), trunc_first=r.mean("grpo", "trunc/frac", W, "first"),
                     trunc_last=r.mean("grpo", "trunc/frac", W), l_max=l_max))
    return lines


def what_we_saw(e: dict, metrics: dict, summaries: dict, words: dict, *, max_gen: int, l_max: int) -> list:
    """The numbers behind D1, D2, D4 and D5 in sentences, from `d_evidence`'s `e`, the runs' per-step
    `metrics` and `summaries` ("<arm>/seed<s>"), the verdict words per claim, `max_gen_batches` and L_max."""
    r = _Runs(metrics, summaries)
    wall = pd.Series({n: s["wall_s"] for n, s in summaries.items()}).groupby(arm_of).sum() / 60
    return (_words_d1(e, r, words["D1"]) + _words_d2(e, r, words["D2"], max_gen) + _words_d4(e, r, words["D4"], l_max)
            + _words_d5(e, r, words["D5"], l_max)
            + [say("DAPO.time", per_arm=", ".join(f"{a} {wall[a]:.1f}" for a in ARMS if a in wall), total=wall.sum())])
