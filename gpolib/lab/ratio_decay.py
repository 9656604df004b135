"""Notebook 02, ratio decay (GSPO Sec. 2, Eq. 7): claim S1.

After mu >= 2 updates on one batch, the product of token ratios of a response drifts with its length
while the sequence ratio s_i (a geometric mean) does not:
- per-response ratios of the updated policy to pi_old, `ratio_step`, `ratio_records` (`cached_records`: once per config);
- equal-count length buckets, `bucket_stats`; extreme product ratios, `extreme_share`;
- S1: `verdict_s1`.
"""
from __future__ import annotations

import math

import pandas as pd

from ..objectives import sequence_log_ratio
from .verdicts import NOT, PARTLY, REPRODUCED, S1_SEQ_REL_TOL, Verdict, at_least


def ratio_step(trainer, step: int) -> pd.DataFrame:
    """One RL step of `trainer` with the per-response ratio of the updated policy to pi_old.

    Steps: 1. collect and score a batch (`Trainer.collect`, seeded by the step as in training);
    2. pi_old: the policy's log-probs before the update; 3. the mu minibatch updates (`Trainer.update`);
    4. log pi_theta of the whole batch after them; 5. log prod_t rho_t and log s_i (GSPO Eq. 7).
    """
    batch = trainer.collect(step)
    old = trainer.policy_logps(batch.rollout)  # (B, T)
    trainer.update(batch, step)
    new = trainer.policy_logps(batch.rollout)  # (B, T)
    mask = batch.rollout.completion_mask.float()  # (B, T)
    return pd.DataFrame({"step": step, "length": batch.rollout.lengths.numpy(),
                         "log_prod_rho": ((new - old) * mask).sum(dim=1).numpy(),  # log prod_t rho_t
                         "log_s": sequence_log_ratio(new, old, mask).numpy(),  # log s_i, GSPO Eq. 7
                         "advantage": batch.advantages.numpy()})


def ratio_records(trainer, steps: int, start: int = 0) -> pd.DataFrame:
    """`ratio_step` for steps start..start+steps-1 (training continues across them); one row per response."""
    return pd.concat([ratio_step(trainer, s) for s in range(start, start + steps)], ignore_index=True)


def cached_records(cfg, run_dir) -> pd.DataFrame:
    """`ratio_records` of a fresh `Trainer(cfg)` over cfg.steps, saved to `run_dir/ratios.csv`; a finished folder
    of the same config and data (`RunDir.check_config`, stale folders are refused) is read back instead."""
    from ..rundir import RunDir
    from ..train import Trainer

    run = RunDir(run_dir, cfg)
    run.check_config()
    csv = run.path / "ratios.csv"
    if run.reuse() and csv.exists():
        return pd.read_csv(csv)
    df = ratio_records(Trainer(cfg), cfg.steps)
    df.to_csv(csv, index=False)
    run.write_summary({"fingerprint": cfg.fingerprint(), "finished": True, "steps": cfg.steps})
    return df


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


# ---------------------------------------------------------------- verdict

def verdict_s1(e: dict) -> Verdict:
    grows = e["slope"] > 0 and e["r2"] >= 0.5
    flat = at_least(S1_SEQ_REL_TOL * abs(e["slope"]), e["seq_spread_slope"])
    v = REPRODUCED if grows and flat else PARTLY if e["slope"] > 0 else NOT
    return v, (f"Var[log prod rho] slope {e['slope']:.2e}/token (R^2 {e['r2']:.2f}); "
               f"log s_i spread slope {e['seq_spread_slope']:.2e}")


VERDICTS = {"S1": verdict_s1}
