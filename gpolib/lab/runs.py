"""The training runs of a notebook: its arms as configs, their folders, and what is read back from them.

An arm is a preset plus the fields that make it that arm, defined once in the notebook's module
(`gspo.ARMS`, `gfpo.ARMS`, `dr_grpo.ARMS`); the notebook's parameters cell gives the budget shared by
every arm (`budget`). `configs` crosses arms with seeds; `run_dirs` names their folders under
`reports/<profile>/runs/<notebook>/` by configuration (`folder_table` shows the mapping). Reading back: windows of steps and their means (None and NaN
skipped), held-out evaluations at the start and end.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from .. import identity, paths, presets
from ..config import TrainConfig
from ..metrics import mean_of
from ..train import load_summary


def run_dir(profile: str, notebook: str, *parts: str) -> Path:
    """`reports[/<profile>]/runs/<notebook>/<parts...>`."""
    return paths.runs_dir(profile).joinpath(notebook, *parts)


def budget(*, steps: int, prompts_per_step: int, eval_prompts: int, eval_samples: int, model: str,
           device: str, dtype: str, group_size: int | None = None) -> dict:
    """The fields every arm of a notebook shares, from its parameters cell (group_size: None keeps the arm's)."""
    out = dict(steps=steps, prompts_per_step=prompts_per_step, eval_prompts=eval_prompts,
               eval_samples=eval_samples, model=model, device=device, dtype=dtype)
    return out if group_size is None else {**out, "group_size": group_size}


def configs(arms: dict, shared: dict, seeds=None) -> dict:
    """Run name -> TrainConfig: each arm ({"preset": name, **fields}) with the shared budget and a seed.

    seeds=None: one run per arm, named by the arm (seed from `shared` or 0); else "<arm>/seed<s>" per seed.
    The arm's own fields win over the shared ones.
    """
    out = {}
    for arm, spec in arms.items():
        fields = {k: v for k, v in spec.items() if k != "preset"}
        for s in ([None] if seeds is None else seeds):
            name = arm if s is None else f"{arm}/seed{s}"
            seed = {} if s is None else {"seed": s}
            out[name] = presets.get(spec["preset"], **{**shared, **seed, **fields})
    return out


def run_dirs(profile: str, notebook: str, cfgs: dict) -> dict:
    """Run name -> its folder, keyed by configuration: "gspo/seed0" -> `.../gspo-seed0-<key[:8]>`.

    The key (`gpolib.identity.run_key`) covers every non-default field and the fingerprints of the model
    and task files, so a changed parameter, params file, model or task gets a new folder beside the old one.
    """
    return {name: run_dir(profile, notebook, identity.folder_name(name, cfg)) for name, cfg in cfgs.items()}


def folder_table(dirs: dict) -> pd.DataFrame:
    """Run name -> its folder (relative to the repository) and whether a finished run is there to reuse."""
    rows = {name: {"folder": paths.relative(d), "finished": (Path(d) / "summary.json").exists()}
            for name, d in dirs.items()}
    return pd.DataFrame.from_dict(rows, orient="index")


def config_diff(a: TrainConfig, b: TrainConfig) -> dict:
    """Fields where two configs differ: name -> (a's value, b's value)."""
    da, db = a.to_dict(), b.to_dict()
    return {k: (da[k], db[k]) for k in da if da[k] != db[k]}


def summaries(dirs: dict) -> dict:
    """Run name -> summary.json of the finished run in that folder."""
    return {name: load_summary(d) for name, d in dirs.items()}


def window(rows: list, frac: float, which: str = "last") -> list:
    """The first or last max(1, round(frac * n)) rows."""
    k = max(1, round(frac * len(rows)))
    return rows[-k:] if which == "last" else rows[:k]


def mean_over(rows: list, key: str) -> float:
    """Mean of `key` over the rows that have a value (None and NaN skipped); NaN if none has."""
    return mean_of((r.get(key) for r in rows), empty=math.nan)


def eval_table(summaries_by_run: dict, keys=("acc/sample", "len/mean", "len/correct", "len/incorrect")) -> pd.DataFrame:
    """Held-out metrics at the start and end of each run: rows run, columns (key, start|end)."""
    rows = {run: {(k, when): s[f"eval_{when}"].get(k) for k in keys for when in ("start", "end")}
            for run, s in summaries_by_run.items()}
    return pd.DataFrame.from_dict(rows, orient="index").astype(float)
