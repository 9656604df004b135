"""One look for every figure of the workbook: theme, colours per algorithm, helpers.

Figures are saved with `save(fig, name, profile)` under `figures_dir(profile)`; axis labels come
from the metric registry (`gpolib.metrics`). Importing this module leaves matplotlib's backend alone
(matplotlib picks a non-interactive one itself where there is no display).
"""
from __future__ import annotations

import re
import io
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle
import numpy as np
import pandas as pd
import seaborn as sns

from .. import paths
from ..folders import write_bytes
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
    figure rewrites the same file (Agg's PNGs carry no timestamp). Before drawing, `steady` rounds what the
    axes draw far below a pixel, so that float results differing in their last bits between CPUs (a least-squares
    fit, a sum in another order) draw the same pixels; the figure shown after `save` is the rounded one too."""
    out = paths.figures_dir(profile, root) / (name if name.endswith(".png") else f"{name}.png")
    out.parent.mkdir(parents=True, exist_ok=True)
    steady(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight", metadata={"Software": None})
    write_bytes(out, buf.getvalue())  # atomic: a kill mid-save leaves the old figure
    return out


STEADY_DIGITS = 7
"""`steady` rounds a linear axis's data to 10^-STEADY_DIGITS of its span's decade (a pixel is ~10^-3 of the
span), a log axis's and an image's to STEADY_DIGITS significant digits"""


def _grid(values, step: float | None):
    """Float array rounded to multiples of `step`, or to STEADY_DIGITS significant digits (step None); non-finite
    values and anything not numeric (dates, categories) come back unchanged."""
    mask = np.ma.getmaskarray(values) if np.ma.isMaskedArray(values) else None
    try:
        a = np.array(np.ma.getdata(values), dtype=float)
    except (TypeError, ValueError):
        return values
    if mask is not None:
        return np.ma.array(_grid(a, step), mask=mask)
    ok = np.isfinite(a)
    if step is None:
        with np.errstate(divide="ignore"):
            exp = np.floor(np.log10(np.where(ok & (a != 0), np.abs(a), 1.0)))
        step = 10.0 ** (exp - (STEADY_DIGITS - 1))  # (...) per value
    return np.where(ok, np.round(a / step) * step, a)


def _axis_step(ax, which: str) -> float | None:
    """The rounding step of one axis: 10^(decade of its span - STEADY_DIGITS); None on a non-linear axis."""
    if (ax.get_xscale() if which == "x" else ax.get_yscale()) != "linear":
        return None
    lo, hi = ax.get_xlim() if which == "x" else ax.get_ylim()
    span = abs(hi - lo)
    return 10.0 ** (np.floor(np.log10(span)) - STEADY_DIGITS) if np.isfinite(span) and span > 0 else None


def steady(fig) -> None:
    """Round, in place, every axes' limits and the data of its lines, scatter points and filled areas onto the
    axis's grid (`_axis_step`), and image data to STEADY_DIGITS significant digits: last-bit float differences
    then move no pixel. Limits are frozen at their autoscaled values first, so the view does not change."""
    for ax in fig.axes:
        sx, sy = _axis_step(ax, "x"), _axis_step(ax, "y")
        ax.set_xlim(*(_grid(ax.get_xlim(), sx) if sx else ax.get_xlim()))
        ax.set_ylim(*(_grid(ax.get_ylim(), sy) if sy else ax.get_ylim()))
        for line in ax.lines:
            x, y = line.get_data(orig=True)
            line.set_data(_grid(x, sx), _grid(y, sy))
        for coll in ax.collections:
            if coll.get_offset_transform() == ax.transData and len(coll.get_offsets()):
                off = np.asarray(coll.get_offsets(), dtype=float)  # (n, 2)
                coll.set_offsets(np.column_stack([_grid(off[:, 0], sx), _grid(off[:, 1], sy)]))
            if coll.get_transform() == ax.transData:
                for path in coll.get_paths():
                    v = path.vertices  # (n, 2)
                    if not path.readonly and len(v):
                        path.vertices = np.column_stack([_grid(v[:, 0], sx), _grid(v[:, 1], sy)])
        for patch in ax.patches:
            if isinstance(patch, Rectangle) and patch.get_data_transform() == ax.transData:
                x0, y0 = patch.get_xy()
                x1, y1 = x0 + patch.get_width(), y0 + patch.get_height()
                (x0, x1), (y0, y1) = _grid([x0, x1], sx), _grid([y0, y1], sy)
                patch.set_bounds(x0, y0, x1 - x0, y1 - y0)
        for im in ax.images:
            a = im.get_array()
            if a is not None and np.issubdtype(a.dtype, np.floating):
                im.set_data(_grid(a, None))


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
