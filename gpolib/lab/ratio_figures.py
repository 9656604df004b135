"""Notebook 02's grid figure and the panel's base measurement (S1).

- `panel_base`: the panel's responses at step 0, sampled from the base (pi_old of step 0 is the base policy), of
  every seed's runs: their length distribution, the share reaching 200 tokens, and accuracy;
- `grid_figure`: L* against mu, one line per lr scale, with the seed's 200 tokens and the length at which 0.99^L
  leaves [0.5, 2] marked, beside the share of 200-token prefix products outside [0.5, 2] against mu.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import ratio_prefix
from .ratio_grid import REACH


def panel_base(records: dict) -> dict:
    """From {run name: `cached_grid_run` record}: the base's panel responses (step 0, k = the first saved update: one
    record per response), one run per training seed (every cell of a seed samples the same step-0 panel): their
    lengths' mean / quantiles / max, the share reaching REACH tokens, and the accuracy (steps.csv's `panel/acc` at
    step 0)."""
    by_seed = {}
    for name, rec in records.items():
        by_seed.setdefault(name.rsplit("seed", 1)[-1], rec)
    lengths, acc = [], []
    for rec in by_seed.values():
        pan = rec["panel"]
        first = (pan["step"] == 0) & (pan["update"] == pan["update"].min())
        lengths += pan["length"][first].tolist()
        acc.append(float(rec["steps"]["panel/acc"].iloc[0]))
    L = np.asarray(lengths)
    return {"responses": int(len(L)), "len_mean": float(L.mean()), "len_q10": float(np.quantile(L, 0.1)),
            "len_median": float(np.median(L)), "len_q90": float(np.quantile(L, 0.9)), "len_max": int(L.max()),
            f"reach_{REACH}": float((L >= REACH).mean()), "acc": float(np.mean(acc))}


def grid_figure(cells: pd.DataFrame, regime_at: float = 0.10):
    """Two panels: L* (tokens at which the sd of the log product reaches log 2; bars: the cell's 95% bootstrap
    interval over prompts) against mu per lr scale, the seed's
    200 tokens and 0.99^L's exit from [0.5, 2] (L = 69) as horizontal lines; the share outside [0.5, 2] at L = 200
    against mu per lr scale with the regime's `regime_at` line. Returns the figure."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    for x, g in cells.groupby("lr x"):
        g = g.sort_values("mu")
        mid = g["L*"].replace(np.inf, np.nan)
        band = np.vstack([mid - g["L* lo"], g["L* hi"].replace(np.inf, np.nan) - mid])  # (2, cells): 95% interval
        left.errorbar(g["mu"], mid, yerr=np.clip(np.nan_to_num(band), 0, None), fmt="o-", capsize=3,
                      label=f"lr x {x:g}")
        right.plot(g["mu"], g["out@200"], "o-", label=f"lr x {x:g}")
    dead = cells[cells["collapsed"]]
    if len(dead):
        right.plot(dead["mu"], dead["out@200"], "x", color="k", ms=9, label="collapsed cell")
    left.axhline(REACH, color="0.3", ls="--", lw=1, label=f"the seed's {REACH} tokens")
    left.axhline(ratio_prefix.compounding_length(0.99), color="0.3", ls=":", lw=1,
                 label=f"0.99^L leaves [0.5, 2] (L = {ratio_prefix.compounding_length(0.99)})")
    left.set(xscale="log", yscale="log", xlabel=r"$\mu$ (minibatch updates per batch)",
             ylabel="L* (tokens): sd of log product = log 2")
    right.axhline(regime_at, color="0.3", ls="--", lw=1, label=f"the regime: {regime_at:.0%}")
    right.set(xscale="log", xlabel=r"$\mu$ (minibatch updates per batch)",
              ylabel=f"share outside [0.5, 2] at L = {REACH}")
    for ax in (left, right):
        ax.set_xticks(sorted(cells["mu"].unique()), [str(m) for m in sorted(cells["mu"].unique())])
        ax.set_xticks([], minor=True)
        ax.legend(fontsize=7)
    return fig


def v_curves(records: dict, keys: dict) -> pd.DataFrame:
    """V(L) on `ratio_grid.V_GRID` at k = mu per cell, the mean over its seeds: rows L, columns "mu <m>, lr x <x>".
    records: {run name: `cached_grid_run` record}; keys: {run name: (mu, lr scale, seed)}."""
    from .ratio_grid import V_GRID, at_update

    by_cell: dict = {}
    for name, (mu, x, _) in keys.items():
        S, step, _ = ratio_prefix.prefix_sums(at_update(records[name]["panel"], mu), REACH)
        by_cell.setdefault(f"mu {mu}, lr x {x:g}", []).append(ratio_prefix.pooled_var(S[:, np.asarray(V_GRID) - 1],
                                                                                      step))
    return pd.DataFrame({cell: np.mean(vs, axis=0) for cell, vs in by_cell.items()}, index=pd.Index(V_GRID, name="L"))


def panel_probe() -> pd.DataFrame:
    """The committed base probe that chose the panel (benchmarks/panel_lengths_cpu.json): per operator count the
    length distribution, the share reaching REACH tokens, the share cut at the probe's budget, the accuracy."""
    import json

    from .. import paths

    probe = json.loads((paths.repo_root() / "benchmarks" / "panel_lengths_cpu.json").read_text())
    return pd.DataFrame(probe["rows"]).set_index("n_ops")[["len_mean", "len_q50", "len_q90", "len_max",
                                                           f"reach_{REACH}", "cut", "acc"]]
