"""`LossConfig`: the policy objective's axes, validated on construction (re-exported by `gpolib.config`).

Ratio level x surrogate x aggregation, plus the KL weight, the rollout/trainer mismatch correction and two selection
steps (high-entropy tokens, the off-policy sequence mask; `objectives.selection`). The
surrogate is an object (`gpolib.objectives.surrogate`) holding its own parameters: `Clip(eps_low, eps_high)`,
`Cispo(cap, floor)`, `Gmpo(log_clip_low, log_clip_high)`; a name stands for its defaults.
Every field added after the first runs were recorded has a default that keeps the old objective, and a run's
identity holds only the fields that differ from their defaults (`TrainConfig.identity`), so adding one does
not rename recorded runs. Those runs recorded every surrogate's bounds as `eps_low` / `eps_high`: `identity` maps
the surrogate's fields back to those names, and `from_dict` reads such a record. A bad value raises `ValueError`
naming the field and the allowed values (`gpolib.validation.check_loss`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

from .objectives.clip import Clip
from .objectives.surrogate import Surrogate, from_dict as surrogate_from_dict, surrogate_class, surrogate_of
from .validation import check_loss, known_fields


@dataclass(frozen=True, kw_only=True)
class LossConfig:
    """The policy objective: ratio level x surrogate x aggregation (+ optional KL, mismatch correction)."""

    ratio_level: str = "token"
    """'token' (GRPO/DAPO: r_t = pi/pi_old per token), 'sequence' (GSPO Eq. 7:
    s_i = exp(mean_t log r_t), broadcast to tokens), 'sequence_token' (GSPO-token Eq. 13-14)."""
    surrogate: Surrogate = field(default_factory=Clip)
    """the per-token objective f(r, A) with its parameters: `Clip(eps_low=0.2, eps_high=0.28)` (PPO's clip with DAPO's
    decoupled range, DAPO Eq. 8), `Cispo(cap=5.0)` (MiniMax-M1 Sec. 3.1: sg(clip(r)) A log pi, every token keeps
    its gradient), `Gmpo(log_clip_low=0.4, log_clip_high=0.4)` (GMPO: the geometric mean of log-space-clipped token
    ratios times A, one term per response), `Sapo(tau_pos, tau_neg)` (SAPO's soft gate), `Luspo(eps_low, eps_high)`
    (GSPO's term times the response length), `Vespo(shape_pos, rate_pos, shape_neg, rate_neg)` (VESPO's Gamma-shaped
    weight), or a registered name for its defaults ('clip', 'cispo', 'gmpo', 'sapo', 'luspo', 'vespo')."""
    aggregation: str = "seq_mean_token_mean"
    """'seq_mean_token_mean' (GRPO Eq. 3, sample-level), 'token_mean' (DAPO Eq. 8, token-level),
    'seq_mean_token_sum_norm' (Dr. GRPO: sum of token terms / (B * max_len))."""
    max_len: Optional[int] = None
    """constant normaliser of Dr. GRPO (the generation budget); required by 'seq_mean_token_sum_norm'."""
    beta: float = 0.0
    """weight of the k3 KL penalty to the reference policy (DeepSeekMath Eq. 3-4); 0 disables it."""
    mismatch_correction: str = "none"
    """rollout-engine/trainer mismatch correction on w = pi_old / pi_engine (Yao et al. 2025; TRL 1.16's
    `vllm_importance_sampling_mode`): 'none', 'token_truncate' (TIS), 'token_mask' (MIS), 'sequence_truncate',
    'sequence_mask'. The per-token loss term is multiplied by the detached weight, as TRL does."""
    mismatch_cap: float = 2.0
    """C, the cap of the mismatch weight: truncated to C or masked above C (FlashRL / Yao et al. 2025: C = 2);
    finite (a config is stored as strict JSON; a huge C stands for no cap)."""
    top_entropy_quantile: float = 1.0
    """rho, the share of tokens, highest entropy first, that keep their policy term ("Beyond the 80/20 rule",
    arXiv 2506.01939: 0.2; TRL 1.16's `top_entropy_quantile`); 1 keeps every token (`objectives.selection`)."""
    off_policy_mask_threshold: Optional[float] = None
    """delta of DeepSeek-V3.2's off-policy sequence mask: a response with A < 0 whose mean log(pi_sample / pi_theta)
    exceeds delta is dropped (TRL 1.16's `off_policy_mask_threshold`); None: no mask (`objectives.selection`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "surrogate", surrogate_of(self.surrogate))
        check_loss(self)

    def replace(self, **changes) -> "LossConfig":
        """A copy with fields changed; a parameter of the surrogate (`eps_high`, `cap`, ...) changes the surrogate,
        the new one when `surrogate` changes too (a name gives that surrogate's defaults)."""
        return replaced(self, changes)

    def to_dict(self) -> dict:
        """As a run's config.json stores it: the surrogate as {"name": ..., its fields}."""
        return {**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
                "surrogate": self.surrogate.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> "LossConfig":
        """A stored loss config: `to_dict`'s, or one recorded before surrogates were objects (the surrogate's name
        beside eps_low / eps_high, read by `Surrogate.from_identity`)."""
        d = dict(d)
        s = d.pop("surrogate", None)
        if isinstance(s, dict):
            return cls(surrogate=surrogate_from_dict(s), **d)
        flat = {**cls().identity(), **d, **({"surrogate": s} if s is not None else {})}
        params = {k: v for k, v in flat.items() if k not in FIELDS}
        return cls(surrogate=surrogate_class(flat["surrogate"]).from_identity(params),
                   **{k: v for k, v in d.items() if k in FIELDS})

    def identity(self) -> dict:
        """Every field as a run's identity holds it: the surrogate by name, its parameters beside the other fields
        under the names runs recorded them with (`Surrogate.identity`)."""
        return {**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
                "surrogate": self.surrogate.name, **self.surrogate.identity()}


FIELDS = tuple(f.name for f in dataclasses.fields(LossConfig))
"""LossConfig's own fields (the surrogate's parameters are the surrogate's)"""


def replaced(loss: LossConfig, changes: dict, prefix: str = "") -> LossConfig:
    """`LossConfig.replace`; an unknown name is refused as `prefix` + name, with the closest known ones."""
    changes = dict(changes)
    surrogate = surrogate_of(changes.pop("surrogate", loss.surrogate))
    own = {k: changes.pop(k) for k in list(changes) if k in surrogate.fields()}
    known_fields(changes, settable(surrogate), "LossConfig", prefix=prefix)
    return dataclasses.replace(loss, surrogate=dataclasses.replace(surrogate, **own), **changes)


def settable(surrogate: Surrogate) -> list:
    """The names `LossConfig.replace` (and `--set loss_<name>`) takes with this surrogate: the config's fields and
    the surrogate's parameters."""
    return [*FIELDS, *surrogate.fields()]
