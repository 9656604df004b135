"""Notebook 09, the family since GSPO: CISPO, GMPO, RLOO and truncated importance sampling (claims C1-C4).

- the arms, `ARMS` (GRPO at mu = 1 = notebook 01's runs, `HOME`): C1 CISPO against DAPO without dynamic sampling,
  C2 GMPO against GRPO, both at mu = 4; C3 GRPO sampled by the W8A8 engine without and with TIS (C = 2) against
  GRPO on the float32 engine;
- C1 (`C1_RULE`), C2 (`C2_RULE`), C3 (`C3_RULE`, conditional on the engines' measured mismatch) and C4 (exact):
  `c1_evidence` ... `verdict_c4`;
- C4's identity for one group, `rloo_table`; every objective of the workbook on the three axes, `axes_table`.
Derivations live in notebook 09; docstrings name the formula they compute.
"""
from __future__ import annotations

from . import grpo

MU = 4
"""minibatch updates per rollout batch for C1 and C2: at mu = 1 every ratio is 1 and neither a clip nor a
geometric mean acts"""

ARMS = {
    "grpo": grpo.ARMS["grpo"],  # C3's float32-engine reference (mu = 1): notebook 01's runs
    "grpo_w8a8": {"preset": "grpo", "rollout_weights": "w8a8"},
    "grpo_w8a8_tis": {"preset": "grpo", "rollout_weights": "w8a8", "loss_mismatch_correction": "token_truncate",
                      "loss_mismatch_cap": 2.0},
    "dapo_mu4": {"preset": "dapo", "dynamic_sampling": False, "mu": MU},
    "cispo_mu4": {"preset": "cispo", "mu": MU, "overlong": "shaping", "overlong_cache": 0.2},
    "grpo_mu4": {"preset": "grpo", "mu": MU},
    "gmpo_mu4": {"preset": "gmpo", "mu": MU},
}
"""run name -> preset and fields, 3 seeds x 100 steps each, equal prompts, G, lr and budget.
C1: CISPO (MiniMax-M1 Sec. 3.1, its preset) with DAPO's soft overlong punishment, against DAPO without dynamic
sampling (equal samples per step): the two differ only in the surrogate and its range. C2: GMPO against GRPO,
the same loss otherwise. C3: GRPO's defaults with the 8-bit engine of weights and activations (W8A8,
`TrainConfig.rollout_weights`), without and with token-level TIS at C = 2 (Yao et al. 2025)."""
HOME = {"grpo": "01_grpo"}
"""the float32 GRPO arm is notebook 01's runs (same configuration): trained once, reused here"""
