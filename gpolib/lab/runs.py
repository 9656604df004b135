"""The training runs of a notebook: its arms as configs, their folders, and what is read back from them.

An arm is a preset plus the fields that make it that arm, defined once in the notebook's module
(`gspo.ARMS`, `gfpo.ARMS`, `dr_grpo.ARMS`); the notebook's parameters cell gives the budget shared by
every arm (`budget`). `configs` crosses arms with seeds; `run_dirs` names their folders under
`reports/<profile>/runs/<notebook>/` by configuration (`folder_table` shows the mapping, `arm_table` the fields
in which the arms differ; `relabel` renames arms for figures). Reading back: windows of steps and their means (None and NaN
skipped), held-out evaluations at the start and end. Every run at once: `load_runs`, one tidy frame
(drawn by `plots.runs_plot`).
"""
from __future__ import annotations

import json
import math
import re
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


def run_key(arm: str, seed: int | None = None) -> str:
    """The name of one run of an arm: "<arm>/seed<s>", or the bare "<arm>" when seed is None (`arm_of` inverts it)."""
    return arm if seed is None else f"{arm}/seed{seed}"


def configs(arms: dict, shared: dict, seeds=None) -> dict:
    """Run name -> TrainConfig: each arm ({"preset": name, **fields}) with the shared budget and a seed.

    seeds=None: one run per arm, named by the arm (seed from `shared` or 0); else "<arm>/seed<s>" per seed.
    The arm's own fields win over the shared ones.
    """
    out = {}
    for arm, spec in arms.items():
        fields = {k: v for k, v in spec.items() if k != "preset"}
        for s in ([None] if seeds is None else seeds):
            name = run_key(arm, s)
            seed = {} if s is None else {"seed": s}
            out[name] = presets.get(spec["preset"], **{**shared, **seed, **fields})
    return out


def arm_of(name: str) -> str:
    """The arm of a run name made by `configs`: "<arm>/seed<s>" (or a bare "<arm>") -> "<arm>"."""
    return name.split("/")[0]


def by_arm(named: dict, *arms: str) -> dict:
    """The entries of `named` (run name -> anything) whose arm is one of `arms`, in their order in `named`."""
    return {n: v for n, v in named.items() if arm_of(n) in arms}


def relabel(named: dict, labels: dict) -> dict:
    """Keys "<arm>" or "<arm>/seed<s>" with the arm renamed by `labels` (figures: a label of its own gets its own
    colour, `plots.palette`); other keys and the values unchanged."""
    def name(key: str) -> str:
        arm, sep, seed = key.partition("/")
        return labels.get(arm, arm) + sep + seed
    return {name(k): v for k, v in named.items()}


def run_dirs(profile: str, notebook: str, cfgs: dict, home: dict | None = None) -> dict:
    """Run name -> its folder, keyed by configuration: "gspo/seed0" -> `.../gspo-seed0-<key[:8]>`.

    The key (`gpolib.identity.run_key`) covers every non-default field and the fingerprints of the model
    and task files, so a changed parameter, params file, model or task gets a new folder beside the old one.
    home: arm -> the notebook whose folder holds that arm's runs, e.g. {"grpo": "01_grpo"}: a baseline
    shared by several notebooks is trained once (same configuration, same key, same folder) and reused.
    """
    home = home or {}
    return {name: run_dir(profile, home.get(arm_of(name), notebook), identity.folder_name(name, cfg))
            for name, cfg in cfgs.items()}


def folder_table(dirs: dict) -> pd.DataFrame:
    """Run name -> its folder (relative to the repository) and whether a finished run is there to reuse."""
    rows = {name: {"folder": paths.relative(d), "finished": (Path(d) / "summary.json").exists()}
            for name, d in dirs.items()}
    return pd.DataFrame.from_dict(rows, orient="index")


def config_diff(a: TrainConfig, b: TrainConfig) -> dict:
    """Fields where two configs differ: name -> (a's value, b's value)."""
    da, db = a.to_dict(), b.to_dict()
    return {k: (da[k], db[k]) for k in da if da[k] != db[k]}


def arm_table(configs: dict, seed: int = 0) -> pd.DataFrame:
    """The fields in which the arms' configurations of one seed differ (loss fields last, as `loss.<name>`, a
    surrogate's parameters beside `loss.surrogate`; '-' where an arm's surrogate has no such parameter): rows fields,
    columns arms. Everything not listed (model, budget, lr, seeds, G) is shared."""
    arms = {name.split("/")[0]: _flat(c.to_dict()) for name, c in configs.items()
            if name == run_key(name.split("/")[0], seed)}
    value = lambda a, k: repr(a[k]) if a.get(k, "-") is None else a.get(k, "-")  # noqa: E731
    keys = sorted(_merged(list(a) for a in arms.values()), key=lambda k: k.startswith("loss."))  # stable
    fields = [k for k in keys if k != "name" and len({repr(value(a, k)) for a in arms.values()}) > 1]
    return pd.DataFrame({arm: {k: value(a, k) for k in fields} for arm, a in arms.items()}).astype(str)


def _merged(orders) -> list:
    """Ordered key lists as one: each key first met placed right after the key before it in its own list."""
    out: list = []
    for keys in orders:
        for i, k in enumerate(keys):
            if k not in out:
                out.insert(out.index(keys[i - 1]) + 1 if i else 0, k)
    return out


def end_accuracy(summaries_by_run: dict, arm: str, seeds) -> list:
    """Per seed: the arm's held-out accuracy at the end of its run (T = 1), from its summary."""
    return [summaries_by_run[run_key(arm, s)]["eval_end"]["acc/sample"] for s in seeds]


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


def max_over(rows: list, key: str) -> float:
    """Largest `key` over the rows that have a value (None and NaN skipped); NaN if none has."""
    xs = [r[key] for r in rows if r.get(key) is not None and not math.isnan(r[key])]
    return max(xs) if xs else math.nan


def eval_table(summaries_by_run: dict, keys=("acc/sample", "acc/greedy", "len/mean", "len/correct", "len/incorrect")
               ) -> pd.DataFrame:
    """Held-out metrics at the start and end of each run: rows run, columns (key, start|end)."""
    rows = {run: {(k, when): s[f"eval_{when}"].get(k) for k in keys for when in ("start", "end")}
            for run, s in summaries_by_run.items()}
    return pd.DataFrame.from_dict(rows, orient="index").astype(float)


# ---------------------------------------------------------------- every run as one table

RUN_COLUMNS = ("notebook", "run", "arm", "finished")
"""columns naming a run in `load_runs`' frame, before its configuration columns"""
CONFIG = "config."
"""prefix of the configuration columns ('config.seed', 'config.loss.eps_high'): 'lr' is both a field and a metric"""
_ARM_SUFFIX = re.compile(r"(-seed\d+)?(-[0-9a-f]{8})?$")


def _flat(config: dict, prefix: str = "") -> dict:
    """Nested config dict -> one level, nested keys joined by '.': {"loss": {"eps_low": 0.2}} -> {"loss.eps_low": 0.2};
    the surrogate, stored as {"name": ..., its parameters}, as `loss.surrogate` (its name) beside `loss.<parameter>`,
    the columns of the runs recorded when its parameters were LossConfig fields."""
    out = {}
    for k, v in config.items():
        if k == "surrogate" and isinstance(v, dict):
            params = dict(v)
            out[f"{prefix}{k}"] = params.pop("name")
            out.update(_flat(params, prefix))
        elif isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def read_run(folder: Path, base: Path) -> pd.DataFrame:
    """One run folder (config.json + metrics.jsonl) -> its rows of `load_runs`; empty if it logged no step."""
    raw = json.loads((folder / "config.json").read_text())
    config = _flat(raw["config"] if isinstance(raw.get("config"), dict) else raw, CONFIG)  # run record or bare config
    steps = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    summary = folder / "summary.json"
    rel = folder.relative_to(base).parts
    ident = {"notebook": rel[0] if len(rel) > 1 else "", "run": "/".join(rel[1:] if len(rel) > 1 else rel),
             "arm": _ARM_SUFFIX.sub("", folder.name),
             "finished": summary.exists() and bool(json.loads(summary.read_text()).get("finished", True))}
    metrics = pd.DataFrame(steps)
    head = pd.DataFrame([{**ident, **config}] * len(metrics))
    return pd.concat([head, metrics], axis=1)


def load_runs(root: Path | str | None = None, *, profile: str = "full", notebooks=None) -> pd.DataFrame:
    """Every run's per-step metrics as one tidy frame: one row per (run, step).

    Columns: notebook, run (folder path under the notebook), arm (folder name without -seed<k> and the
    8-hex configuration key), finished (summary.json says so), every TrainConfig field prefixed 'config.' (nested
    ones as 'config.loss.eps_high'), then step and the metrics as logged (`gpolib.metrics` names). root: a folder of
    `<notebook>/<run>/` folders (default: `runs_dir(profile)`, i.e. reports/runs/ for full); notebooks:
    keep only these notebook folders. Runs without config.json or metrics.jsonl are not runs and are skipped.
    """
    base = Path(root) if root is not None else paths.runs_dir(profile)
    folders = sorted(p.parent for p in base.rglob("metrics.jsonl") if (p.parent / "config.json").exists())
    frames = [read_run(f, base) for f in folders]
    frames = [f for f in frames if len(f) and (notebooks is None or f["notebook"].iloc[0] in notebooks)]
    if not frames:
        return pd.DataFrame(columns=[*RUN_COLUMNS, "step"])
    return pd.concat(frames, ignore_index=True)


def varying_config(frame: pd.DataFrame, exclude=("config.seed",)) -> list:
    """Configuration columns whose values differ between the frame's runs, minus `exclude`: what sets arms apart."""
    config = [c for c in frame.columns if c.startswith(CONFIG) and c not in exclude]
    return [c for c in config if frame[c].astype(str).nunique() > 1]
