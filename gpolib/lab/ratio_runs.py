"""Notebook 02's runs: the mu x lr grid's configurations and folders, what a finished folder must hold, the prefetch hooks.

- `grid_configs` / `notebook_plan`: the notebook's runs from its parameters (GRPO at mu updates and lr x scale);
- one folder per run (`cached_grid_run`): ratios.csv / token_ratios.npz (the RL batch after the mu updates, as
  before the grid), panel_ratios.npz (`ratio_prefix.save_tokens` plus `update`, `ratio_panel.grid_records`),
  steps.csv; a folder is read back only when complete (`records_problem`, `panel_problem`);
- `prefetch_runs` / `prefetch_train`: `gpolib.workbook.prefetch` trains the grid ahead through them;
- `ratio_difference`: the grid's mu = 4, lr x 1 cell against the superseded runs of the same configuration.
"""
from __future__ import annotations

import io
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from . import ratio_prefix
from .ratio_panel import PANEL_FILE, STEP_COLUMNS, STEPS_FILE, PanelSpec, grid_records, saved_updates


def records_problem(run_dir, steps: int) -> str | None:
    """Why a finished ratio run's `ratios.csv` and `token_ratios.npz` cannot be reused (a file cut short or
    corrupt: a step missing, unequal rows per step, a non-finite value, the two files disagreeing), None when
    they are complete."""
    csv, npz = Path(run_dir) / "ratios.csv", Path(run_dir) / ratio_prefix.TOKENS_FILE
    try:
        df, tok = pd.read_csv(csv), ratio_prefix.load_tokens(npz)
    except Exception as err:  # pandas' and numpy's many parse errors: a corrupt file is recomputed, not trusted
        return f"{csv.name} or {npz.name} does not parse ({type(err).__name__}: {err})"
    columns = ["step", "prompt", "length", "log_prod_rho", "log_s", "advantage"]
    if list(df.columns) != columns:
        return f"{csv} has columns {list(df.columns)}, not {columns}"
    per_step = df.groupby("step").size()
    if sorted(per_step.index) != list(range(steps)) or per_step.nunique() != 1:
        return f"{csv} holds {len(df)} rows over {per_step.size} of {steps} steps (rows per step must be equal)"
    if not np.isfinite(df.to_numpy(dtype=float)).all() or not np.isfinite(tok["log_rho"]).all():
        return f"{csv} or {npz.name} holds a non-finite value"
    if len(tok["length"]) != len(df) or not (tok["length"] == df["length"].to_numpy()).all() \
            or tok["offsets"][-1] != len(tok["log_rho"]):
        return f"{npz} does not match {csv.name} ({len(tok['length'])} responses, {len(df)} rows)"
    return None


def panel_problem(run_dir, steps: int, mu: int, spec: PanelSpec) -> str | None:
    """Why a finished grid run's panel files cannot be reused (another panel, a step or update missing, unequal
    records per (step, k), a non-finite value), None when complete."""
    run = Path(run_dir)
    try:
        tok = ratio_prefix.load_tokens(run / PANEL_FILE)
        table = pd.read_csv(run / STEPS_FILE)
        summary = json.loads((run / "summary.json").read_text())
    except Exception as err:  # numpy's, pandas' and json's many parse errors: recomputed, not trusted
        return f"{PANEL_FILE}, {STEPS_FILE} or summary.json does not parse ({type(err).__name__}: {err})"
    if summary.get("panel") != asdict(spec):
        return f"{run} holds another panel ({summary.get('panel')}, not {asdict(spec)})"
    if list(table.columns) != STEP_COLUMNS or table["step"].tolist() != list(range(steps)):
        return f"{run / STEPS_FILE} does not hold one row per step 0..{steps - 1} with {STEP_COLUMNS}"
    if "update" not in tok:
        return f"{run / PANEL_FILE} has no update index"
    counts = pd.Series(1, index=pd.MultiIndex.from_arrays([tok["step"], tok["update"]])).groupby(level=[0, 1]).size()
    want = pd.MultiIndex.from_product([range(steps), saved_updates(mu)])
    if not counts.index.sort_values().equals(want) or set(counts) != {spec.prompts * spec.samples}:
        return f"{run / PANEL_FILE} does not hold {spec.prompts * spec.samples} responses per step and saved update"
    if not np.isfinite(tok["log_rho"]).all() or tok["offsets"][-1] != len(tok["log_rho"]):
        return f"{run / PANEL_FILE} holds a non-finite value or is cut short"
    return None


def cached_grid_run(cfg, run_dir, spec: PanelSpec) -> dict:
    """`ratio_panel.grid_records` of a fresh `Trainer(cfg)` over cfg.steps, written to `run_dir` (each file atomically); a
    finished folder of the same config, data and panel, complete (`ratio_decay.records_problem`, `panel_problem`),
    is read back instead; an incomplete one is recomputed with a warning (`rundir.cached_results`). Returns
    {"ratios": table, "tokens", "panel": the panel's arrays, "steps": the steps table}."""
    from ..folders import write_bytes, write_text
    from ..rundir import cached_results
    from ..train import Trainer

    def compute(path):
        df, tok, pan, table = grid_records(Trainer(cfg), cfg.steps, spec)
        write_text(path / "ratios.csv", df.to_csv(index=False))
        write_text(path / STEPS_FILE, table.to_csv(index=False))
        for name, arrays in ((ratio_prefix.TOKENS_FILE, tok), (PANEL_FILE, pan)):
            buf = io.BytesIO()
            ratio_prefix.save_tokens(buf, **arrays)
            write_bytes(path / name, buf.getvalue())

    path = cached_results(cfg, run_dir, ("ratios.csv", ratio_prefix.TOKENS_FILE, PANEL_FILE, STEPS_FILE),
                          lambda p: records_problem(p, cfg.steps) or panel_problem(p, cfg.steps, cfg.mu, spec),
                          compute, summary={"panel": asdict(spec)})
    return {"ratios": pd.read_csv(path / "ratios.csv"),
            "tokens": ratio_prefix.load_tokens(path / ratio_prefix.TOKENS_FILE),
            "panel": ratio_prefix.load_tokens(path / PANEL_FILE), "steps": pd.read_csv(path / STEPS_FILE)}


# ---------------------------------------------------------------- the grid's runs

NOTEBOOK = "02_ratio_decay"


def arm_name(mu: int, lr_scale: float) -> str:
    """A grid cell's arm: "grpo-mu<mu>-lr<scale>x"."""
    return f"grpo-mu{mu}-lr{lr_scale:g}x"


def grid_configs(*, mus, lr_scales, seeds: int, steps: int, prompts_per_step: int, group: int, model: str,
                 device: str, dtype: str) -> dict:
    """Run name ("<arm>/seed<s>", `arm_name`) -> TrainConfig: GRPO (preset `grpo`) at mu minibatch updates and the
    preset's lr times each scale, seeds 0..seeds-1, the shared budget; cells mu-major, then lr, then seed."""
    from .. import presets
    from .runs import run_key

    lr = presets.get("grpo").lr
    return {run_key(arm_name(mu, x), s): presets.get("grpo", mu=mu, lr=lr * x, steps=steps,
                                                     prompts_per_step=prompts_per_step, group_size=group,
                                                     model=model, device=device, dtype=dtype, seed=s)
            for mu in mus for x in lr_scales for s in range(seeds)}


def notebook_plan(p: dict) -> tuple:
    """(configs, folders, panel) of notebook 02 from its parameters (names as in its parameters cell)."""
    from .runs import run_dirs

    cfgs = grid_configs(mus=p["MUS"], lr_scales=p["LR_SCALES"], seeds=p["SEEDS"], steps=p["STEPS"],
                        prompts_per_step=p["PROMPTS_PER_STEP"], group=p["GROUP"], model=p["MODEL"],
                        device=p["DEVICE"], dtype=p["DTYPE"])
    spec = PanelSpec(prompts=p["PANEL_PROMPTS"], samples=p["PANEL_SAMPLES"], n_ops=p["PANEL_OPS"],
                     budget=p["PANEL_BUDGET"])
    return cfgs, run_dirs(p["PROFILE"], NOTEBOOK, cfgs), spec


def prefetch_runs(params: dict) -> dict:
    """`gpolib.workbook.prefetch`'s hook: run name -> (config, folder) of every grid run the notebook reads."""
    cfgs, dirs, _ = notebook_plan(params)
    return {name: (cfg, dirs[name]) for name, cfg in cfgs.items()}


def prefetch_train(params: dict, cfg, folder) -> None:
    """`gpolib.workbook.prefetch`'s hook: train one grid run as the notebook would (`cached_grid_run`)."""
    cached_grid_run(cfg, folder, notebook_plan(params)[2])


def cell_of(cfg) -> tuple:
    """A grid run's cell: (mu, lr scale), the scale being cfg.lr over the `grpo` preset's lr, rounded to 6 places."""
    from .. import presets

    return cfg.mu, round(cfg.lr / presets.get("grpo").lr, 6)


def ratio_difference(old_dir, ratios: pd.DataFrame) -> float | None:
    """The largest |difference| of log prod rho between a run's RL-batch table `ratios` and the `ratios.csv` of an
    earlier run of the same configuration in `old_dir` (notebook 02's mu = 4 runs before the grid); None when that
    folder holds none, inf when the two tables differ in their responses."""
    csv = Path(old_dir) / "ratios.csv"
    if not csv.is_file():
        return None
    old = pd.read_csv(csv)
    if old[["step", "prompt", "length"]].to_numpy().tolist() != ratios[["step", "prompt", "length"]].to_numpy().tolist():
        return float("inf")
    return float((old["log_prod_rho"] - ratios["log_prod_rho"]).abs().max())
