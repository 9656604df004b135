"""One look for every figure of the workbook: theme, colours per algorithm, helpers.

Figures are saved with `save(fig, name, profile)` under `figures_dir(profile)`; axis labels come
from the metric registry (`gpolib.metrics`). Importing this module leaves matplotlib's backend alone
(matplotlib picks a non-interactive one itself where there is no display).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from .. import paths
from ..metrics import label as metric_label

ALGO_COLORS: dict[str, str] = {
    "grpo": "#4C72B0", "dapo": "#DD8452", "gspo": "#55A868", "gfpo": "#C44E52",
    "dr_grpo": "#8172B3", "ppo": "#937860", "vapo": "#DA8BC3", "cispo": "#1B9E77", "gmpo": "#A6761D",
}
"""fixed colour per algorithm, used whenever a run or bar label starts with its name"""

_SEED_RE = re.compile(r"[/_\-](seed|s)\d+$")


def set_theme() -> None:
    """Seaborn whitegrid with the workbook's font sizes."""
    sns.set_theme(style="whitegrid", context="notebook", rc={"figure.dpi": 100, "axes.titlesize": 11})


def algo_of(label: str) -> str | None:
    """The longest algorithm name that `label` starts with ("dr_grpo/seed1" -> "dr_grpo")."""
    hits = [a for a in ALGO_COLORS if label.lower().startswith(a)]
    return max(hits, key=len) if hits else None


def palette(labels) -> dict[str, str]:
    """Label -> colour: the algorithm's colour if the label starts with one, else seaborn's."""
    spare = iter(sns.color_palette("deep").as_hex()[7:] + sns.color_palette("dark").as_hex())
    return {lab: ALGO_COLORS.get(algo_of(lab)) or next(spare) for lab in dict.fromkeys(labels)}


def save(fig, name: str, profile: str = "full", root: Path | str | None = None) -> Path:
    """Write `fig` as `<figures_dir(profile)>/<name>.png` (dpi 120); returns the path.

    No "Software" text chunk (matplotlib's version): the bytes depend on the pixels only, so an unchanged
    figure rewrites the same file (Agg's PNGs carry no timestamp)."""
    out = paths.figures_dir(profile, root) / (name if name.endswith(".png") else f"{name}.png")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, bbox_inches="tight", metadata={"Software": None})
    return out


def title(ax, claim_id: str | None, text: str) -> None:
    """Axis title prefixed by the claim id: "D1 · entropy with Clip-Higher"."""
    ax.set_title(f"{claim_id} · {text}" if claim_id else text)


def _long_frame(metrics_by_run: dict[str, list[dict]], keys, smooth: int) -> pd.DataFrame:
    """Rows (run, group, step, metric, value); seeds of one run name share a group."""
    rows = []
    for run, steps in metrics_by_run.items():
        df = pd.DataFrame(steps)
        for k in keys:
            if k in df:
                vals = df[k].astype(float).rolling(smooth, min_periods=1).mean()
                rows.append(pd.DataFrame({"run": run, "group": _SEED_RE.sub("", run),
                                          "step": df["step"], "metric": k, "value": vals}))
    return pd.concat(rows, ignore_index=True)


def training_curves(metrics_by_run: dict[str, list[dict]], keys=("reward/mean", "len/mean", "entropy/mean"),
                    claim_id: str | None = None, smooth: int = 1, title_text: str = ""):
    """One subplot per metric, x = step, one line per run (seeds of a run: mean ± sd band).

    `smooth` is a rolling-mean window in steps. Runs named "<algo>..." get the algo colour.
    """
    df = _long_frame(metrics_by_run, keys, smooth)
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.3), squeeze=False)
    for ax, k in zip(axes[0], keys):
        sub = df[df.metric == k]
        sns.lineplot(sub, x="step", y="value", hue="group", palette=palette(sub.group), errorbar="sd", ax=ax)
        ax.set(xlabel="step", ylabel=metric_label(k))
        ax.legend(fontsize=8, title=None)
    if claim_id or title_text:
        fig.suptitle(f"{claim_id} · {title_text}" if claim_id else title_text)
    fig.tight_layout()
    return fig


def bar_compare(values: dict[str, float | list[float]], ylabel: str, claim_id: str | None = None,
                title_text: str = "", paper: dict[str, float] | None = None):
    """Bars per label (lists = seeds: mean with sd error bar); `paper` adds the paper's bars beside."""
    rows = [(lab, "ours", float(v)) for lab, vs in values.items() for v in np.atleast_1d(vs)]
    rows += [(lab, "paper", float(v)) for lab, v in (paper or {}).items()]
    df = pd.DataFrame(rows, columns=["label", "source", "value"])
    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(values) + 2), 3.4))
    if paper:
        sns.barplot(df, x="label", y="value", hue="source", errorbar="sd", ax=ax)
    else:
        sns.barplot(df, x="label", y="value", hue="label", palette=palette(df.label), errorbar="sd", ax=ax)
    ax.set(xlabel="", ylabel=ylabel)
    ax.tick_params(axis="x", rotation=20)
    title(ax, claim_id, title_text)
    fig.tight_layout()
    return fig


@dataclass
class LinearFit:
    """Least-squares line y = slope * x + intercept."""

    slope: float
    """dy/dx"""
    intercept: float
    """y at x = 0"""
    r2: float
    """coefficient of determination of the fit"""


def linear_fit(x, y) -> LinearFit:
    """Fit y = a x + b by least squares and report R^2."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    a, b = np.polyfit(x, y, 1)
    ss_res, ss_tot = np.sum((y - (a * x + b)) ** 2), np.sum((y - y.mean()) ** 2)
    return LinearFit(float(a), float(b), float(1 - ss_res / ss_tot) if ss_tot > 0 else 1.0)


def scatter_fit(x, y, xlabel: str, ylabel: str, claim_id: str | None = None, title_text: str = "",
                label: str = "measured", ax=None):
    """Scatter of (x, y) with the fitted line, slope and R^2 in the legend; returns (fig, LinearFit)."""
    fit = linear_fit(x, y)
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(4.6, 3.4))
    ax.scatter(x, y, s=22, label=label)
    xs = np.linspace(np.min(x), np.max(x), 50)
    ax.plot(xs, fit.slope * xs + fit.intercept, "--", color="0.25", label=f"fit: slope {fit.slope:.3g}, $R^2$ = {fit.r2:.2f}")
    ax.set(xlabel=xlabel, ylabel=ylabel)
    ax.legend(fontsize=8)
    title(ax, claim_id, title_text)
    return fig, fit


def runs_plot(frame: pd.DataFrame, metric: str, runs=None, hue: str = "arm", smooth: int = 1, ax=None,
              claim_id: str | None = None, title_text: str = ""):
    """One metric against step for any set of runs of `runs.load_runs()`: one line per `hue` value, the
    runs sharing it (its seeds) as their mean with a ± sd band. runs: run names to keep (None: all);
    smooth: rolling-mean window in steps, within each run. Returns the figure."""
    df = frame if runs is None else frame[frame["run"].isin(list(runs))]
    df = df[["run", hue, "step", metric]].dropna(subset=[metric]).sort_values(["run", "step"])
    df = df.assign(**{metric: df.groupby("run")[metric].transform(lambda s: s.rolling(smooth, min_periods=1).mean()),
                      hue: df[hue].astype(str)})
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(5.0, 3.4))
    sns.lineplot(df, x="step", y=metric, hue=hue, palette=palette(df[hue]), errorbar="sd", ax=ax)
    ax.set(xlabel="step", ylabel=metric_label(metric))
    ax.legend(fontsize=8, title=None)
    title(ax, claim_id, title_text or metric)
    return fig
