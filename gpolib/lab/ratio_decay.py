"""Notebook 02, ratio decay (GSPO Sec. 2, Eq. 7): claim S1.

After mu >= 2 updates on one batch, the product of token ratios of a response drifts with its length
while the sequence ratio s_i (a geometric mean) does not:
- per-response ratios of the updated policy to pi_old, `ratio_step`, `ratio_records` (`cached_records`: once per config);
- equal-count length buckets, `bucket_stats`; extreme product ratios, `extreme_share`;
- S1: `within_evidence` (V(L) per seed, `ratio_prefix`), `s1_evidence` (the buckets, secondary), `verdict_s1`;
  since DESIGN 2026-12-06 judged on the mu x lr grid's long-response panel (`ratio_panel` records it, `ratio_runs`
  keeps its folders, `ratio_grid` measures it), V(L) on the RL batch kept as checks.
"""
from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd

from . import ratio_prefix, stats
from .ratio_panel import batch_ratios, token_arrays
from .ratio_runs import prefetch_runs, prefetch_train, records_problem  # noqa: F401  (notebook 02's grid is trained
# ahead by gpolib.workbook.prefetch through these hooks; records_problem: a finished ratio run's completeness)

S1_MIN_BUCKET = 50
"""S1: responses per length bucket for 'reproduced' (DESIGN: >= 6 buckets of >= 50 responses)"""
S1_SLOPE = stats.EverySeed("slope of V(L) = Var over responses of sum_{t<=L} log rho_t (pooled within step) on L = "
                           "10..120, responses of >= 120 tokens",
                           how="95% percentile interval from 1000 resamples of the prompts within each step")
S1_GEO = stats.AtLeast("V_geo(20) - V_geo(120), the spread of the prefix geometric mean's log (does not grow)",
                       at_least=0.0, every=True, fmt=".2e")
S1_REGIME = stats.AtLeast("share of 200-token prefix products prod_{t<=200} rho_t outside [0.5, 2], the largest over the "
                          "grid's cells (mu in {1, 2, 4, 8, 16} x lr x {1, 3}) whose training reward does not collapse",
                          at_least=0.10, fmt=".1%")
"""S1's empirical part (DESIGN, 2026-12-06): the seed's regime is reached in at least one non-collapsing grid cell"""
S1_RULE = stats.AllOf(parts=(S1_REGIME,), checks=(S1_SLOPE, S1_GEO))
"""S1: the regime reached somewhere on the grid; V(L) growing within responses while the prefix geometric mean's
spread does not are checks (a random walk's variance grows whatever the policy does), printed, never a part"""
S1_BUCKET = stats.Slope("across-response bucket slope of Var[log prod rho] per token of length (secondary)",
                        min_r2=0.5, min_points=6)
"""the old across-response measure, reported beside: confounded by the advantage and the 1/|o| weighting"""
RULES = {"S1": S1_RULE}
"""claim id -> the rule that judges it and writes its criterion"""


def ratio_step(trainer, step: int) -> tuple[pd.DataFrame, list]:
    """One RL step of `trainer` with the ratio of the updated policy to pi_old, per response and per token.

    Steps: 1. collect and score a batch (`Trainer.collect`, seeded by the step as in training);
    2. pi_old: the policy's log-probs before the update; 3. the mu minibatch updates (`Trainer.update`);
    4. log pi_theta of the whole batch after them; 5. `batch_ratios`.
    """
    batch = trainer.collect(step)
    old = trainer.policy_logps(batch.rollout)  # (B, T)
    trainer.update(batch, step)
    return batch_ratios(trainer, batch, old, trainer.policy_logps(batch.rollout), step)


def ratio_records(trainer, steps: int, start: int = 0) -> tuple[pd.DataFrame, dict]:
    """`ratio_step` for steps start..start+steps-1 (training continues across them): the per-response table and
    the per-token arrays in `ratio_prefix`'s layout (flat log ratios with offsets, `token_arrays`, and `length`)."""
    frames, tokens = [], []
    for s in range(start, start + steps):
        df, tok = ratio_step(trainer, s)
        frames.append(df)
        tokens += tok
    df = pd.concat(frames, ignore_index=True)
    return df, {**token_arrays(df, tokens), "length": np.asarray([len(t) for t in tokens])}


def cached_records(cfg, run_dir) -> tuple[pd.DataFrame, dict]:
    """`ratio_records` of a fresh `Trainer(cfg)` over cfg.steps, saved to `run_dir/ratios.csv` and
    `run_dir/token_ratios.npz` (each written atomically); a finished folder of the same config and data holding
    both, complete (`records_problem`), is read back instead (`rundir.cached_results`: stale folders are refused,
    an incomplete one is recomputed with a warning)."""
    from ..folders import write_bytes, write_text
    from ..rundir import cached_results
    from ..train import Trainer

    def compute(path):
        df, tok = ratio_records(Trainer(cfg), cfg.steps)
        write_text(path / "ratios.csv", df.to_csv(index=False))
        buf = io.BytesIO()
        ratio_prefix.save_tokens(buf, tok["log_rho"], tok["offsets"], tok["step"], tok["prompt"], tok["advantage"])
        write_bytes(path / ratio_prefix.TOKENS_FILE, buf.getvalue())

    path = cached_results(cfg, run_dir, ("ratios.csv", ratio_prefix.TOKENS_FILE),
                          lambda p: records_problem(p, cfg.steps), compute)
    return pd.read_csv(path / "ratios.csv"), ratio_prefix.load_tokens(path / ratio_prefix.TOKENS_FILE)


def length_buckets(df: pd.DataFrame, n_buckets: int) -> pd.Series:
    """Equal-count length buckets 0..n_buckets-1 of the responses (ties broken by row order)."""
    return pd.qcut(df["length"].rank(method="first"), n_buckets, labels=False)


def bucket_stats(df: pd.DataFrame, n_buckets: int) -> pd.DataFrame:
    """Equal-count length buckets: mean length, Var[log prod rho], Var[log s_i], count, one row per bucket.

    Under independent token log-ratios of variance sigma^2, Var[log prod rho] = |o| sigma^2 (grows with
    length) while Var[log s_i] = sigma^2 / |o| (shrinks).
    """
    bucket = length_buckets(df, n_buckets)
    g = df.groupby(bucket)
    return pd.DataFrame({"len_mean": g["length"].mean(), "var_log_prod_rho": g["log_prod_rho"].var(),
                         "var_log_s": g["log_s"].var(), "n": g.size()}).rename_axis("bucket").reset_index()


def extreme_share(df: pd.DataFrame, n_buckets: int, low: float = 0.2, high: float = 5.0) -> dict:
    """In the top length bucket: share of responses whose product ratio is < low or > high."""
    bucket = length_buckets(df, n_buckets)
    top = df[bucket == n_buckets - 1]
    out = (top["log_prod_rho"] < math.log(low)) | (top["log_prod_rho"] > math.log(high))
    return {"n": int(len(top)), "min_length": int(top["length"].min()), "share": float(out.mean())}



def robust_spread(df: pd.DataFrame, n_buckets: int, trim: float = 0.01) -> pd.DataFrame:
    """Per equal-count length bucket, the spread of log prod rho three ways: the variance (what S1 judges), the
    variance without the `trim` share of responses at each tail, and the interquartile range (robust to the
    tails); plus the mean of log prod rho and the share of the bucket's variance that its 1% most extreme
    responses carry. An exploratory view beside the verdict, never its criterion."""
    bucket = length_buckets(df, n_buckets)
    rows = []
    for b, g in df.groupby(bucket):
        x = g["log_prod_rho"]
        lo, hi = x.quantile(trim), x.quantile(1 - trim)
        dev2 = (x - x.mean()) ** 2  # (n,)
        top = dev2.nlargest(max(1, round(0.01 * len(x))))
        rows.append({"bucket": b, "len_mean": g["length"].mean(), "var": x.var(), f"var trimmed {trim:.0%}":
                     x[(x >= lo) & (x <= hi)].var(), "IQR": x.quantile(0.75) - x.quantile(0.25),
                     "mean": x.mean(), "var share of top 1%": top.sum() / dev2.sum()})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- verdict

def s1_evidence(buckets: pd.DataFrame) -> dict:
    """The across-response evidence from `bucket_stats` (secondary): per bucket its mean length, Var[log prod rho],
    Var[log s_i], count."""
    return {"bucket_len": buckets["len_mean"].tolist(), "var_log_prod_rho": buckets["var_log_prod_rho"].tolist(),
            "var_log_s": buckets["var_log_s"].tolist(), "bucket_n": buckets["n"].tolist()}


def within_evidence(tokens: dict, token_mean: dict | None = None) -> dict:
    """S1's within-response evidence: `ratio_prefix.seed_summary` of each seed's run ({seed: per-token arrays}) of the
    judged arm, and of the token_mean arm beside (reported, not judged: its loss weights tokens without 1/|o|)."""
    out = {"within": {str(k): ratio_prefix.seed_summary(t) for k, t in tokens.items()}}
    if token_mean:
        out["within_token_mean"] = {str(k): ratio_prefix.seed_summary(t) for k, t in token_mean.items()}
    return out


def _beside(e: dict) -> str:
    """The numbers reported beside the judged ones: leave shares, the token_mean arm, the old bucket slope."""
    seeds = e["within"].values()
    leave = "; ".join(f"L = {L}: " + ", ".join(f"{100 * s['leave'][str(L)]:.1f}%"
                                                for s in seeds) for L in ratio_prefix.LEAVE_AT)
    text = (f"share of responses whose prefix product is outside [0.5, 2], per seed: {leave} (0.99^L leaves it at "
            f"L = {ratio_prefix.compounding_length(0.99)}); responses of >= 120 tokens per seed "
            + ", ".join(str(s["n_long"]) for s in seeds))
    tm = e.get("within_token_mean")
    if tm:
        text += ("; token_mean arm (no 1/|o| weight), slope of V(L) per seed "
                 + ", ".join(f"{s['slope']:.2e} [{s['lo']:.2e}, {s['hi']:.2e}]" for s in tm.values()))
    return text


def verdict_s1(e: dict) -> stats.Verdict:
    """S1: the analytic value 0.99^200 and, within responses, `S1_RULE` over the seeds' runs; the across-response
    bucket slope of the earlier design reported beside with its confound (log prod rho follows the advantage through
    the 1/|o| weight of the sample-level loss). Without within-response evidence (a record of the earlier design):
    not yet run."""
    old = S1_BUCKET.judge(e["bucket_len"], e["var_log_prod_rho"])
    confound = (f"secondary, {old.text} (across responses of different lengths: confounded by the advantage and the "
                "1/|o| weight, not accumulation)")
    if "within" not in e:
        return stats.Verdict(stats.NOT_RUN, f"analytic 0.99^200 = {0.99 ** 200:.3f}; within-response V(L): not yet "
                             f"run; {confound}", S1_RULE.criterion, parts=(old,))
    seeds = list(e["within"].values())
    checks = [S1_SLOPE.judge([s["slope"] for s in seeds], [s["lo"] for s in seeds], [s["hi"] for s in seeds]),
              S1_GEO.judge([s["v_geo_drop"] for s in seeds])]
    if "regime_share" not in e:
        shown = "; ".join(c.text for c in checks)
        return stats.Verdict(stats.NOT_RUN, f"the grid over mu and lr at 200 tokens (DESIGN): not yet run; at mu = 4 "
                             f"(notebook 02's runs, responses <= 192 tokens) the checks: {shown}; analytic 0.99^200 = "
                             f"{0.99 ** 200:.3f}; {_beside(e)}; {confound}", S1_RULE.criterion, parts=tuple(checks),
                             roles=("check",) * len(checks))
    v = S1_RULE.judge([S1_REGIME.judge(e["regime_share"])], checks=checks)
    return v.with_note(f"{_grid_text(e)}; analytic 0.99^200 = {0.99 ** 200:.3f}; checks on the RL batch of the "
                       f"mu = 4, lr x 1 cell: {_beside(e)}; {confound}")


def _grid_text(e: dict) -> str:
    """Where the judged share was measured (the panel, DESIGN) and the curve over mu reported beside it."""
    p, cell = e["panel"], e.get("regime_cell")
    where = f" (mu = {cell[0]}, lr x {cell[1]:g})" if cell else " (every cell collapsed)"
    slopes = "; ".join(f"lr x {x}: {f['slope']:.2f}" + (f" [{f['lo']:.2f}, {f['hi']:.2f}]" if f.get("lo") is not None
                                                         else "") + f" over {f['n']} seeds"
                       for x, f in e["mu_slope"].items())
    lstar = ", ".join(f"mu {c['mu']} lr x {c['lr x']:g}: {c['L*']:.0f}" for c in e["cells"])
    collapsed = [f"mu {c['mu']} lr x {c['lr x']:g}" for c in e["cells"] if c["collapsed"]]
    vs_card = [f"mu {c['mu']} lr x {c['lr x']:g}" for c in e["cells"] if c.get("collapsed vs card")]
    return (f"measured on the long-response panel, not on the RL batch: {p['prompts']} fixed {p['n_ops']}-operator "
            f"chains x {p['samples']} responses sampled from pi_old at every step (budget {p['budget']} tokens; "
            f"training on the RL split), scored under the policy after the step's mu updates; largest share outside "
            f"[0.5, 2] at L = 200{where}; slope of log V' on log mu (reported, not judged) {slopes}; L* (tokens at "
            f"which the sd of the log product reaches log 2) {lstar}; collapsed cells: "
            f"{', '.join(collapsed) if collapsed else 'none'} (seed-mean training reward below its step-0 value, the "
            f"base's, for >= 5 consecutive steps; against the base card's accuracy instead: "
            f"{', '.join(vs_card) if vs_card else 'none'})")


VERDICTS = {"S1": verdict_s1}
