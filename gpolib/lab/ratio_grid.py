"""Notebook 02, S1 over the mu x lr grid: how far token-ratio products drift and spread along 200-token responses.

Per run (`run_measures`), on the panel's responses (`ratio_panel`) scored under the policy after update k (k = mu:
the policy after the step's updates, judged; other k: the per-k curve, `per_update`):
- the share of prefix products prod_{t<=L} rho_t outside [0.5, 2] at L = 50, 100, 200 among the responses that
  reach L (`leave_at`), and on the RL batch at L = 50, 100 beside (`BATCH_AT`);
- V(L) to L = 200 (`ratio_prefix.pooled_var` on responses of >= 200 tokens) and its slope V', with `n_boot`
  resamples of the prompts within each step; L* = (log 2)^2 / V', where the sd of the log product reaches log 2
  (`ratio_prefix.band_length`), its interval from the resampled slopes;
- the per-token drift of log rho by the sign of the advantage (`drift_by_sign`) and exp(200 x drift), on the panel
  (its group's normalised reward) and on the RL batch (GRPO's advantage); the sd of the sequence geometric mean's
  log, log s_i = mean_t log rho_t (`geo_spread`); GRPO's token clip share and the training reward (steps.csv).
Per cell (`cell_table`): seed means, collapse (`collapsed`), and over the grid `regime_share` (S1's judged number)
and the slope of log V' on log mu per lr with its interval over seeds (`mu_slope`).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from . import ratio_prefix
from .collapse import COLLAPSE_STEPS, collapsed  # noqa: F401  (the grid's cells read DESIGN's collapse)
from .intervals import mean_interval

REACH = 200
"""the length the seed names (0.99^200), DESIGN S1"""
LEAVE_AT = (50, 100, 200)
V_GRID = tuple(range(10, REACH + 1, 10))
"""prefix lengths at which V(L) is read: 10, 20, ..., 200"""
BATCH_AT = (50, 100)
"""prefix lengths at which the RL batch's share outside [0.5, 2] is read beside the panel's (its responses end near
100 tokens): the panel's long chains are not the training distribution, the comparison at equal L shows how much
more their ratios move"""


def at_update(tok: dict, k: int) -> dict:
    """The panel records scored after update k (`ratio_panel.panel_arrays`' layout), as a per-token ratio dict."""
    keep = np.flatnonzero(tok["update"] == k)
    starts, lengths = tok["offsets"][keep], tok["length"][keep]
    log_rho = np.concatenate([tok["log_rho"][s:s + n] for s, n in zip(starts, lengths)]) if len(keep) else \
        np.zeros(0, np.float32)
    return {"log_rho": log_rho, "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            "step": tok["step"][keep], "prompt": tok["prompt"][keep], "advantage": tok["advantage"][keep],
            "length": lengths}


def leave_at(tok: dict, at=LEAVE_AT, band=ratio_prefix.BAND) -> dict:
    """{L: (share of the responses of >= L tokens whose prefix product exp(S(L)) lies outside `band`, how many)}."""
    lo, hi = math.log(band[0]), math.log(band[1])
    out = {}
    for L in at:
        S = ratio_prefix.prefix_sums(tok, L)[0][:, L - 1] if (tok["length"] >= L).any() else np.zeros(0)
        out[L] = (float(((S < lo) | (S > hi)).mean()) if len(S) else math.nan, int(len(S)))
    return out


def slope_boot(tok: dict, n_boot: int = ratio_prefix.N_BOOT, seed: int = ratio_prefix.BOOT_SEED) -> dict:
    """V(L) on `V_GRID` (responses of >= REACH tokens, pooled within step), its least-squares slope V' and the
    slopes of `n_boot` resamples of the prompts within each step (`ratio_prefix._prompt_weights`)."""
    S, step, prompt = ratio_prefix.prefix_sums(tok, REACH)
    L = np.asarray(V_GRID, dtype=float)
    cols = S[:, np.asarray(V_GRID) - 1]  # (n, k)
    v = ratio_prefix.pooled_var(cols, step)
    rng = np.random.default_rng(seed)
    boots = np.array([ratio_prefix.slope(L, ratio_prefix.pooled_var(cols, step, ratio_prefix._prompt_weights(
        step, prompt, rng))) for _ in range(n_boot)])
    return {"n_long": int(len(S)), "V": v.tolist(), "slope": ratio_prefix.slope(L, v), "boots": boots}


def band_interval(boots: np.ndarray) -> tuple:
    """L* = (log 2)^2 / V' of the 2.5% and 97.5% resampled slopes, shortest first (inf where a slope is <= 0)."""
    hi_slope, lo_slope = np.percentile(boots, [97.5, 2.5])
    return ratio_prefix.band_length(hi_slope), ratio_prefix.band_length(lo_slope)


def drift_by_sign(tok: dict) -> dict:
    """Per-token mean of log rho over the tokens of responses with A > 0, A < 0 and A = 0 (token-weighted; NaN
    where none): {sign: (drift, tokens)}."""
    per_token_adv = np.repeat(tok["advantage"], tok["length"])  # (tokens,)
    out = {}
    for name, m in (("A>0", per_token_adv > 0), ("A<0", per_token_adv < 0), ("A=0", per_token_adv == 0)):
        out[name] = (float(tok["log_rho"][m].mean()) if m.any() else math.nan, int(m.sum()))
    return out


def geo_spread(tok: dict) -> float:
    """sd over responses of log s_i = mean_t log rho_t (GSPO Eq. 7's log), pooled within step."""
    sums = np.add.reduceat(tok["log_rho"].astype(np.float64), tok["offsets"][:-1]) if len(tok["log_rho"]) else \
        np.zeros(0)
    log_s = sums / np.maximum(tok["length"], 1)  # (N,)
    return float(math.sqrt(ratio_prefix.pooled_var(log_s[:, None], tok["step"])[0]))


def run_measures(rec: dict, mu: int, n_boot: int = ratio_prefix.N_BOOT) -> dict:
    """One run's S1 numbers (`cached_grid_run`'s record) at k = mu: see the module's list."""
    pan = at_update(rec["panel"], mu)
    leave, fit = leave_at(pan), slope_boot(pan, n_boot)
    lo, hi = band_interval(fit["boots"])
    drift, batch = drift_by_sign(pan), drift_by_sign(rec["tokens"])
    out = {f"out@{L}": share for L, (share, _) in leave.items()}
    out.update({f"batch out@{L}": share for L, (share, _) in leave_at(rec["tokens"], BATCH_AT).items()})
    out.update({f"n@{L}": n for L, (_, n) in leave.items()})
    out.update({"V'": fit["slope"], "V' boots": fit["boots"], "L*": ratio_prefix.band_length(fit["slope"]),
                "L* lo": lo, "L* hi": hi,
                "V(200)": fit["V"][-1], "geo sd": geo_spread(pan), "panel drift": drift["A=0"][0],
                "panel drift A>0": drift["A>0"][0], "panel drift A<0": drift["A<0"][0],
                "batch drift A>0": batch["A>0"][0], "batch drift A<0": batch["A<0"][0],
                "clip": float(rec["steps"]["clip/frac"].mean()), "panel len": float(np.mean(pan["length"])),
                "panel acc": float(rec["steps"]["panel/acc"].mean())})
    return out


def per_update(rec: dict) -> pd.DataFrame:
    """The per-k curve of one run: the share outside [0.5, 2] at L = 200 after each saved update k."""
    ks = sorted(set(rec["panel"]["update"].tolist()))
    return pd.DataFrame({"k": ks, "out@200": [leave_at(at_update(rec["panel"], k), (REACH,))[REACH][0] for k in ks]})


def cell_table(measures: dict, rewards: dict, card: float | None = None) -> pd.DataFrame:
    """One row per cell (mu, lr scale): seed means of `run_measures` (L* from the mean V', its interval from the
    seeds' resampled slopes averaged resample by resample, `band_interval`), the seeds, and whether the cell collapses:
    its seed-mean training reward below the base's for >= COLLAPSE_STEPS consecutive steps (`collapsed`), the base's
    training reward being the seed mean of the runs' step-0 rewards (step 0 samples the base policy; the same batch
    in every cell of a seed). With `card` (the base card's accuracy), the collapse against it is reported beside.
    measures / rewards: {(mu, lr_scale, seed): run_measures / per-step training rewards}."""
    rows = []
    for mu, x in dict.fromkeys((mu, x) for mu, x, _ in measures):
        seeds = [s for m, y, s in measures if (m, y) == (mu, x)]
        vals = pd.DataFrame([{k: v for k, v in measures[(mu, x, s)].items() if k != "V' boots"} for s in seeds])
        boots = [measures[(mu, x, s)].get("V' boots") for s in seeds]
        lo, hi = band_interval(np.mean(boots, axis=0)) if all(b is not None for b in boots) else (math.nan, math.nan)
        curve = np.mean([rewards[(mu, x, s)] for s in seeds], axis=0)  # (steps,)
        row = {"mu": mu, "lr x": x, "seeds": len(seeds), **vals.mean().to_dict(),
               "L*": ratio_prefix.band_length(vals["V'"].mean()), "L* lo": lo, "L* hi": hi,
               "base reward": float(curve[0]),
               "reward": float(curve.mean()), "collapsed": collapsed(curve),
               "seeds collapsed": sum(collapsed(rewards[(mu, x, s)]) for s in seeds)}
        if card is not None:
            row["collapsed vs card"] = collapsed(curve, card)
        rows.append(row)
    return pd.DataFrame(rows)


def regime_share(cells: pd.DataFrame) -> tuple:
    """S1's judged number: the largest seed-mean share outside [0.5, 2] at L = 200 over the cells that do not
    collapse, and its cell (mu, lr scale); (NaN, None) when every cell collapses."""
    live = cells[~cells["collapsed"]].dropna(subset=["out@200"])
    if live.empty:
        return math.nan, None
    top = live.loc[live["out@200"].idxmax()]
    return float(top["out@200"]), (int(top["mu"]), float(top["lr x"]))


def mu_slope(measures: dict, lr_scale: float) -> dict:
    """The slope of log V' on log mu at one lr scale: least squares per seed over the mus whose V' > 0, then its mean
    with a 95% t-interval over seeds (reported, not judged)."""
    seeds = sorted({s for _, x, s in measures if x == lr_scale})
    per_seed = []
    for s in seeds:
        pts = [(math.log(mu), math.log(m["V'"])) for (mu, x, t), m in measures.items()
               if x == lr_scale and t == s and m["V'"] > 0]
        if len(pts) >= 2:
            per_seed.append(ratio_prefix.slope(np.array([p[0] for p in pts]), np.array([p[1] for p in pts])))
    if not per_seed:
        return {"slope": math.nan, "lo": None, "hi": None, "n": 0}
    iv = mean_interval(per_seed)
    return {"slope": iv.mean, "lo": iv.lo, "hi": iv.hi, "n": iv.n, "per_seed": per_seed}


def regime_begins(cells: pd.DataFrame, at_least: float = 0.10) -> str:
    """One sentence: the smallest mu (per lr scale) whose non-collapsing cell has >= `at_least` of its 200-token
    prefix products outside [0.5, 2], or that no cell reaches it (computed for the notebook's prose)."""
    live = cells[(~cells["collapsed"]) & (cells["out@200"] >= at_least)]
    if live.empty:
        top, cell = regime_share(cells)
        where = f"mu = {cell[0]}, lr x {cell[1]:g}" if cell else "no non-collapsing cell"
        return (f"No cell of the grid reaches the seed's regime: at most {top:.1%} of 200-token prefix products lie "
                f"outside [0.5, 2] ({where}), below {at_least:.0%}.")
    parts = [f"mu = {int(g['mu'].min())} at lr x {x:g}" for x, g in live.groupby("lr x")]
    return (f"The seed's regime (>= {at_least:.0%} of 200-token prefix products outside [0.5, 2]) begins at "
            + " and at ".join(parts) + ".")


CELL_COLUMNS = ["mu", "lr x", "seeds", "out@50", "out@100", "out@200", "n@200", "batch out@50", "batch out@100", "V'", "L*", "L* lo", "L* hi", "geo sd",
                "panel drift",
                "batch drift A>0", "batch drift A<0", "clip", "base reward", "reward", "collapsed", "seeds collapsed"]
"""the cell numbers S1's record keeps (evidence "cells")"""


def grid_evidence(cells: pd.DataFrame, measures: dict, panel: dict) -> dict:
    """S1's evidence from the grid: the judged `regime_share` and its cell, the cells (`CELL_COLUMNS`, and the
    collapse against the card where `cell_table` had one), the slope of log V' on log mu per lr scale (`mu_slope`),
    the panel's settings and base measurement (`panel`)."""
    share, cell = regime_share(cells)
    cols = CELL_COLUMNS + [c for c in ("collapsed vs card",) if c in cells]
    return {"regime_share": share, "regime_cell": list(cell) if cell else None,
            "cells": cells[cols].to_dict(orient="records"),
            "mu_slope": {f"{x:g}": mu_slope(measures, x) for x in dict.fromkeys(x for _, x, _ in measures)},
            "panel": panel}
