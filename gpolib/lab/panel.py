"""D2's fixed panel (DAPO Sec. 3.2, Fig. 3b): the share of all-correct groups on the same prompts as training goes on.

A training batch holds different prompts every step, so its all-correct share is noisy and confounded by which
prompts were drawn. The panel is fixed before any run: PROMPTS training prompts drawn with PROMPT_SEED, SAMPLES
responses each at T = 1, top-p 1, sampled with SAMPLE_SEED (the same draws for every policy: common random
numbers), scored by the run's strict reward. It is evaluated on the policies of notebook 01's GRPO runs at step 0
(the base, shared by the seeds), half-way (the adapter kept by `TrainConfig.adapter_steps`) and at the end.

Per policy: the all-correct share (every one of the SAMPLES responses correct), the all-wrong share, the accuracy,
and the all-correct share predicted from the per-prompt accuracies p_i as if each prompt's responses were
independent draws: mean_i p_i^SAMPLES (p_i estimated from the same SAMPLES responses, so the prediction shows
what the accuracy alone implies for a group, not an independent estimate).
"""
from __future__ import annotations

import hashlib
import json
import random
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .. import jsonio
from ..folders import write_text
from .runs import mean_over, window

PROMPTS = 256
SAMPLES = 8
PROMPT_SEED = 20251203
"""which training prompts form the panel (fixed before the runs)"""
SAMPLE_SEED = 7
"""torch seed of the panel's sampling, the same for every policy"""
FILE = "panel.json"
"""each run's panel counts, in its folder: the settings (`_meta`) and "counts": {step: [correct per prompt]}"""


def panel_tasks(train_tasks: list, prompts: int = PROMPTS, seed: int = PROMPT_SEED) -> list:
    """The panel's prompts: `prompts` of the training split drawn without replacement with `seed`."""
    if prompts > len(train_tasks):
        raise ValueError(f"prompts={prompts} is invalid; allowed: at most the {len(train_tasks)} training prompts")
    return random.Random(seed).sample(train_tasks, prompts)


def correct_counts(trainer, tasks: list, samples: int = SAMPLES, seed: int = SAMPLE_SEED) -> np.ndarray:
    """(n_prompts,) correct responses of `samples` per prompt from the trainer's policy at T = 1, top-p 1."""
    torch.manual_seed(seed)
    ro = trainer.rollout(tasks, samples, temperature=1.0, top_p=1.0)
    correct, _ = trainer.score(ro, tasks)  # (B,)
    return torch.bincount(ro.prompt_index, weights=correct.double(), minlength=len(tasks)).round().long().numpy()


def load_policy(trainer, run_dir: Path, step: int) -> None:
    """Load the run's adapter at `step` into the trainer's policy: adapter/step-<n>/, or adapter/ at the end."""
    from peft import load_peft_weights, set_peft_model_state_dict

    folder = Path(run_dir) / "adapter" / ("" if step == trainer.cfg.steps else f"step-{step}")
    if not (folder / "adapter_model.safetensors").exists():
        raise FileNotFoundError(f"{folder} holds no adapter: rerun the run with adapter_steps covering step {step}")
    set_peft_model_state_dict(trainer.model, load_peft_weights(str(folder)), adapter_name="default")


def shares(counts: np.ndarray, samples: int = SAMPLES) -> dict:
    """All-correct / all-wrong shares, accuracy and the share predicted from per-prompt accuracy (mean p^G)."""
    p = counts / samples
    return {"all_correct": float((counts == samples).mean()), "all_wrong": float((counts == 0).mean()),
            "acc": float(p.mean()), "predicted": float((p ** samples).mean())}


def _meta(prompts: int, run_dir: Path) -> dict:
    """What the kept counts were computed from: the panel's settings and the run's final adapter (sha256), so
    that a run trained again in its folder is evaluated again."""
    final = Path(run_dir) / "adapter" / "adapter_model.safetensors"
    sha = hashlib.sha256(final.read_bytes()).hexdigest()[:16] if final.exists() else None
    return {"prompts": prompts, "samples": SAMPLES, "prompt_seed": PROMPT_SEED, "sample_seed": SAMPLE_SEED,
            "adapter_sha256": sha}


def steps_of(cfg) -> tuple:
    """The panel's steps for a run: 0, the steps whose adapters it keeps (`TrainConfig.adapter_steps`), the end."""
    from ..train import adapter_save_steps

    return (0, *sorted(adapter_save_steps(cfg)), cfg.steps)


def kept_counts(path: Path, prompts: int, run_dir: Path) -> dict:
    """The counts of a run's panel file that can be reused: computed with the same settings and adapter (`_meta`),
    each step's a list of `prompts` ints in 0..SAMPLES. A file that does not parse as strict JSON, or a step whose
    counts are cut short or out of range, is computed again (with a warning), never read back."""
    if not path.exists():
        return {}
    try:
        kept = jsonio.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        warnings.warn(f"{path} does not parse ({err}): its counts are computed again")
        return {}
    meta = _meta(prompts, run_dir)
    if not isinstance(kept, dict) or not isinstance(kept.get("counts"), dict) \
            or any(kept.get(k) != v for k, v in meta.items()):
        return {}
    good = {s: c for s, c in kept["counts"].items() if isinstance(c, list) and len(c) == prompts
            and all(type(x) is int and 0 <= x <= SAMPLES for x in c)}
    if len(good) < len(kept["counts"]):
        warnings.warn(f"{path}: counts of step(s) {sorted(set(kept['counts']) - set(good))} are incomplete or out of "
                      "range: computed again")
    return good


def run_counts(cfg, run_dir: Path, prompts: int, base: dict) -> dict:
    """Step -> counts of one run at `steps_of(cfg)`, read from its panel file or computed (and written there).
    `base` holds the step-0 counts shared by the runs of one base model (filled on first use)."""
    from ..train import Trainer

    path, steps = Path(run_dir) / FILE, steps_of(cfg)
    counts = kept_counts(path, prompts, run_dir)
    missing = [s for s in steps if str(s) not in counts]
    if missing:
        tr = Trainer(cfg)
        tasks = panel_tasks(tr.train_tasks, prompts)
        for s in missing:  # in step order: the base first, before any adapter is loaded
            if s == 0 and cfg.model in base:
                counts["0"] = base[cfg.model]
                continue
            if s > 0:
                load_policy(tr, run_dir, s)
            counts[str(s)] = correct_counts(tr, tasks).tolist()
            if s == 0:
                base[cfg.model] = counts["0"]
        write_text(path, json.dumps({**_meta(prompts, run_dir), "counts": counts}, sort_keys=True) + "\n")
    return {s: np.asarray(counts[str(s)]) for s in steps}


def evaluate(cfgs: dict, dirs: dict, prompts: int = PROMPTS) -> pd.DataFrame:
    """Rows (run, seed, step, all_correct, all_wrong, acc, predicted, folder) of every finished run ("<arm>/seed<s>")
    at its `steps_of`, on a panel of `prompts` training prompts (folder: the run's folder name)."""
    base, rows = {}, []
    for name, cfg in cfgs.items():
        for s, c in run_counts(cfg, dirs[name], prompts, base).items():
            rows.append({"run": name, "seed": cfg.seed, "step": s, **shares(c), "folder": Path(dirs[name]).name})
    return pd.DataFrame(rows)


def rise(table: pd.DataFrame, key: str = "all_correct") -> list:
    """Per seed: `key` at the last step minus at step 0 (seeds in order)."""
    t = table.pivot(index="seed", columns="step", values=key)
    return (t[t.columns.max()] - t[t.columns.min()]).tolist()


TABLE = "d2_panel.csv"
"""the panel table of a notebook's runs, beside its run folders, read by the notebook that judges D2 (03)"""


def write_table(table: pd.DataFrame, notebook_dir: Path) -> Path:
    path = Path(notebook_dir) / TABLE
    write_text(path, table.to_csv(index=False, float_format="%.6g"))
    return path


def read_table(notebook_dir: Path) -> pd.DataFrame | None:
    """The panel table written by `write_table` in that folder, or None where there is none (not yet run)."""
    path = Path(notebook_dir) / TABLE
    return pd.read_csv(path) if path.exists() else None


def figure(table: pd.DataFrame, metrics: dict, window: int = 10):
    """D2's picture: the panel's all-correct share (per seed, lines and dots) and the share predicted from
    per-prompt accuracy (dashed) against the step, beside the training batches' all-correct share (a moving mean of
    `window` steps, per seed, faint): the panel's prompts are fixed, the batches' change every step."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.6))
    for i, (seed, t) in enumerate(table.sort_values("step").groupby("seed")):
        color = f"C{i}"
        ax.plot(t["step"], t["all_correct"], "o-", color=color, label=f"panel, seed {seed}")
        ax.plot(t["step"], t["predicted"], "--", color=color, alpha=0.8, label=f"mean p^{SAMPLES}, seed {seed}")
        name = t["run"].iloc[0]
        batch = pd.Series([r.get("groups/all_correct", np.nan) for r in metrics.get(name, [])], dtype=float)
        if len(batch):
            ax.plot(batch.index, batch.rolling(window, min_periods=1).mean(), color=color, alpha=0.3, lw=1,
                    label=f"training batches, seed {seed}")
    ax.set_xlabel("step")
    ax.set_ylabel("share of all-correct groups")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(f"D2 · all-correct groups: a fixed panel of training prompts x {SAMPLES} vs the training batches")
    fig.tight_layout()
    return fig


def evidence(table: pd.DataFrame | None) -> dict:
    """D2's panel evidence from a panel table (per seed, in seed order): `panel_rise` (all-correct share, last step -
    step 0) and the shares at the first and last step, the accuracy's and the predicted share's rise; {} for None
    (the panel is not yet run)."""
    if table is None:
        return {}
    t = table.sort_values(["seed", "step"])
    first, last = t.groupby("seed").first(), t.groupby("seed").last()
    return {"panel_rise": rise(t), "panel_first": first["all_correct"].tolist(),
            "panel_last": last["all_correct"].tolist(), "panel_acc_rise": rise(t, "acc"),
            "panel_predicted_rise": rise(t, "predicted"), "panel_steps": sorted(t["step"].unique().tolist())}


BATCH_FRAC = 0.2
"""the training-batch share is compared over the first and last 20% of steps (DESIGN, D2)"""


def batch_evidence(notebook_dir: Path, arm: str = "grpo", frac: float = BATCH_FRAC) -> dict:
    """D2's training-batch all-correct share from the runs the criterion names: the runs of the panel table in
    `notebook_dir` (notebook 01's GRPO runs: the table's `folder`, or in a table without it the one folder
    `<arm>-seed<s>-<key>` of each seed). Per seed the
    mean over the first and last `frac` of steps, and the run folders (D2's runs list); {} without a panel table
    (D2 is then not yet run)."""
    table = read_table(notebook_dir)
    if table is None:
        return {}
    first, last, folders = [], [], []
    named = table.groupby("seed")["folder"].first().to_dict() if "folder" in table else {}
    for s in sorted(table["seed"].unique()):
        found = ([Path(notebook_dir) / named[s] / "metrics.jsonl"] if s in named
                 else sorted(Path(notebook_dir).glob(f"{arm}-seed{s}-*/metrics.jsonl")))
        if len(found) != 1:
            raise FileNotFoundError(f"{notebook_dir}: expected one {arm}-seed{s}-* run with metrics.jsonl, "
                                    f"found {len(found)}")
        rows = [jsonio.loads(line) for line in found[0].read_text().splitlines() if line.strip()]
        first.append(mean_over(window(rows, frac, "first"), "groups/all_correct"))
        last.append(mean_over(window(rows, frac, "last"), "groups/all_correct"))
        folders.append(str(found[0].parent))
    return {"all_correct_first": first, "all_correct_last": last, "batch_runs": folders}
