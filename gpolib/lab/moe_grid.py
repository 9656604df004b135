"""Notebook 08, P3's dose-response grid (DESIGN, P3, 2026-12-06): how much routing moves per update, against the
update's size (lr), the training mode (LoRA + router vs all parameters) and its off-policiness (mu).

- the grid as arms, one seed per cell, from the notebook's parameters: `grid_arms`, `grid_from_params` (prefetch
  trains them through `gspo_moe.one_seed_arms`);
- per cell, P3's measure (run-mean over layers, per layer, deepest layer, first update) beside how far the same
  updates moved the likelihoods of the same tokens (`moe.update_ratios`: token log-ratio spread, max token ratio,
  KL; GSPO's sequence log-ratio spread), GRPO's clip share and the training reward: `cell_measures`, `grid_table`;
- collapse as DESIGN defines it (training reward below the base's for >= 5 consecutive steps): `collapsed`;
- P3's evidence for `gspo_moe.verdict_p3` (`grid_evidence`) and the two figures: `dose_figure` (the measure against
  lr, one line per mode and mu, the paper's 10% marked) and `spread_figure` (per update, expert change against the
  token- and sequence-level log-ratio spread).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..config import TrainConfig
from ..models import EMBEDDED
from .base_models import card  # noqa: F401  (notebook 08 reads the grid model's card through this module)
from .collapse import COLLAPSE_STEPS, collapsed  # noqa: F401  (the grid's cells read DESIGN's collapse)
from .runs import max_over, mean_over, run_key

BALANCED = EMBEDDED["moe-floor"]
"""the grid's model: the load-balanced fine MoE (64 experts, top-8, 8 layers; P3's premise holds on its card: weakest
expert 0.29 x uniform), `moe-balanced` continued with the underload hinge (benchmarks/README.md, the sweep's rounds);
`moe-balanced` itself, the first round's model, read 0.23 on its card"""
DEFAULT_LR = TrainConfig().lr
"""the workbook's lr (3e-4, chosen for GRPO on the validation split): the grid's lrs are multiples of it"""
MODES = {"lora": {"train_router": True}, "full": {"lora_r": 0}}
"""training mode -> its fields: LoRA (r = 16) on attention and experts with each layer's router trained in full, or
every parameter trained (lora_r = 0; GSPO fine-tunes all)"""
MODE_LABELS = {"lora": "LoRA + router", "full": "all parameters"}
VAL = "data/tasks/val.jsonl"
"""the grid trains on validation prompts (DESIGN: tuning never touches the held-out split)"""
BASE_FIELDS = {"preset": "grpo", "loss_eps_high": 0.28, "warmup_steps": 0, "task_train": VAL, "eval_samples": 1,
               "rollout_autocast": "bfloat16", "expert_change": "full"}
"""shared by every cell: GRPO with Clip-Higher 0.2 / 0.28 (as the P4 arms), no warm-up (P3 is read at every update,
the first included), the bf16 rollout engine of notebook 08's arms, a small held-out check at the end; P3's measure
over every rollout token after every update (`expert_change='full'`, as the committed cells were trained: their
routing passes also give the update's token and sequence ratio spreads, `moe.update_ratios`)"""


def cell_name(mode: str, lr_mult: float, mu: int) -> str:
    """A cell's arm name: "grid-lora-lr2x-mu4"."""
    return f"grid-{mode}-lr{lr_mult:g}x-mu{mu}"


def grid_arms(*, lr_mults, mus, modes, full_lr_scale: float, steps: int, eval_prompts: int,
              model: str = BALANCED) -> dict:
    """Arm name -> spec of every cell of the grid: lr = DEFAULT_LR x lr_mult (x full_lr_scale for all-parameter
    cells, the scale at which their first update's KL matches the LoRA cell's), mu, mode, `steps` RL steps."""
    out = {}
    for mode in modes:
        scale = full_lr_scale if mode == "full" else 1.0
        for mu in mus:
            for mult in lr_mults:
                out[cell_name(mode, mult, mu)] = {**BASE_FIELDS, **MODES[mode], "model": model, "steps": steps,
                                                  "eval_prompts": eval_prompts, "mu": mu,
                                                  "lr": float(f"{DEFAULT_LR * mult * scale:.6g}")}
    return out


def grid_from_params(p: dict) -> dict:
    """`grid_arms` from notebook 08's parameters (GRID_*); {} when the notebook asks for no grid (GRID_STEPS 0)."""
    if not p.get("GRID_STEPS"):
        return {}
    return grid_arms(lr_mults=p["GRID_LR_MULTS"], mus=p["GRID_MUS"], modes=p["GRID_MODES"],
                     full_lr_scale=p["GRID_FULL_LR_SCALE"], steps=p["GRID_STEPS"],
                     eval_prompts=p["GRID_EVAL_PROMPTS"], model=p.get("GRID_MODEL", BALANCED))


PROBES = {"probe_replay": {"routing_replay": True}, "probe_gspo": {"preset": "gspo", "loss_eps_high": None}}
"""the replay probe's arms beside a grid cell's GRPO: GRPO + Routing Replay, and GSPO (its own clip, 3e-4 / 4e-4)"""
PROBE_ROWS = {"GRPO": "grid", "GRPO + replay": "probe_replay", "GSPO": "probe_gspo"}
"""the probe's rows at a cell -> the prefix of their arm's name (GRPO: the grid's own cell)"""
PROBE_COLOURS = {"GRPO": "tab:blue", "GRPO + replay": "tab:green", "GSPO": "tab:orange"}


def probe_arm(prefix: str, cell: str) -> str:
    """The arm of a probe row at a grid cell: ("probe_replay", "grid-lora-lr1x-mu8") -> "probe_replay-lora-lr1x-mu8"."""
    return prefix + cell[len("grid"):]


def probe_arms(params: dict) -> dict:
    """The replay probe (full.yaml's GRID_PROBE, declared before its runs; observed, not judged): at each named grid
    cell, GRPO + Routing Replay and GSPO without it, with the cell's every other field and seed 0, beside the cell's
    own GRPO run: whether replay (or the sequence ratio) keeps the cell's training reward where GRPO's falls. Arm
    names "probe_replay-lora-lr1x-mu8" (`probe_arm`); {} without GRID_PROBE."""
    cells = params.get("GRID_PROBE") or []
    if not cells:
        return {}
    grid = grid_from_params(params)
    missing = [c for c in cells if c not in grid]
    if missing:
        raise ValueError(f"GRID_PROBE names {missing}, not cells of the grid; cells: {sorted(grid)}")
    out = {}
    for cell in cells:
        for probe, fields in PROBES.items():
            spec = {**grid[cell], **fields}
            out[probe_arm(probe, cell)] = {k: v for k, v in spec.items() if v is not None}
    return out


def probe_table(metrics_by_run: dict, cells, seed: int = 0) -> pd.DataFrame:
    """Per probe cell and row (`PROBE_ROWS`: GRPO, the grid's run; GRPO + replay; GSPO): the training reward per step,
    P3's measure (run-mean over layers) and DESIGN's collapse against the step-0 reward. Rows (cell, label)."""
    rows = {}
    for cell in cells:
        for label, prefix in PROBE_ROWS.items():
            m = metrics_by_run.get(run_key(probe_arm(prefix, cell), seed))
            if m:
                c = cell_measures(m)
                rows[(cell, label)] = {"run_mean": c["run_mean"], "collapsed": c["collapsed"],
                                       **{f"reward {i}": r for i, r in enumerate(c["rewards"])}}
    return pd.DataFrame.from_dict(rows, orient="index")


def probe_figure(table: pd.DataFrame):
    """The replay probe (`probe_table`): per probe cell, the training reward per step of each row, with the step-0
    reward (the base's, DESIGN's collapse line) dashed; each row's P3 measure in its label."""
    import matplotlib.pyplot as plt

    from . import plots
    cells = list(dict.fromkeys(table.index.get_level_values(0))) if len(table) else []
    fig, axes = plt.subplots(1, max(1, len(cells)), figsize=(5.2 * max(1, len(cells)), 3.6), squeeze=False)
    steps = [c for c in table.columns if c.startswith("reward ")]
    for ax, cell in zip(axes[0], cells):
        part = table.loc[cell]
        for label, row in part.iterrows():
            ax.plot(range(len(steps)), row[steps].to_numpy(dtype=float), marker="o", color=PROBE_COLOURS[label],
                    label=f"{label} (experts changed {100 * row['run_mean']:.1f}%)")
        ax.axhline(part["reward 0"].iloc[0], ls="--", c="grey", lw=1, label="step-0 reward (the base's)")
        ax.set(xlabel="step", ylabel="training reward", ylim=(-0.02, None))
        ax.legend(fontsize=7)
        plots.title(ax, "P4 probe", cell)
    fig.tight_layout()
    return fig


def parse_cell(arm: str) -> dict:
    """"grid-lora-lr2x-mu4" -> {"mode": "lora", "lr_mult": 2.0, "mu": 4}."""
    _, mode, lr, mu = arm.split("-")
    return {"mode": mode, "lr_mult": float(lr[2:-1]), "mu": int(mu[2:])}


# ---------------------------------------------------------------- per cell

def _layers(metrics: list) -> list:
    n = len({k for r in metrics for k in r if k.startswith("moe/expert_change/l")})
    return [mean_over(metrics, f"moe/expert_change/l{i}") for i in range(n)]


def cell_measures(metrics: list, base_reward: float | None = None) -> dict:
    """One cell's row: P3's measure (run-mean over layers and updates, the deepest layer, the first step's updates),
    the same updates' token log-ratio spread, max token ratio and KL and GSPO's sequence log-ratio spread on the
    rollout tokens (`moe.update_ratios`), the log-ratio spread and clip share the objective saw (0 at mu = 1), the
    training reward per step and DESIGN's collapse against the base's training reward: `base_reward`, else the run's
    step-0 reward (step 0's rollout samples the base policy before any update; every cell of the grid shares it, one
    seed, one model), as S1's grid reads it."""
    layers = _layers(metrics)
    rewards = [r["reward/mean"] for r in metrics]
    base = rewards[0] if base_reward is None and rewards else base_reward
    first = metrics[0] if metrics else {}
    return {"run_mean": sum(layers) / len(layers) if layers else math.nan, "deepest": layers[-1] if layers else math.nan,
            "first_update": first.get("moe/expert_change", math.nan), "per_layer": layers,
            "token_log_ratio_std": mean_over(metrics, "moe/update_log_ratio_std"),
            "max_token_ratio": max_over(metrics, "moe/update_max_ratio"),
            "seq_log_ratio_std": mean_over(metrics, "moe/update_seq_log_ratio_std"),
            "first_kl": first.get("moe/update_kl", math.nan),
            "objective_log_ratio_std": mean_over(metrics, "ratio/log_std"), "clip_frac": mean_over(metrics, "clip/frac"),
            "rewards": rewards, "skipped": sum(int(r.get("update/skipped", 0)) for r in metrics),
            "base_reward": base, "collapsed": collapsed(rewards, base)}


def grid_table(metrics_by_run: dict, arms, base_reward: float | None = None, seed: int = 0) -> pd.DataFrame:
    """One row per cell (index its arm name): mode, lr multiple, lr, mu and `cell_measures` (collapse against each
    cell's step-0 reward unless `base_reward` is given); cells not yet run are left out."""
    rows = {}
    for arm, spec in arms.items():
        m = metrics_by_run.get(run_key(arm, seed))
        if m:
            rows[arm] = {**parse_cell(arm), "lr": spec["lr"], **cell_measures(m, base_reward)}
    return pd.DataFrame.from_dict(rows, orient="index")


def layer_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per cell, P3's measure (%) per layer: rows cells, columns layers."""
    return pd.DataFrame({arm: {f"layer {i}": 100 * x for i, x in enumerate(v)} for arm, v in table["per_layer"].items()}).T


def grid_evidence(table: pd.DataFrame) -> list:
    """The cells as `gspo_moe.judge_grid` reads them: {"cell", "run_mean", "deepest", "collapsed"}, with the
    per-layer measure ("per_layer") the README's routing paragraph reads."""
    return [{"cell": f"{MODE_LABELS[r.mode]}, lr {r.lr:.3g} ({r.lr_mult:g}x), mu {r.mu}", "run_mean": r.run_mean,
             "deepest": r.deepest, "collapsed": bool(r.collapsed), "per_layer": [float(x) for x in r.per_layer]}
            for r in table.itertuples()]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def routing_paragraph(p3: dict, p4: dict) -> str:
    """What routing did, in words, from claims.json's P3 and P4 records (README's generated block): the premise, the
    grid's range of P3's measure over the cells that did not collapse, per layer at its largest cell, the default
    cell per layer, and P4 at its operating point."""
    e3, e4 = p3.get("evidence", {}), p4.get("evidence", {})
    out = [f"**P3 ({p3['verdict']}).** Premise: {p3['judgement']['parts'][0]['text']}."]
    cells = e3.get("grid") or []
    live = [c for c in cells if not c["collapsed"]]
    if live:
        lo, hi = min(live, key=lambda c: c["run_mean"]), max(live, key=lambda c: c["run_mean"])
        out.append(f"Over P3's grid ({len(cells)} cells, {len(cells) - len(live)} collapsed) the share of activated "
                   f"experts that change per update, mean over layers, runs from {_pct(lo['run_mean'])} "
                   f"({lo['cell']}) to {_pct(hi['run_mean'])} ({hi['cell']}; per layer "
                   + ", ".join(_pct(x) for x in hi.get("per_layer", [])) + "); the paper reports ~10% on "
                   "Qwen3-30B-A3B.")
    out += [f"{e3[k][0].upper()}{e3[k][1:]}" for k in ("grid_summary", "probe_summary") if e3.get(k)]
    layers = e3.get("expert_change_per_layer") or []
    if layers:
        out.append(f"At the default setting (fine MoE, LoRA + router, lr 3e-4, mu 4) the activated experts that "
                   f"change per update are {_pct(sum(layers) / len(layers))} (mean over layers), from "
                   f"{_pct(layers[0])} in layer 0 to {_pct(layers[-1])} in layer {len(layers) - 1}.")
    keys = [k for k in P4_LABELS if f"acc_{k}" in e4]
    if keys:
        acc = ", ".join(f"{P4_LABELS[k]} {sum(e4[f'acc_{k}']) / len(e4[f'acc_{k}']):.3f}" for k in keys)
        falls = ", ".join(f"{P4_LABELS[k]} {sum(bool(x) for x in e4[f'collapsed_{k}'])}" for k in keys)
        out.append(f"**P4 ({p4['verdict']})** at {e4.get('where') or 'the default cell'}: held-out accuracy (T = 1, "
                   f"seed means) {acc}; runs that collapsed {falls}.")
    return " ".join(out)


def grid_summary(table: pd.DataFrame, level: float = 0.05) -> str:
    """The grid in one sentence: how many cells collapse, the range of P3's measure (run-mean and deepest layer) over
    the cells that do not, and how many of the cells at >= `level` collapse."""
    bad = table["collapsed"].astype(bool)
    live, high = table[~bad], table[table["run_mean"] >= level]
    out = f"{int(bad.sum())} of {len(table)} cells collapse"
    if len(live):
        out += (f"; the {len(live)} that do not ({', '.join(live.index)}) move {100 * live.run_mean.min():.1f}-"
                f"{100 * live.run_mean.max():.1f}% of activated experts per update (deepest layer up to "
                f"{100 * live.deepest.max():.1f}%)")
    if len(high):
        out += (f"; of the {len(high)} cells at >= {100 * level:.0f}% (up to {100 * high.run_mean.max():.1f}%), "
                f"{int(high['collapsed'].astype(bool).sum())} collapse")
    return out + "."


def probe_summary(table: pd.DataFrame) -> str:
    """The replay probe in one sentence: per arm, in how many of the probe's cells its run collapsed."""
    if not len(table):
        return "no probe runs."
    arms = table.index.get_level_values(1)
    return "; ".join(f"{arm} collapsed in {int(table[arms == arm]['collapsed'].astype(bool).sum())} of "
                     f"{int((arms == arm).sum())} cells" for arm in dict.fromkeys(arms)) + "."


P4_LABELS = {"grpo": "GRPO", "grpo_replay": "GRPO + replay", "gspo": "GSPO", "sapo": "SAPO"}
"""P4's evidence keys -> how its verdict (`gspo_moe.verdict_p4`) and the README name them"""
OPERATING_LEVELS = (0.10, 0.05)
"""P4's operating point (DESIGN): the smallest-update cell whose run-mean is >= 10%, else >= 5%"""


def update_order(row) -> tuple:
    """How the rule orders cells by update size (fixed 2026-12-06, before the second grid's runs): the lr multiple
    (the all-parameter lrs are scaled to the same first-update KL, so a multiple means one update size in both
    modes), then mu (fewer updates per batch: closer to on-policy), then LoRA + router before all parameters (fewer
    parameters moved)."""
    return (row["lr_mult"], row["mu"], list(MODES).index(row["mode"]))


def operating_point(table: pd.DataFrame) -> tuple[str | None, str]:
    """DESIGN's rule for P4's operating point over `grid_table`'s cells: among the cells that did not collapse, the
    smallest update (`update_order`) whose run-mean over layers is >= 10%, else >= 5%. Returns (the cell's arm name
    or None, a sentence saying which level and why)."""
    live = table[~table["collapsed"].astype(bool)]
    for level in OPERATING_LEVELS:
        ok = live[live["run_mean"] >= level]
        if len(ok):
            arm = min(ok.index, key=lambda a: update_order(ok.loc[a]))
            return arm, (f"{arm}: the smallest update of the {len(ok)} cells whose run-mean is >= {100 * level:.0f}% "
                         f"({100 * ok.loc[arm, 'run_mean']:.1f}%), among the {len(live)} of {len(table)} that did not "
                         "collapse")
    return None, (f"no cell that did not collapse ({len(live)} of {len(table)}) reaches a run-mean of "
                  f"{100 * OPERATING_LEVELS[-1]:.0f}%: P4 has no operating point")


# ---------------------------------------------------------------- figures

def dose_figure(table: pd.DataFrame, paper: float = 0.10, level: float = 0.05):
    """P3 against lr: left the run-mean over layers, right the deepest layer, one line per (mode, mu) (colour mode,
    line style mu), collapsed cells as crosses; the paper's ~10% dashed, P3's 5% level dotted; log axes."""
    import matplotlib.pyplot as plt

    from . import plots
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    colours = dict(zip(MODES, ("tab:blue", "tab:red")))
    styles = {1: ":", 4: "-", 8: "--"}
    for ax, key, what in zip(axes, ("run_mean", "deepest"), ("mean over layers", "deepest layer")):
        for (mode, mu), cells in table.sort_values("lr_mult").groupby(["mode", "mu"], sort=True):
            ax.plot(cells.lr_mult, 100 * cells[key], ls=styles.get(mu, "-."), marker="o", color=colours[mode],
                    label=f"{MODE_LABELS[mode]}, mu {mu}")
        bad = table[table.collapsed.astype(bool)]
        ax.scatter(bad.lr_mult, 100 * bad[key], marker="x", s=80, color="black", zorder=3, label="collapsed")
        ax.axhline(100 * paper, ls="--", c="grey", lw=1, label=f"paper ~{100 * paper:.0f}%")
        ax.axhline(100 * level, ls=":", c="grey", lw=1, label=f"P3's level {100 * level:.0f}%")
        ax.set(xscale="log", yscale="log", xlabel=f"lr / {DEFAULT_LR:g} (all-parameter cells: x their KL scale)",
               ylabel="activated experts changed per update (%)")
        _plain_ticks(ax.xaxis, sorted(set(table.lr_mult)), table.lr_mult)
        _plain_ticks(ax.yaxis, (1, 2, 5, 10, 20, 50), 100 * table[key])
        plots.title(ax, "P3", what)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def _plain_ticks(axis, values, data) -> None:
    """Ticks of a log axis at `values`, written plainly (2, 5, 10), no minor labels to collide; left to matplotlib
    unless every plotted value `data` is positive (a smoke run's shares can be 0)."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    data = np.asarray(data, dtype=float)
    if not (data.size and (data > 0).all()):
        return
    axis.set_major_locator(FixedLocator(list(values)))
    axis.set_major_formatter(lambda v, _: f"{v:g}")
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


def spread_figure(metrics_by_run: dict, arms, seed: int = 0):
    """Per step of every cell (its updates' mean; one update each at mu = 1): the share of activated experts changed
    (x) against the std of the token log ratios and of GSPO's sequence log ratios of the same rollout after the same
    updates (y): token ratios spread with the routing, sequence ratios average it out. Colour: level; log axes."""
    import matplotlib.pyplot as plt

    from . import plots
    rows = [(r["moe/expert_change"], r["moe/update_log_ratio_std"], r["moe/update_seq_log_ratio_std"],
             parse_cell(arm)["mode"]) for arm in arms for r in metrics_by_run.get(run_key(arm, seed), [])
            if r.get("moe/update_log_ratio_std") is not None]
    frame = pd.DataFrame(rows, columns=["change", "token", "sequence", "mode"])
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    if frame.empty or not ((frame.change > 0) & (frame.token > 0) & (frame.sequence > 0)).any():
        ax.text(0.5, 0.5, "no update with routing change and ratio spreads logged", ha="center", transform=ax.transAxes)
        return fig
    frame = frame[(frame.change > 0) & (frame.token > 0) & (frame.sequence > 0)]  # log axes
    for level, colour in (("token", "tab:orange"), ("sequence", "tab:green")):
        for mode, marker in (("lora", "o"), ("full", "^")):
            part = frame[frame["mode"] == mode]
            ax.scatter(100 * part.change, part[level], s=18, marker=marker, color=colour, alpha=0.7,
                       label=f"{level} log ratio, {MODE_LABELS[mode]}")
    ax.axvline(10, ls="--", c="grey", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="activated experts changed by the update (%)",
           ylabel="std of log ratio after the update")
    _plain_ticks(ax.xaxis, (1, 2, 5, 10, 20, 50), 100 * frame.change)
    ax.legend(fontsize=7)
    plots.title(ax, "P3", "per update: routing change against ratio spread")
    fig.tight_layout()
    return fig
