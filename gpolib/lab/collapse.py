"""DESIGN's collapse of a training run (P4, S1's and P3's grids): its training reward below the base's for >= 5
consecutive steps, the base's reward being the run's step-0 reward (its first rollout samples the base policy) in
every caller: S1's cells, P3's cells, P4's runs and the replay probe."""
from __future__ import annotations

COLLAPSE_STEPS = 5
"""DESIGN: a run collapses when its training reward stays below the base's for >= 5 consecutive steps"""


def collapsed(rewards, base: float | None = None, run: int = COLLAPSE_STEPS) -> bool:
    """True when `rewards` (per step) stay below `base` (strictly) for >= `run` consecutive steps; `base` None: the
    step-0 reward, rewards[0] (no rewards: False)."""
    if base is None:
        if len(rewards) == 0:
            return False
        base = rewards[0]
    streak = 0
    for r in rewards:
        streak = streak + 1 if r < base else 0
        if streak >= run:
            return True
    return False
