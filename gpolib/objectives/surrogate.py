"""The surrogate f(r, A): the base every surrogate derives from, and the registry that names them.

A surrogate is one frozen dataclass in one module (`clip.py`, `cispo.py`, `gmpo.py`): its parameters are its
fields, each named for what it bounds (a ratio clip range, an importance-weight cap, a log-space range), and it
holds everything the rest of the library needs to know about it:
  terms         f(r, A) per token, to be maximised: the equation above the line that computes it;
  check         its parameters, on construction; `check_loss` / `check_train` its relations with the LossConfig
                (the ratio levels it is defined for) and the TrainConfig;
  diagnostics   what it measures, named in `metrics` ("clipped" for a clip, "capped" for a cap, ...), and which
                tokens' gradient it zeroes (`ratio/log_range` reads the others);
  trl / verl    its keywords in TRL's GRPOConfig and its keys in verl's actor config, and what each target cannot
                reproduce (`trl_missing` / `verl_missing`), in each target's own convention;
  clipping      what it bounds, in words (a table cell);
  identity      its fields under the names a run's identity holds: runs recorded before surrogates were objects
                named every bound eps_low / eps_high, and keep their folder names (`from_identity` reads them back).
`register` enters a class under its `name` in SURROGATES and its metrics in gpolib.metrics.METRICS; `surrogate_of`
turns a name into the registered class's default object. The loss pipeline and the exports read only these
members: outside a surrogate's own module nothing branches on its name.
No torch at import (configs are read without it): the tensor work uses the tensors' own methods.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Optional

from .. import metrics
from ..validation import RATIO_LEVELS, choice, fail

if TYPE_CHECKING:
    import torch

SURROGATES: dict = {}
"""name -> surrogate class, in registration order"""


def per_token(advantages: "torch.Tensor") -> "torch.Tensor":
    """Advantages ready to multiply (B, T) token terms: one per response (B,) -> (B, 1); per token (B, T) as is."""
    return advantages.unsqueeze(1) if advantages.dim() == 1 else advantages


def decimal(x: float) -> float:
    """x rounded to 12 decimals: a bound moved between conventions (cap = 1 + eps) reads as typed (1.28 - 1 is
    0.28, not 0.28000000000000003)."""
    return round(x, 12)


@dataclass(frozen=True, kw_only=True)
class Surrogate:
    """One per-token objective f(r, A); a subclass per module, its parameters as fields (see the module docstring)."""

    name: ClassVar[str] = ""
    """the name configs, presets and exports use ('clip', 'cispo', ...)"""
    metrics: ClassVar[dict] = {}
    """its own diagnostics: metric name -> `gpolib.metrics.Metric` (update metrics)"""
    ratio_levels: ClassVar[tuple] = RATIO_LEVELS
    """the values of LossConfig.ratio_level it is defined for"""
    granularity: ClassVar[Optional[str]] = None
    """the granularity of its ratio in words, where the ratio level does not say it (GMPO's geometric mean)"""

    def __post_init__(self) -> None:
        self.check()

    # --- the objective ----------------------------------------------------------
    def terms(self, logps: "torch.Tensor", old_logps: "torch.Tensor", ratio: "torch.Tensor",
              advantages: "torch.Tensor", mask: "torch.Tensor") -> "torch.Tensor":
        """f(r, A) per token, to be maximised, (B, T): logps / old_logps / ratio / mask (B, T) (the ratio at the
        configured level, `ratios.importance_ratio`), advantages (B,) or (B, T)."""
        raise NotImplementedError(f"{type(self).__name__}.terms")

    def diagnostics(self, ratio: "torch.Tensor", old_logps: "torch.Tensor", advantages: "torch.Tensor",
                    mask: "torch.Tensor") -> tuple:
        """(its `metrics` as additive `Mean`s / `Share`s over the masked tokens, the (B, T) bool of the tokens whose
        gradient it zeroes or None). ratio: detached, at the configured level."""
        return {}, None

    # --- validation ---------------------------------------------------------------
    def check(self) -> None:
        """Its parameters, on construction: ValueError naming the field and what is allowed (`validation.fail`)."""

    def check_loss(self, loss) -> None:
        """Its relations with the rest of the LossConfig: the ratio levels it is defined for."""
        choice("ratio_level", loss.ratio_level, self.ratio_levels, f" with surrogate={self.name!r}")

    def check_train(self, cfg) -> None:
        """Its relations with the TrainConfig (the advantage estimator, ...); none by default."""

    # --- export -------------------------------------------------------------------
    def trl(self, loss) -> dict:
        """Its `trl.GRPOConfig` keywords (`loss_type` here overrides the aggregation's)."""
        return {}

    def trl_missing(self, loss) -> list:
        """What TRL 1.16 cannot reproduce of it, one line each."""
        return [f"surrogate={self.name!r} (no TRL loss_type computes it)"]

    def trl_classes(self) -> tuple:
        """(config class, trainer class) of TRL that train it."""
        from trl import GRPOConfig, GRPOTrainer
        return GRPOConfig, GRPOTrainer

    def verl(self, loss) -> dict:
        """Its verl keys, relative to the actor's config (`policy_loss.loss_mode`, `clip_ratio_low`, ...)."""
        return {}

    def verl_missing(self, loss) -> list:
        """What verl 0.9.1 cannot reproduce of it, one line each."""
        return [f"surrogate={self.name!r} (no verl policy loss computes it)"]

    # --- words, identity and storage ------------------------------------------------
    def clipping(self, loss) -> str:
        """What it bounds, with its bounds, short (a table cell)."""
        return "nothing"

    def fields(self) -> dict:
        """Its parameters: field name -> value."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_dict(self) -> dict:
        """As a stored config holds it: {"name": ..., its fields}."""
        return {"name": self.name, **self.fields()}

    def identity(self) -> dict:
        """Its parameters as a run's identity names them (its fields, unless its module maps older names)."""
        return self.fields()

    @classmethod
    def from_identity(cls, fields: dict) -> "Surrogate":
        """The object whose `identity()` is `fields`."""
        return cls(**fields)


def register(cls: type) -> type:
    """Class decorator: `cls` under its `name` in SURROGATES, its metrics in gpolib.metrics.METRICS."""
    if not cls.name or SURROGATES.get(cls.name, cls) is not cls:
        raise ValueError(f"surrogate name {cls.name!r} is empty or already taken by {SURROGATES.get(cls.name)}")
    metrics.register(cls.metrics)
    SURROGATES[cls.name] = cls
    return cls


def surrogate_class(name) -> type:
    """The registered class of a surrogate name; ValueError listing the names."""
    if isinstance(name, str) and name in SURROGATES:
        return SURROGATES[name]
    fail("surrogate", name, " | ".join(map(repr, SURROGATES)))


def surrogate_of(value) -> Surrogate:
    """A surrogate object from itself or from a registered name (the registered class's defaults)."""
    return value if isinstance(value, Surrogate) else surrogate_class(value)()


def from_dict(d: dict) -> Surrogate:
    """The object a stored {"name": ..., its fields} (`Surrogate.to_dict`) describes."""
    fields = dict(d)
    return surrogate_class(fields.pop("name", None))(**fields)
