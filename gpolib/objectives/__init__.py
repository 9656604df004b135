"""The GRPO-family objective as pure tensor functions: one pipeline, and one object per surrogate.

    J = aggregate( w * keep * f(r, A) - beta * k3 );   loss = -J              `policy_loss` (loss.py)

composed from a `LossConfig`, one module per step:
  advantages.py   A: group-relative advantages (DeepSeekMath Eq. 3, Dr. GRPO, RLOO), computed before the loss;
  ratios.py       r: the importance ratio per token (GRPO, DAPO) or per sequence (GSPO Eq. 7, 13-14);
  surrogate.py    f(r, A): the base of the surrogates and their registry; each surrogate is an object of its own
                  module holding its term, parameters, checks, diagnostics and TRL / verl export:
                    clip.py   PPO's clip with DAPO's decoupled range (GRPO, DAPO, GSPO, ...),
                    cispo.py  CISPO's capped, detached IS weight (MiniMax-M1),
                    gmpo.py   GMPO's geometric mean of log-space-clipped token ratios,
                    sapo.py   SAPO's soft sigmoid gate of the ratio,
                    luspo.py  LUSPO's length-scaled GSPO term,
                    vespo.py  VESPO's detached Gamma-shaped weight of the sequence ratio;
  selection.py    keep: the high-entropy tokens (Beyond the 80/20 rule) and the off-policy sequence mask
                  (DeepSeek-V3.2), off by default;
  mismatch.py     w: the TIS / MIS weight on the rollout engine's mismatch (Yao et al. 2025);
  kl.py           k3: the KL to the reference (DeepSeekMath Eq. 4);
  aggregation.py  the reduction of the token terms (GRPO Eq. 3, DAPO Eq. 8, Dr. GRPO).
A new surrogate is one module here (it registers itself; every module of the package is imported below) and
one preset (CONTRIBUTING.md). Shapes: B responses,
T completion positions; `mask` is 1 on real completion tokens. Each equation sits in a comment right above the
line that computes it; derivations live in the notebooks. Importing the package loads no torch.
"""
import importlib
import pkgutil

from .advantages import ADV_EPS, check_scale, group_advantages
from .aggregation import aggregate, subset_scale
from .kl import k1_kl, k3_kl
from .loss import policy_loss, ratio_diagnostics
from .mismatch import mismatch_correction, mismatch_diagnostics, mismatch_weights
from .ratios import importance_ratio, sequence_log_ratio, token_log_ratio
from .surrogate import SURROGATES, Surrogate, per_token, register, surrogate_of
from .clip import Clip, clip_masks, clipped_surrogate
from .cispo import Cispo
from .gmpo import Gmpo, geometric_ratio
from .sapo import Sapo
from .luspo import Luspo
from .vespo import Vespo

__all__ = ["ADV_EPS", "check_scale", "group_advantages", "aggregate", "subset_scale", "k1_kl", "k3_kl",
           "policy_loss", "ratio_diagnostics", "mismatch_correction", "mismatch_diagnostics", "mismatch_weights",
           "importance_ratio", "sequence_log_ratio", "token_log_ratio", "SURROGATES", "Surrogate", "per_token",
           "register", "surrogate_of", "Clip", "clip_masks", "clipped_surrogate", "Cispo", "Gmpo", "geometric_ratio",
           "Sapo", "Luspo", "Vespo"]

for _module in pkgutil.iter_modules(__path__):  # the built-ins above first, in that order; then any other module
    importlib.import_module(f"{__name__}.{_module.name}")
