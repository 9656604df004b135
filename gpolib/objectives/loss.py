"""The composed policy loss: ratio level -> surrogate -> selection -> mismatch weight -> KL -> aggregation.

    J = aggregate( w * keep * f(r, A) - beta * k3 );   loss = -J
Each step is one line of `policy_loss`, read off the `LossConfig`; the surrogate f is the config's object
(`gpolib.objectives.surrogate`), which the loss calls and never names.
Shapes: B responses, T completion positions; `mask` is 1 on real completion tokens.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..metrics import Mean, Range
from .aggregation import aggregate
from .kl import k3_kl
from .mismatch import mismatch_correction, mismatch_diagnostics
from .ratios import importance_ratio, token_log_ratio
from .selection import select
from .surrogate import per_token

if TYPE_CHECKING:
    import torch

    from ..loss_config import LossConfig


def policy_loss(logps: "torch.Tensor", old_logps: "torch.Tensor", advantages: "torch.Tensor", mask: "torch.Tensor",
                cfg: "LossConfig", ref_logps: "torch.Tensor | None" = None,
                engine_logps: "torch.Tensor | None" = None, entropies: "torch.Tensor | None" = None) -> tuple:
    """Loss to minimise and its diagnostics; logps/old_logps/mask (B, T), advantages (B,) or (B, T).

    f is cfg.surrogate's per-token term (clip: min(r A, clip(r, 1-eps_low, 1+eps_high) A)) and w the detached
    mismatch weight (1 unless cfg.mismatch_correction is on; engine_logps (B, T) are then required; TRL 1.16 weights
    its per-token loss the same way, before the KL term). engine_logps given without a correction: `mismatch/*`
    measured only (clipped_share: the tokens TIS at the cap would truncate). `info` maps metric names to additive
    `Mean`s over the masked tokens (`ratio_diagnostics`: the surrogate's own and the ratio's; with beta > 0 also
    `kl/mean`, with engine log-probs `mismatch/*`). keep: the selection steps (`objectives.selection`, off by
    default): the top-rho entropy tokens (entropies (B, T) then required) and the off-policy sequence mask
    (pi_sample: engine_logps if given, else old_logps), with their `select/*` shares.
    """
    mask = mask.to(logps.dtype)
    old_logps = old_logps.detach()
    surrogate = cfg.surrogate
    # 1. r at the configured level: r_{i,t}, s_i or s_{i,t}
    ratio = importance_ratio(logps, old_logps, mask, cfg.ratio_level)  # (B, T)
    # 2. f(r, A), e.g. min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)
    per_tok = surrogate.terms(logps, old_logps, ratio, advantages, mask)  # (B, T)
    info = ratio_diagnostics(surrogate, ratio.detach(), logps.detach(), old_logps, advantages, mask)
    # 2b. keep * f: the high-entropy tokens, the responses the off-policy mask keeps (both off by default)
    sample_logps = old_logps if engine_logps is None else engine_logps.detach()
    per_tok, selection_info = select(per_tok, cfg, logps, sample_logps, advantages, mask, entropies)  # (B, T)
    info.update(selection_info)
    # 3. times w = sg(TIS / MIS weight of pi_old / pi_engine); measured wherever engine log-probs are given
    if cfg.mismatch_correction != "none":
        if engine_logps is None:
            raise ValueError(f"engine_logps are required when mismatch_correction={cfg.mismatch_correction!r}")
        weights, mismatch_info = mismatch_correction(old_logps, engine_logps.detach(), mask,
                                                     cfg.mismatch_correction, cfg.mismatch_cap)
        per_tok = per_tok * weights  # (B, T)
        info.update(mismatch_info)
    elif engine_logps is not None:
        info.update(mismatch_diagnostics(old_logps, engine_logps.detach(), mask, "token_truncate", cfg.mismatch_cap))
    # 4. minus beta * k3 to the reference
    if cfg.beta > 0:
        if ref_logps is None:
            raise ValueError("ref_logps are required when beta > 0")
        kl = k3_kl(logps, ref_logps.detach())  # (B, T)
        per_tok = per_tok - cfg.beta * kl
        info["kl/mean"] = Mean.of(kl.detach(), mask)
    # 5. loss = -J = -aggregate(per_token)
    loss = -aggregate(per_tok, mask, cfg.aggregation, cfg.max_len)
    return loss, info


def ratio_diagnostics(surrogate, ratio: "torch.Tensor", logps: "torch.Tensor", old_logps: "torch.Tensor",
                      advantages: "torch.Tensor", mask: "torch.Tensor") -> dict:
    """The surrogate's own diagnostics (`Surrogate.diagnostics`: `clip/*` for a clip, `capped/frac` for CISPO's cap)
    and the ratio's, over the masked tokens:

    pi_old/mean, ratio/mean (at the configured level); ratio/log_std: std of log r_{i,t} (token level whatever the
    ratio level); ratio/log_range: max - min of log r_{i,t} over the tokens with a gradient (A != 0 and not zeroed
    by the surrogate; GMPO's ratio range).
    """
    own, zeroed = surrogate.diagnostics(ratio, old_logps, advantages, mask)
    p_old = old_logps.exp()  # (B, T)
    log_r = token_log_ratio(logps, old_logps)  # (B, T)
    n = mask.sum().clamp(min=1)
    mean_lr = (log_r * mask).sum() / n
    log_std = float((((log_r - mean_lr) ** 2 * mask).sum() / n).sqrt())
    # (B, T): A != 0 and a gradient the surrogate keeps
    with_grad = mask.bool() & (per_token(advantages) != 0)
    if zeroed is not None:
        with_grad = with_grad & ~zeroed
    return {**own, "pi_old/mean": Mean.of(p_old, mask), "ratio/mean": Mean.of(ratio, mask),
            "ratio/log_std": Mean(log_std * float(mask.sum()), float(mask.sum())),
            "ratio/log_range": Range.of(log_r, with_grad)}
