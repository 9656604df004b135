"""Selection steps of the loss: which tokens or responses keep their policy term, whatever the surrogate.

  high-entropy tokens (Wang et al. 2025, "Beyond the 80/20 rule", arXiv 2506.01939): the policy gradient on the
      top-rho share of tokens by entropy only, rho = `top_entropy_quantile` (the paper: 0.2; 1 keeps every token):
      keep_{i,t} = [H_{i,t} >= q_{1 - rho}(H)], q the quantile over the batch's real tokens;
  off-policy sequence mask (DeepSeek-V3.2, arXiv 2512.02556): a response with a negative advantage whose sampling
      policy has drifted from pi_theta by more than delta = `off_policy_mask_threshold` is dropped:
      keep_i = [A_i >= 0  or  (1/|o_i|) sum_t (log pi_sample - log pi_theta)(o_{i,t}) <= delta],
      pi_sample the rollout engine's log-probs where the loss is given them, pi_old otherwise.
Both multiply the surrogate's term before the mismatch weight and the KL term (which they leave as is), as TRL
1.16's `_compute_loss` does (top_entropy_quantile, off_policy_mask_threshold). Off by default (rho = 1,
delta = None): a run recorded before them keeps its identity. `select/entropy_dropped`: the share of tokens the
entropy selection drops, `select/entropy_kept` the mean entropy of those it keeps; `select/off_policy_dropped`:
the share of responses the sequence mask drops.
The quantile is taken over the tokens of the rows the loss is computed on (one micro-batch, as TRL's is one
micro-batch's; the update skips rows whose advantage is 0 at beta = 0, so their tokens do not enter it here, where
TRL's micro-batch counts them). Shapes: B responses, T completion positions; `mask` is 1 on real completion tokens.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..metrics import Mean, Metric, Share, register
from .surrogate import per_token

if TYPE_CHECKING:
    import torch

METRICS = {
    "select/entropy_dropped": Metric("tokens dropped by the high-entropy selection (fraction)", update=True),
    "select/entropy_kept": Metric("entropy of the tokens the high-entropy selection keeps (nats/token)", update=True),
    "select/off_policy_dropped": Metric("responses dropped by the off-policy mask (fraction)", update=True,
                                        missing=0.0)}
"""what the selection steps report, when they are on; a skipped update records None for the entropy selection's
(a run mean of the share of tokens with a gradient then reads the updates only) and 0 responses dropped"""
register(METRICS)


def metrics_of(cfg) -> dict:
    """The selection metrics a LossConfig measures (none when both steps are off)."""
    on = {"select/entropy_dropped": cfg.top_entropy_quantile < 1, "select/entropy_kept": cfg.top_entropy_quantile < 1,
          "select/off_policy_dropped": cfg.off_policy_mask_threshold is not None}
    return {name: m for name, m in METRICS.items() if on[name]}


def high_entropy_mask(entropies: "torch.Tensor", mask: "torch.Tensor", rho: float) -> "torch.Tensor":
    """keep_{i,t} = [H_{i,t} >= q_{1 - rho}(H over the real tokens)] on real tokens. (B, T) bool."""
    real = mask.bool()  # (B, T)
    values = entropies.detach()[real].float()  # (N,)
    if values.numel() == 0:
        return real
    # q_{1 - rho}: linear interpolation between order statistics (torch.quantile, as TRL)
    threshold = values.quantile(1.0 - rho)
    return (entropies.detach() >= threshold) & real


def off_policy_keep(advantages: "torch.Tensor", logps: "torch.Tensor", sample_logps: "torch.Tensor",
                    mask: "torch.Tensor", delta: float) -> "torch.Tensor":
    """keep_i = [A_i >= 0 or mean_t (log pi_sample - log pi_theta) <= delta]. (B, 1) bool, or (B, T) for (B, T)
    advantages."""
    drift = (sample_logps - logps.detach()) * mask  # (B, T)
    # (1/|o_i|) sum_t log(pi_sample / pi_theta)
    mean_drift = drift.sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1)  # (B, 1)
    return (per_token(advantages) >= 0) | (mean_drift <= delta)


def select(per_tok: "torch.Tensor", cfg, logps: "torch.Tensor", sample_logps: "torch.Tensor",
           advantages: "torch.Tensor", mask: "torch.Tensor", entropies: "torch.Tensor | None") -> tuple:
    """The surrogate's (B, T) term with the configured selections applied, and their diagnostics."""
    info = {}
    if cfg.off_policy_mask_threshold is not None:
        keep = off_policy_keep(advantages, logps, sample_logps, mask, cfg.off_policy_mask_threshold)  # (B, 1)
        per_tok = per_tok * keep
        responses = (mask.sum(dim=1) > 0).to(mask.dtype)  # (B,)
        info["select/off_policy_dropped"] = Share.of(~keep.expand_as(mask)[:, 0], responses)
    if cfg.top_entropy_quantile < 1:
        if entropies is None:
            raise ValueError(f"entropies are required when top_entropy_quantile={cfg.top_entropy_quantile}")
        keep = high_entropy_mask(entropies, mask, cfg.top_entropy_quantile)  # (B, T)
        per_tok = per_tok * keep
        info["select/entropy_dropped"] = Share.of(~keep, mask)
        info["select/entropy_kept"] = Mean.of(entropies.detach(), keep)
    return per_tok, info
