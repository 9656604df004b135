"""Measurements the notebooks need, kept out of the notebooks so that each cell stays one action.

- base behaviour of a policy (notebook 00): `sample_outcomes`, `group_outcomes`, `expert_load`,
  `param_counts`, `rebuild_base`;
- GRPO (notebook 01): `advantage_table`, `kl_samples`, `kl_check` (DeepSeekMath Eq. 4);
- ratio decay (notebook 02): `ratio_records`, `bucket_stats`, `extreme_share` (GSPO Sec. 2, Eq. 7).
Derivations live in the notebooks' markdown; docstrings name the equation they compute.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .objectives import group_advantages, k1_kl, k3_kl, sequence_log_ratio
from .rewards import correctness_reward


# ---------------------------------------------------------------- 00: base policies

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
    from .models import router_topk

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

    steps=None runs the shipped recipe; fewer steps reproduce the start of its loss curve (the warm-up
    learning rate does not depend on the total). Returns the loss curve.
    """
    from .pretrain import PretrainConfig, pretrain

    cfg = PretrainConfig(arch=arch, out=str(out_dir), **({} if steps is None else {"steps": steps}))
    log = Path(out_dir) / "train_log.json"
    if log.exists() and json.loads(log.read_text())["config"]["steps"] == cfg.steps:
        return json.loads(log.read_text())["loss"]
    return pretrain(cfg, show_progress=False)


def curve_match(rebuilt: list, shipped: list) -> dict:
    """Largest |difference| of two loss curves over their common prefix, and its length."""
    n = min(len(rebuilt), len(shipped))
    diff = np.abs(np.asarray(rebuilt[:n]) - np.asarray(shipped[:n]))
    return {"steps_compared": n, "max_abs_diff": float(diff.max()) if n else float("nan")}


# ---------------------------------------------------------------- 01: GRPO

def advantage_table(rewards: torch.Tensor, group_size: int) -> pd.DataFrame:
    """Rewards and group-relative advantages (DeepSeekMath Eq. 3) under scale 'group' and 'none' (Dr. GRPO)."""
    n = len(rewards)
    return pd.DataFrame({"group": np.arange(n) // group_size, "reward": rewards.float().numpy(),
                         "A (group)": group_advantages(rewards, group_size, "group").numpy(),
                         "A (none)": group_advantages(rewards, group_size, "none").numpy()})


def random_categoricals(vocab: int, seed: int = 0, scale: float = 0.3) -> tuple:
    """Two random distributions over `vocab` tokens as log-probs (pi, pi_ref), each (V,).

    Logits are iid N(0, scale^2); scale 0.3 gives KL ~ 0.06 nats, a policy close to its reference.
    """
    gen = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(2, vocab, generator=gen, dtype=torch.float64)  # (2, V)
    logp = torch.log_softmax(logits, dim=-1)
    return logp[0], logp[1]


def kl_samples(logp: torch.Tensor, ref_logp: torch.Tensor, n: int, seed: int = 0) -> dict:
    """Exact KL[pi || pi_ref] and n per-sample k1, k3 estimates with tokens drawn from pi (DeepSeekMath Eq. 4)."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.multinomial(logp.exp(), n, replacement=True, generator=gen)  # (n,)
    exact = float((logp.exp() * (logp - ref_logp)).sum())
    return {"exact": exact, "k1": k1_kl(logp[tokens], ref_logp[tokens]).numpy(),
            "k3": k3_kl(logp[tokens], ref_logp[tokens]).numpy()}


def kl_check(vocab: int = 12, n: int = 100_000, seed: int = 0, scale: float = 0.3) -> dict:
    """G2 evidence: exact KL, k1/k3 means, relative error of k3, min k3, variances."""
    s = kl_samples(*random_categoricals(vocab, seed, scale), n, seed)
    k1, k3 = s["k1"], s["k3"]
    return {"exact": s["exact"], "k1_mean": float(k1.mean()), "k3_mean": float(k3.mean()),
            "k1_rel_err": abs(float(k1.mean()) - s["exact"]) / s["exact"],
            "k3_rel_err": abs(float(k3.mean()) - s["exact"]) / s["exact"],
            "k1_min": float(k1.min()), "k3_min": float(k3.min()),
            "k1_var": float(k1.var(ddof=1)), "k3_var": float(k3.var(ddof=1))}


# ---------------------------------------------------------------- 02: ratio decay

@torch.no_grad()
def _current_logps(trainer, ro) -> torch.Tensor:
    trainer.model.eval()
    with torch.no_grad():
        return trainer.logps(ro).cpu()  # (B, T)


def ratio_step(trainer, step: int) -> pd.DataFrame:
    """One RL step with the per-response ratio of the updated policy to pi_old.

    Steps: 1. collect and score a batch; 2. pi_old by recompute; 3. the mu minibatch updates;
    4. recompute log pi_theta of the whole batch; 5. log prod_t rho_t and log s_i (GSPO Eq. 7).
    """
    torch.manual_seed(trainer.cfg.seed * 1_000_003 + step)  # the seeding of train.train_step
    batch = trainer.collect(step)
    old = _current_logps(trainer, batch.rollout)  # (B, T)
    trainer.update(batch, step)
    new = _current_logps(trainer, batch.rollout)  # (B, T)
    mask = batch.rollout.completion_mask.float()  # (B, T)
    return pd.DataFrame({"step": step, "length": batch.rollout.lengths.numpy(),
                         "log_prod_rho": ((new - old) * mask).sum(dim=1).numpy(),  # log prod_t rho_t
                         "log_s": sequence_log_ratio(new, old, mask).numpy(),  # log s_i, GSPO Eq. 7
                         "advantage": batch.advantages.numpy()})


def ratio_records(trainer, steps: int, start: int = 0) -> pd.DataFrame:
    """`ratio_step` for steps start..start+steps-1 (training continues across them); one row per response."""
    return pd.concat([ratio_step(trainer, s) for s in range(start, start + steps)], ignore_index=True)


def bucket_stats(df: pd.DataFrame, n_buckets: int) -> pd.DataFrame:
    """Equal-count length buckets: mean length, Var[log prod rho], Var[log s_i], count, one row per bucket.

    Under independent token log-ratios of variance sigma^2, Var[log prod rho] = |o| sigma^2 (grows with
    length) while Var[log s_i] = sigma^2 / |o| (shrinks).
    """
    bucket = pd.qcut(df["length"].rank(method="first"), n_buckets, labels=False)
    g = df.groupby(bucket)
    return pd.DataFrame({"len_mean": g["length"].mean(), "var_log_prod_rho": g["log_prod_rho"].var(),
                         "var_log_s": g["log_s"].var(), "n": g.size()}).rename_axis("bucket").reset_index()


def extreme_share(df: pd.DataFrame, n_buckets: int, low: float = 0.2, high: float = 5.0) -> dict:
    """In the top length bucket: share of responses whose product ratio is < low or > high."""
    bucket = pd.qcut(df["length"].rank(method="first"), n_buckets, labels=False)
    top = df[bucket == n_buckets - 1]
    out = (top["log_prod_rho"] < math.log(low)) | (top["log_prod_rho"] > math.log(high))
    return {"n": int(len(top)), "min_length": int(top["length"].min()), "share": float(out.mean())}
