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
- `grid_records`: a run's steps, as the tables and arrays `ratio_runs.cached_grid_run` writes to its folder.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from .. import tasks as task_gen
from ..objectives import group_advantages, sequence_log_ratio
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
    mu updates (`batch_ratios`).
    Returns (the RL batch's rows and token arrays as `ratio_decay.ratio_step`, {k: (B, T) panel log ratios},
    the panel rollout, its advantages, the step's row of `STEP_COLUMNS`)."""
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


def batch_ratios(trainer, batch, old, new, step: int) -> tuple[pd.DataFrame, list]:
    """log prod_t rho_t and log s_i (GSPO Eq. 7) of each response of `batch` from log pi_old `old` and log pi_theta
    `new` (B, T), and each response's token log ratios log rho_t in order (S1 within responses, `ratio_prefix`).
    Returns (one row per response: step, prompt (its group in the step), length, log prod rho, log s_i, advantage;
    the per-token log ratios of each row, a list of (|o_i|,) arrays)."""
    mask = batch.rollout.completion_mask.float()  # (B, T)
    log_rho = (new - old) * mask  # (B, T)
    tokens = [row[m > 0].numpy() for row, m in zip(log_rho, mask)]
    G = trainer.cfg.group_size
    df = pd.DataFrame({"step": step, "prompt": [i // G for i in range(len(tokens))],
                       "length": batch.rollout.lengths.numpy(),
                       "log_prod_rho": log_rho.sum(dim=1).numpy(),  # log prod_t rho_t
                       "log_s": sequence_log_ratio(new, old, mask).numpy(),  # log s_i, GSPO Eq. 7
                       "advantage": batch.advantages.numpy()})
    return df, tokens


def token_arrays(df: pd.DataFrame, tokens: list) -> dict:
    """`ratio_prefix.save_tokens`' arrays (flat log ratios with offsets; step, prompt, advantage per response) of
    the rows of `df` and their per-token arrays `tokens`."""
    lengths = [len(t) for t in tokens]
    return {"log_rho": np.concatenate(tokens) if tokens else np.zeros(0, np.float32),
            "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), "step": df["step"].to_numpy(),
            "prompt": df["prompt"].to_numpy(), "advantage": df["advantage"].to_numpy()}


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
    panel = panel_tasks(spec, reserved_prompts())
    frames, tokens, records, rows = [], [], [], []
    for s in range(steps):
        (df, tok), probes, ro, adv, row = panel_step(trainer, s, panel, spec)
        frames.append(df), rows.append(row), records.append((s, probes, ro, adv))
        tokens += tok
    df = pd.concat(frames, ignore_index=True)
    return df, token_arrays(df, tokens), panel_arrays(records), pd.DataFrame(rows, columns=STEP_COLUMNS)
