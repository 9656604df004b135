"""Notebook 00, the task regime: does the base policy err from difficulty, and does longer work pay?

- `completion_table`      one row per sampled response: difficulty, length, correctness, forms used.
- `form_accuracy`         accuracy of product steps by multiplicand digits and form (direct / long).
- `length_correctness`    within-prompt correlation of length and correctness, by difficulty bucket.
- `line_lengths`          mean tokens per kind of line (where the length of a set of completions goes).
- `regime_targets`        every target of DESIGN.md ("The embedded task and models") beside our value.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from ..rewards import correctness_reward
from ..tasks import line_kinds, product_steps

BUCKETS = (("0-2", 0, 2), ("3-5", 3, 5), ("6-8", 6, 8), ("9-11", 9, 11), ("12+", 12, 10**6))
"""difficulty buckets of `hardness` (total multiplicand digits of a chain's products)"""


def bucket(hardness: int) -> str:
    return next(name for name, lo, hi in BUCKETS if lo <= hardness <= hi)


def completion_table(ro, tasks: list) -> pd.DataFrame:
    """One row per response of rollout `ro` on `tasks`: prompt, hardness, bucket, length, correct,
    truncated, and the number of direct / long product lines it wrote."""
    rows = [tasks[i] for i in ro.prompt_index.tolist()]
    forms = [[s["form"] for s in product_steps(t)] for t in ro.texts]
    return pd.DataFrame({
        "prompt": ro.prompt_index.numpy(), "hardness": [r["hardness"] for r in rows],
        "bucket": [bucket(r["hardness"]) for r in rows], "length": ro.lengths.numpy(),
        "correct": [correctness_reward(t, r["answer"]) for t, r in zip(ro.texts, rows)],
        "truncated": ro.truncated.numpy().astype(bool),
        "direct": [f.count("direct") for f in forms], "long": [f.count("long") for f in forms]})


def form_accuracy(texts: list) -> pd.DataFrame:
    """Product steps by (multiplicand digits, form): count and share written right."""
    steps = pd.DataFrame([s for t in texts for s in product_steps(t)], columns=["digits", "form", "ok"])
    table = steps.groupby(["digits", "form"])["ok"].agg(["count", "mean"]).unstack("form")
    table.columns = [f"{form} {stat}".replace("mean", "acc").replace("count", "n") for stat, form in table.columns]
    return table


def length_correctness(df: pd.DataFrame) -> pd.DataFrame:
    """Mean within-prompt correlation of length and correctness over mixed groups, by bucket."""
    def corr(g: pd.DataFrame) -> float:
        ok = 0 < g["correct"].mean() < 1 and g["length"].std() > 0
        return float(np.corrcoef(g["length"], g["correct"])[0, 1]) if ok else np.nan
    per_prompt = df.groupby(["bucket", "prompt"]).apply(corr, include_groups=False).rename("corr")
    out = per_prompt.groupby("bucket").agg(["mean", "count"])  # count: mixed prompts with a correlation
    return out.reindex([name for name, _, _ in BUCKETS]).rename(columns={"count": "mixed prompts"})


def line_lengths(texts: list) -> pd.Series:
    """Mean tokens per response in each kind of line ('long', 'direct', 'sum', 'answer', 'other')."""
    return pd.DataFrame([line_kinds(t) for t in texts]).mean()


def _target(name: str, value: float, lo: float, hi: float, shown: str) -> dict:
    return {"target": name, "wanted": shown, "ours": round(float(value), 3), "met": bool(lo <= value <= hi)}


def regime_targets(df: pd.DataFrame, G: int, grpo: dict | None = None) -> pd.DataFrame:
    """DESIGN.md's regime targets beside our measurement (`df` from `completion_table` of the base).

    `grpo` (optional): {"acc_step50": ..., "acc_end": ..., "len_base": ..., "len_end": ...} measured on
    held-out prompts at the default hyper-parameters.
    """
    per_prompt = df.groupby("prompt")["correct"].mean()
    hardest = df[df["bucket"] == BUCKETS[-1][0]]["length"].mean()
    rows = [_target("base accuracy at T = 1", df["correct"].mean(), 0.25, 0.50, "0.25-0.50"),
            _target(f"all-correct groups of {G}", (per_prompt == 1).mean(), 0.05, 1, ">= 0.05"),
            _target(f"all-wrong groups of {G}", (per_prompt == 0).mean(), 0.05, 1, ">= 0.05"),
            _target("mean length, hardest bucket (tokens)", hardest, 80, np.inf, ">= 80"),
            _target("truncated at max_new_tokens", df["truncated"].mean(), 0.03, 0.10, "0.03-0.10")]
    if grpo:
        rows += [_target("GRPO: held-out acc end - step 50", grpo["acc_end"] - grpo["acc_step50"], 1e-9, np.inf, "> 0"),
                 _target("GRPO: length end / base - 1", grpo["len_end"] / grpo["len_base"] - 1, 0.20, np.inf, ">= 0.20")]
    return pd.DataFrame(rows).set_index("target")


def long_share(texts: list) -> float:
    """Share of product lines written long."""
    forms = [s["form"] for t in texts for s in product_steps(t)]
    return float(np.mean([f == "long" for f in forms])) if forms else float("nan")


def eval_curve(run_dir) -> pd.DataFrame:
    """The held-out evaluations of a finished run, one row per evaluated step."""
    from ..train import load_summary

    return pd.DataFrame(load_summary(run_dir)["eval"]).set_index("step")


def grpo_dynamics(curve: pd.DataFrame, mid: int = 50) -> dict:
    """Accuracy at step `mid` (or the nearest evaluated step) and at the end; length at the start and end."""
    at_mid = curve.index[np.abs(curve.index - mid).argmin()]
    return {"acc_step50": float(curve.loc[at_mid, "acc/sample"]), "acc_end": float(curve["acc/sample"].iloc[-1]),
            "len_base": float(curve["len/mean"].iloc[0]), "len_end": float(curve["len/mean"].iloc[-1])}


def trained_policy(cfg, run_dir, device: str = "cpu", dtype: str = "float32"):
    """(model, tokenizer) of the finished run of `cfg` in `run_dir`: its base model with the run's LoRA adapter."""
    from pathlib import Path

    from peft import PeftModel

    from ..models import load_policy

    base, tok = load_policy(cfg.model, lora_r=0, device=device, dtype=dtype)
    with warnings.catch_warnings():  # peft 0.21 reads `model.is_gradient_checkpointing`, deprecated in transformers 5
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        return PeftModel.from_pretrained(base, str(Path(run_dir) / "adapter")).eval(), tok


def eval_noise(cfg, seeds=(12345, 2027)) -> pd.DataFrame:
    """The evaluation's own noise: the base policy (a run's step-0 evaluation, LoRA at zero) under two evaluation
    sampling seeds, everything else equal; the last row is their difference. Rows: eval_seed, columns as in
    `Trainer.evaluate` (held-out acc/sample at T = 1, acc/greedy, lengths)."""
    from dataclasses import replace

    from ..train import Trainer

    rows = {f"eval_seed {s}": Trainer(replace(cfg, eval_seed=s)).evaluate(0) for s in seeds}
    df = pd.DataFrame.from_dict(rows, orient="index").drop(columns="step")
    return pd.concat([df, (df.iloc[[1]] - df.iloc[0].values).rename(index=lambda _: "difference")])
