"""Notebook 00, the embedded base policies: what they are and how they behave before any RL.

- behaviour of a policy on held-out prompts: `sample_outcomes`, `group_outcomes`, `param_counts`;
- MoE routing of the Qwen3-MoE policy: `expert_load`;
- the shipped recipe rebuilt: `rebuild_base`, `curve_match`;
- a model's card (`base_metrics.json`): `card`.
"""
from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..rewards import correctness_reward


def card(model: str) -> dict:
    """A model's card, `base_metrics.json` beside its weights (benchmarks/base_metrics.py writes it); {} if absent."""
    from ..models import resolve_path

    f = Path(resolve_path(model)) / "base_metrics.json"
    return json.loads(f.read_text()) if f.exists() else {}


def param_counts(model) -> dict:
    """Total and trainable parameters of a (possibly LoRA-wrapped) model."""
    params = list(model.parameters())
    return {"total": sum(p.numel() for p in params), "trainable": sum(p.numel() for p in params if p.requires_grad)}


def sample_outcomes(ro, tasks: list) -> pd.DataFrame:
    """One row per sampled response: prompt index, n_ops, length, correct, truncated."""
    rows = [tasks[i] for i in ro.prompt_index.tolist()]
    return pd.DataFrame({
        "prompt": ro.prompt_index.numpy(), "n_ops": [r.get("n_ops", 0) for r in rows],
        "length": ro.lengths.numpy(), "correct": [correctness_reward(t, r["answer"]) for t, r in zip(ro.texts, rows)],
        "truncated": ro.truncated.numpy()})


def group_outcomes(df: pd.DataFrame) -> dict:
    """Share of prompts whose G samples are all correct, all wrong, or mixed (df from `sample_outcomes`)."""
    per_prompt = df.groupby("prompt")["correct"].mean()  # (n_prompts,)
    return {"all_correct": float((per_prompt == 1).mean()), "all_wrong": float((per_prompt == 0).mean()),
            "mixed": float(((per_prompt > 0) & (per_prompt < 1)).mean())}


def expert_load(model, ro) -> np.ndarray:
    """Share of routed (token, slot) picks that go to each expert, per layer: (n_layers, n_experts).

    Counts every real prompt and completion token of the rollout; each token contributes top_k picks.
    """
    from ..models import router_topk

    device = next(model.parameters()).device
    ids = torch.cat([ro.prompt_ids, ro.completion_ids], dim=1)  # (B, P + T)
    mask = torch.cat([ro.prompt_mask, ro.completion_mask], dim=1).bool()  # (B, P + T)
    picks = router_topk(model, ids.to(device), mask.long().to(device)).cpu()  # (L, B, P + T, k)
    n_experts = int(model.config.num_experts)
    counts = [torch.bincount(layer[mask].flatten(), minlength=n_experts) for layer in picks]  # L x (E,)
    load = torch.stack(counts).float()  # (L, E)
    return (load / load.sum(dim=1, keepdim=True)).numpy()


def rebuild_base(arch: str, out_dir, steps: int | None = None) -> list:
    """Pretrain an embedded base policy into `out_dir` (never data/models); reuse a finished rebuild.

    The recipe is the shipped model's own (its train_log.json: steps, batch, micro-batches, lr, ...).
    steps=None runs it whole; fewer steps reproduce the start of its loss curve (the warm-up learning rate does
    not depend on the total). Returns the loss curve.
    """
    from ..models import EMBEDDED
    from ..paths import resolve
    from ..pretrain import pretrain, shipped_config

    shipped = json.loads((resolve(EMBEDDED[arch]) / "train_log.json").read_text())
    cfg = shipped_config(arch, out=str(out_dir), **({} if steps is None else {"steps": steps}))
    log = Path(out_dir) / "train_log.json"
    if log.exists() and _same_recipe(json.loads(log.read_text()), cfg, shipped["torch_threads"]):
        return json.loads(log.read_text())["loss"]
    before = torch.get_num_threads()
    torch.set_num_threads(shipped["torch_threads"])  # the shipped curve's thread count: same float sums
    try:
        return pretrain(cfg, show_progress=False)
    finally:
        torch.set_num_threads(before)


def _same_recipe(recorded: dict, cfg, threads: int) -> bool:
    """Whether a rebuild's train_log.json was made by the recipe `cfg` (every field but `out`; fields the log lacks
    take their defaults) on `threads` torch threads: a rebuild of an older recipe or shipped model is redone."""
    from ..pretrain import PretrainConfig

    names = {f.name for f in fields(PretrainConfig)}
    made = PretrainConfig(**{k: v for k, v in recorded["config"].items() if k in names})
    return (replace(made, out=cfg.out) == cfg) and recorded.get("torch_threads") == threads


def curve_match(rebuilt: list, shipped: list) -> dict:
    """Largest |difference| of two loss curves over their common prefix, and its length."""
    n = min(len(rebuilt), len(shipped))
    diff = np.abs(np.asarray(rebuilt[:n]) - np.asarray(shipped[:n]))
    return {"steps_compared": n, "max_abs_diff": float(diff.max()) if n else float("nan")}
