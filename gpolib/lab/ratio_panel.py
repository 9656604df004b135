"""Notebook 02, S1's long-response panel: token ratios along 200-token responses, after each minibatch update.

The RL split's responses end near 100 tokens, and chains long enough for 200-token responses are ones the base never
gets right (benchmarks/panel_lengths.py: 0% correct from 8 operators on), so they give no reward signal and no
update. DESIGN's S1 therefore trains on the RL split as before and measures the ratios on a fixed panel:
- the panel: `PanelSpec.prompts` chains of `n_ops` operators built in code from `seed` (`panel_tasks`; never a
  validation or held-out prompt), `samples` responses each, sampled at every step from pi_old (the policy before
  the step's updates) at the run's temperature (T = 1) with a budget of `budget` tokens, under a seed of their own (training's draws are
  untouched, `sample_panel`);
- per step (`panel_step`): the RL batch's log ratios after the mu updates (as `ratio_decay.ratio_step`), and the
  panel responses' per-token log ratios log pi_theta - log pi_old under the policy after update k, for the k in
  `saved_updates(mu)` (1, 2, 4, ..., mu), each record tagged with its k; the panel's group-normalised reward as the
  advantage of a panel response; GRPO's token clip share and the training reward from the update;
- one folder per run (`cached_grid_run`): ratios.csv / token_ratios.npz (the RL batch, as before),
  panel_ratios.npz (`ratio_prefix.save_tokens` plus `update`), steps.csv; complete folders are read back.
"""
from __future__ import annotations

import io
import random
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .. import tasks as task_gen
from ..objectives import group_advantages
from . import ratio_prefix

PANEL_FILE = "panel_ratios.npz"
STEPS_FILE = "steps.csv"
STEP_COLUMNS = ["step", "reward/mean", "clip/frac", "update/skipped", "panel/acc", "panel/len_mean"]
SAMPLE_SEED = 51
"""the panel's sampling seed (with the run's seed and the step), fixed before the runs"""


@dataclass(frozen=True)
class PanelSpec:
    """The long-response panel of notebook 02 (its parameters cell: PANEL_*)."""

    prompts: int = 16
    """fixed prompts"""
    samples: int = 2
    """responses per prompt and step (>= 2: a response's advantage is its group's normalised reward)"""
    n_ops: int = 32
    """operators per chain: the smallest count of benchmarks/panel_lengths.py at which >= 50% of the dense base's
    responses reach 200 tokens (62.5% at 32)"""
    budget: int = 256
    """max_new_tokens of the panel's responses"""
    seed: int = 20261206
    """the prompts' generator seed"""

    def __post_init__(self):
        if self.samples < 2:
            raise ValueError(f"samples={self.samples!r} is invalid; allowed: >= 2 (a response's advantage is its "
                             "group's normalised reward)")
        if self.prompts < 2 or self.budget < 1:
            raise ValueError(f"prompts={self.prompts!r}, budget={self.budget!r} are invalid; allowed: >= 2, >= 1")


def reserved_prompts() -> set:
    """The validation and held-out prompts (a panel never holds one)."""
    return {t["prompt"] for split in ("val", "heldout")
            for t in task_gen.load_tasks(task_gen.default_task_path(split))}


def panel_tasks(spec: PanelSpec, exclude: set = frozenset()) -> list:
    """The panel's tasks ({"prompt", "answer"}): `spec.prompts` distinct chains of `spec.n_ops` operators drawn by
    `tasks.make_chain` (the RL splits' product probability) from `spec.seed`, skipping any prompt in `exclude`."""
    rng, out, seen = random.Random(spec.seed), [], set(exclude)
    while len(out) < spec.prompts:
        p = task_gen.make_chain(rng, spec.n_ops, p_mul=task_gen.SPLIT_P_MUL)
        if p.prompt not in seen:
            seen.add(p.prompt)
            out.append({"prompt": p.prompt, "answer": p.answer})
    return out


def saved_updates(mu: int) -> list:
    """The update indices k whose panel ratios are kept: 1, 2, 4, ... below mu, and mu (the judged one)."""
    out, k = [], 1
    while k < mu:
        out.append(k)
        k *= 2
    return out + [mu]


def sample_panel(trainer, panel: list, spec: PanelSpec, step: int):
    """The step's panel responses from the current policy (pi_old) at the run's temperature (the policy's own
    distribution: T = 1 in the grid), top-p 1, `spec.budget` tokens, under their own seed (torch's generator is
    restored after: training draws what it draws without a panel); returns (rollout, correct (B,), advantage (B,):
    the group's normalised reward, `group_advantages`)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SAMPLE_SEED * 1_000_003 + trainer.cfg.seed * 1009 + step)
        ro = trainer.rollout(panel, spec.samples, top_p=1.0, held_out=True, max_new_tokens=spec.budget)
    correct, reward = trainer.score(ro, panel)  # (B,) each
    return ro, correct, group_advantages(reward.float(), spec.samples)


def panel_step(trainer, step: int, panel: list, spec: PanelSpec) -> tuple:
    """One RL step with the panel scored after the updates k of `saved_updates(mu)`.

    Steps: 1. collect the RL batch (`Trainer.collect`); 2. sample the panel from pi_old; 3. log pi_old of both;
    4. the mu minibatch updates, the panel scored after update k (`Trainer.update`'s `after_minibatch`; a skipped
    update leaves the policy at pi_old: every k is then scored once after it); 5. the RL batch's ratios after the
    mu updates (`ratio_decay.batch_ratios`).
    Returns (the RL batch's rows and token arrays as `ratio_decay.ratio_step`, {k: (B, T) panel log ratios},
    the panel rollout, its advantages, the step's row of `STEP_COLUMNS`)."""
    from .ratio_decay import batch_ratios

    batch = trainer.collect(step)
    ro, correct, adv = sample_panel(trainer, panel, spec, step)
    old_batch, old_panel = trainer.policy_logps(batch.rollout), trainer.policy_logps(ro)  # (B, T), (P, T')
    keep, probes = set(saved_updates(trainer.cfg.mu)), {}

    def probe(k: int) -> None:
        if k in keep:
            probes[k] = trainer.policy_logps(ro) - old_panel  # (P, T') log rho after update k
    upd = trainer.update(batch, step, after_minibatch=probe)
    if len(probes) < len(keep):  # skipped: the policy did not move
        moved = trainer.policy_logps(ro) - old_panel
        probes.update({k: moved for k in keep - set(probes)})
    df, tokens = batch_ratios(trainer, batch, old_batch, trainer.policy_logps(batch.rollout), step)
    row = {"step": step, "reward/mean": batch.stats["reward/mean"], "clip/frac": upd.get("clip/frac", 0.0),
           "update/skipped": int(upd.get("update/skipped", 0)), "panel/acc": float(correct.float().mean()),
           "panel/len_mean": float(ro.lengths.float().mean())}
    return (df, tokens), probes, ro, adv, row


def panel_arrays(records: list) -> dict:
    """`ratio_prefix.save_tokens`' arrays of the panel from [(step, {k: (P, T) log rho}, rollout, advantage)]:
    one record per (step, k, response), steps then k then response in order, with `update` (k)."""
    log_rho, lengths, step, prompt, adv, update = [], [], [], [], [], []
    for s, probes, ro, a in records:
        mask = ro.completion_mask.bool()  # (P, T)
        for k in sorted(probes):
            for i, (row, m) in enumerate(zip(probes[k], mask)):
                log_rho.append(row[m].numpy())
                lengths.append(int(m.sum()))
                step.append(s), prompt.append(int(ro.prompt_index[i])), adv.append(float(a[i])), update.append(k)
    return {"log_rho": np.concatenate(log_rho) if log_rho else np.zeros(0, np.float32),
            "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), "step": np.asarray(step),
            "prompt": np.asarray(prompt), "advantage": np.asarray(adv), "update": np.asarray(update)}


def grid_records(trainer, steps: int, spec: PanelSpec) -> tuple:
    """`panel_step` for steps 0..steps-1: (the RL batch's table and token arrays as `ratio_decay.ratio_records`,
    the panel's arrays (`panel_arrays`), the steps table)."""
    from .ratio_decay import token_arrays

    panel = panel_tasks(spec, reserved_prompts())
    frames, tokens, records, rows = [], [], [], []
    for s in range(steps):
        (df, tok), probes, ro, adv, row = panel_step(trainer, s, panel, spec)
        frames.append(df), rows.append(row), records.append((s, probes, ro, adv))
        tokens += tok
    df = pd.concat(frames, ignore_index=True)
    return df, token_arrays(df, tokens), panel_arrays(records), pd.DataFrame(rows, columns=STEP_COLUMNS)


def panel_problem(run_dir, steps: int, mu: int, spec: PanelSpec) -> str | None:
    """Why a finished grid run's panel files cannot be reused (another panel, a step or update missing, unequal
    records per (step, k), a non-finite value), None when complete."""
    import json

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
    """`grid_records` of a fresh `Trainer(cfg)` over cfg.steps, written to `run_dir` (each file atomically); a
    finished folder of the same config, data and panel, complete (`ratio_decay.records_problem`, `panel_problem`),
    is read back instead; an incomplete one is recomputed with a warning. Returns {"ratios": table, "tokens",
    "panel": the panel's arrays, "steps": the steps table}."""
    from ..folders import write_bytes, write_text
    from ..rundir import RunDir
    from ..train import Trainer
    from .ratio_decay import records_problem

    run = RunDir(run_dir, cfg)
    run.check_config()
    files = ("ratios.csv", ratio_prefix.TOKENS_FILE, PANEL_FILE, STEPS_FILE)
    problem = (records_problem(run.path, cfg.steps) or panel_problem(run.path, cfg.steps, cfg.mu, spec)
               if run.finished() else None)
    if problem:
        warnings.warn(f"{run.path} says finished but {problem}: it is recomputed")
        (run.path / "summary.json").unlink()
    if not run.reuse(results=files):
        df, tok, pan, table = grid_records(Trainer(cfg), cfg.steps, spec)
        write_text(run.path / "ratios.csv", df.to_csv(index=False))
        write_text(run.path / STEPS_FILE, table.to_csv(index=False))
        for name, arrays in ((ratio_prefix.TOKENS_FILE, tok), (PANEL_FILE, pan)):
            buf = io.BytesIO()
            ratio_prefix.save_tokens(buf, **arrays)
            write_bytes(run.path / name, buf.getvalue())
        run.write_summary({"fingerprint": cfg.fingerprint(), "finished": True, "steps": cfg.steps,
                           "panel": asdict(spec)})
    return {"ratios": pd.read_csv(run.path / "ratios.csv"),
            "tokens": ratio_prefix.load_tokens(run.path / ratio_prefix.TOKENS_FILE),
            "panel": ratio_prefix.load_tokens(run.path / PANEL_FILE), "steps": pd.read_csv(run.path / STEPS_FILE)}


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
