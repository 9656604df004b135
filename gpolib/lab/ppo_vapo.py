"""Notebook 07, PPO and VAPO (the value-model baselines): claims V1 and V2 (measurements come with the notebook).

- V1 GRPO drops PPO's critic and its cost, V2 value-based advantages train better: `verdict_v1`, `verdict_v2`.
"""
from __future__ import annotations

from .verdicts import PARTLY, NOT, REPRODUCED, Verdict, grade, mean, seeds_text


def verdict_v1(e: dict) -> Verdict:
    mem, step = e["mem_grpo"] / e["mem_ppo"], e["time_grpo"] / e["time_ppo"]
    return grade([mem < 1, step < 1]), f"GRPO/PPO peak memory {mem:.2f}, step time {step:.2f}"


def verdict_v2(e: dict) -> Verdict:
    vapo, dapo, grpo = e["acc_vapo"], e["acc_dapo"], e["acc_grpo"]
    v = REPRODUCED if mean(vapo) >= mean(dapo) else PARTLY if mean(vapo) >= mean(grpo) else NOT
    if v == REPRODUCED and len(vapo) < 3:
        v = PARTLY
    return v, f"held-out acc VAPO {seeds_text(vapo)}, DAPO {seeds_text(dapo)}, GRPO {seeds_text(grpo)}"


VERDICTS = {"V1": verdict_v1, "V2": verdict_v2}
