"""Phase 2 of a step: pi_old, then mu optimiser steps on disjoint minibatches of the batch.

Each minibatch is trained in micro-batches of at most `micro_batch_rows` rows with gradient
accumulation (memory is bounded by one micro-batch); rows whose advantage is 0 are skipped when
beta = 0 (they add nothing but a denominator share, `objectives.subset_scale`). Diagnostics are the
additive `Mean`s of `policy_loss` plus the update's own, pooled over micro-batches by `+` and averaged
over minibatches, without the loop knowing their names. On an MoE policy the update also measures GSPO's
routing volatility, `moe/expert_change` (Sec. 5.3), through the MoE module's hook (`moe.ExpertChange`: pi_old's
routing before the first step, which also gives the later minibatches' pi_old, and the routing after each step:
config `expert_change` 'full', a routing pass over the rollout after every step, or 'minibatch', the routing of the
rows the next minibatch trains, recorded in its training forward, `measured_rows`).
The phase reads the `Policy` (model, parameters, optimiser), the config and the baseline (whose `update` takes the
value model's steps under PPO / VAPO); nothing else of the trainer.
"""
from __future__ import annotations

import contextlib

import torch

from . import moe
from .collect import Batch
from .metrics import Mean, Share, mean_of
from .objectives import policy_loss, subset_scale
from .policy import Policy
from .value_loop import active_rows, has_signal, positive_lm_term, positive_tokens


def update(policy: Policy, cfg, baseline, batch: Batch, step: int, after_minibatch=None) -> dict:
    """mu optimiser steps on disjoint minibatches of the batch, then the baseline's own (a value model's);
    returns the update metrics of the step. `after_minibatch(k)`, when given, is called after the k-th optimiser
    step (k = 1..mu), the policy then being the policy after k updates (a probe reads it there, notebook 02's
    panel; the policy is put back in training mode after it); a skipped update calls it for no k."""
    c = cfg
    B = len(batch.correct)
    if B == 0 or not has_signal(c, batch):
        return {"update/skipped": 1}
    gen = torch.Generator().manual_seed(c.seed * 7919 + step)
    minibatches = [mb.sort().values for mb in torch.randperm(B, generator=gen).chunk(c.mu)]
    # rows with A = 0 add nothing but a denominator share when beta = 0: skip their passes, rescale
    active = active_rows(c, batch)
    meter = (moe.ExpertChange(policy, batch.rollout, c.micro_batch_rows, c.expert_change)
             if c.log_expert_change and moe.is_moe(policy.model) else None)
    olds, experts = pi_old(policy, c, batch, minibatches, active, meter)
    policy.model.train()
    parts = []
    for j, (mb, old) in enumerate(zip(minibatches, olds)):
        parts.append(_minibatch_step(policy, c, batch, mb, active, old, experts, step, meter,
                                     (j, j == len(minibatches) - 1, measured_rows(minibatches, active, j))))
        if after_minibatch is not None:
            after_minibatch(j + 1)
            policy.model.train()
    names = dict.fromkeys(k for part in parts for k in part)
    out = {k: mean_of(part[k] for part in parts if k in part) for k in names}
    if meter is not None:
        out.update(meter.metrics())
    out.update(baseline.update(batch, minibatches))  # PPO / VAPO: the value model's steps, on the same minibatches
    return out


def pi_old(policy: Policy, cfg, batch: Batch, minibatches: list, active: torch.Tensor,
           meter: moe.ExpertChange | None = None) -> tuple:
    """log pi_old for each minibatch, (B, T) or None, and the MoE routing to replay (per layer) or None; `meter`, the
    routing-volatility hook, is handed pi_old's routing.

    Where the old log-probs come from:
    - old_logps='engine': the rollout engine's sampling log-probs, for every minibatch (GSPO Sec. 5.4);
    - 'trainer' with Routing Replay on an MoE policy (GSPO Sec. 5.3): one no-grad pass over every row
      before the first update records each layer's experts; every minibatch uses those log-probs and
      replays those experts in its forward passes;
    - 'trainer' otherwise: the first minibatch is trained before the policy moves, so its pi_old is the
      detached log-prob of its own forward pass (None: no extra pass, as TRL with one update); the active
      rows of the later minibatches get one no-grad pass before the first update (other rows stay 0 and
      are never read); with a `meter` that pass is its routing pass, over every row ('full') or over those rows
      ('minibatch', the first minibatch's pi_old routing then recorded in its own training forward).
    """
    c, n = cfg, len(minibatches)
    later = torch.cat(minibatches[1:]) if n > 1 else torch.zeros(0, dtype=torch.long)
    rows = later[active[later]].sort().values  # the later minibatches' active rows
    if c.old_logps == "engine":
        olds, experts = [batch.rollout.sample_logps.to(policy.device)] * n, None
    elif c.routing_replay and moe.is_moe(policy.model):
        old, experts = _recompute_with_routing(policy, c, batch)
        olds = [old] * n
    elif meter is not None and meter.mode == "full":  # its routing pass under pi_old: the later minibatches' pi_old too
        return [None] + [meter.before()] * (n - 1), None
    else:
        if meter is not None:  # 'minibatch': the routing pass over the later active rows alone
            old = _as_full(meter.before(rows=rows), rows, batch) if len(rows) else None
        else:
            old = _recompute(policy, c, batch, rows) if len(rows) else None
        return [None] + [old] * (n - 1), None
    if meter is not None and experts is not None:
        meter.before(experts)  # Routing Replay's record
    elif meter is not None and (meter.mode == "full" or len(rows)):
        meter.before(rows=None if meter.mode == "full" else rows)  # a routing pass of its own
    return olds, experts


def measured_rows(minibatches: list, active: torch.Tensor, j: int) -> torch.Tensor:
    """expert_change='minibatch': the rows whose routing after optimiser step j (0-based) is compared with pi_old's,
    those the next minibatch trains (its active rows), after the last step the first minibatch's."""
    mb = minibatches[(j + 1) % len(minibatches)]
    return mb[active[mb]].sort().values


def _recompute(policy: Policy, cfg, batch: Batch, rows: torch.Tensor) -> torch.Tensor:
    """No-grad log-probs of `rows` under the current policy, in a (B, T) tensor that is 0 on other rows."""
    policy.model.eval()
    with torch.inference_mode():
        part = policy.logps(batch.rollout, rows, chunk_rows=cfg.micro_batch_rows)
    return _as_full(part, rows, batch)


def _as_full(part: torch.Tensor, rows: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Log-probs of `rows` (b, T) in a (B, T) tensor that is 0 on other rows."""
    full = torch.zeros(batch.rollout.completion_ids.shape, dtype=part.dtype, device=part.device)
    full[rows] = part
    return full


def _recompute_with_routing(policy: Policy, cfg, batch: Batch) -> tuple:
    """No-grad log-probs of every row (B, T), rows kept in order, and each layer's recorded experts."""
    experts: list = []
    policy.model.eval()
    with torch.inference_mode():
        with moe.record_routing(policy.model, experts):
            lp = policy.logps(batch.rollout, chunk_rows=cfg.micro_batch_rows, bucket=False)
        return lp.clone(), moe.stack_by_layer(experts, len(moe.routers(policy.model)))


def _minibatch_step(policy: Policy, cfg, batch: Batch, mb: torch.Tensor, active: torch.Tensor, old, experts,
                    step: int, meter: moe.ExpertChange | None = None, where: tuple = (0, True, None)) -> dict:
    """Accumulate gradients over micro-batches of the minibatch's active rows, clip, step; its metrics. With the
    routing-volatility hook `meter`, the routing after the step is measured: 'full' by a pass over every row;
    'minibatch' the `measured` rows, routed by the next minibatch's training forward (its routing recorded here:
    pi_old's in minibatch 0 (j = 0), the previous step's after) or, after the last step or under Routing Replay
    (whose training forward does not route freely), by a pass over them. where: (j, last, measured)."""
    c, (j, last, measured) = cfg, where
    forward = meter is not None and meter.mode == "minibatch" and not experts
    routed: list | None = [] if forward else None  # (micro-batch rows, their routing per layer)
    rows = mb[active[mb]]
    n_tok_all = float(batch.loss_mask[mb].sum())
    n_positive = positive_tokens(batch, mb) if c.positive_lm_weight > 0 else 0.0  # VAPO's LM-loss normaliser
    # longest rows together: each micro-batch is trimmed to its own length
    order = rows[torch.argsort(batch.rollout.lengths[rows], stable=True)] if not experts else rows
    losses, infos = [], []
    for micro in order.split(c.micro_batch_rows) if len(order) else ():
        loss, info = _micro_step(policy, c, batch, micro.sort().values, (len(mb), n_tok_all, n_positive), old,
                                 experts, step, routed)
        losses.append(loss)
        infos.append(info)
    if routed:  # the forward's routing: pi_old's before the first step, else the previous step's
        seen = torch.cat([r for r, _ in routed])
        routes = [torch.cat(layer) for layer in zip(*(e for _, e in routed))]
        if j == 0:
            meter.record(seen, routes)
        else:
            meter.measure(seen, routes)
    if not infos:  # every row has A = 0: the same as a zero-gradient step
        for p in policy.params:
            p.grad = torch.zeros_like(p)
    gn = torch.nn.utils.clip_grad_norm_(policy.params, c.max_grad_norm)
    if not torch.isfinite(gn):
        raise FloatingPointError(f"non-finite gradient norm at step {step}; last good checkpoint kept")
    policy.step()
    out = {"grad/norm": gn.item(), **_pool(infos, n_tok_all)}
    if losses:
        out["loss/policy"] = sum(losses)  # each micro-batch loss is already its share of the minibatch loss
    if meter is not None and meter.mode == "full":
        meter.after_step()
    elif meter is not None and (not forward or last):
        meter.after_step(measured)
    return out


def _micro_step(policy: Policy, cfg, batch: Batch, rows: torch.Tensor, totals: tuple, old, experts,
                step: int, routed: list | None = None) -> tuple:
    """Forward + backward of one micro-batch, its loss scaled to its share of the minibatch loss; (loss, info).

    totals: the minibatch's rows, tokens and correct responses' tokens (the normalisers of the shares); routed: where
    given, (rows, each MoE layer's experts at their real positions, `moe.pass_routes`) of the forward is appended."""
    c, ro = cfg, batch.rollout
    n_rows_all, n_tok_all, n_positive = totals
    replay = (moe.replay_routing(policy.model, _rows_of(experts, rows, len(batch.correct))) if experts
              else contextlib.nullcontext())
    store: list = []
    record = moe.record_routing(policy.model, store) if routed is not None else contextlib.nullcontext()
    with replay, record:
        lp, ent = policy.logps(ro, rows, with_entropy=True, chunk_rows=len(rows), bucket=not experts)
    if routed is not None:
        routed.append((rows, moe.pass_routes(store, ro, rows, len(rows), len(moe.routers(policy.model)))))
    old_lp = lp.detach() if old is None else old[rows]
    ref = ref_logps(policy, batch, rows) if c.loss.beta > 0 else None
    mask, adv = batch.loss_mask[rows].to(policy.device), batch.advantages[rows].to(policy.device)
    # TIS / MIS: the rollout engine's log-probs of the sampled tokens, passed when the correction is on or the
    # engine computes in reduced precision (its mismatch then measured, `mismatch/*`)
    on = c.loss.mismatch_correction != "none" or c.rollout_weights is not None or c.rollout_autocast is not None
    engine = {"engine_logps": ro.sample_logps[rows].to(policy.device)} if on else {}
    loss, info = policy_loss(lp, old_lp, adv, mask, c.loss, ref, **engine, entropies=ent)
    loss = loss * subset_scale(c.loss.aggregation, len(rows), n_rows_all, float(mask.sum()), n_tok_all)
    # VAPO: + positive_lm_weight * NLL of the correct responses (its share of the minibatch's); nothing at weight 0
    lm, lm_info = positive_lm_term(c, lp, mask, batch.correct[rows].to(policy.device), n_positive)
    info.update(lm_info)
    total = loss + lm if lm_info else loss
    if not torch.isfinite(total):
        raise FloatingPointError(f"non-finite loss ({total.item()}) at step {step}; last good checkpoint kept")
    total.backward()
    info["entropy/mean"] = Mean.of(ent, mask)
    return loss.item(), info


def ref_logps(policy: Policy, batch: Batch, rows: torch.Tensor) -> torch.Tensor:
    """log pi_ref of `rows`: the base model (LoRA adapters disabled). (b, T)."""
    with torch.no_grad(), policy.model.disable_adapter():
        return policy.logps(batch.rollout, rows)


def _pool(infos: list, n_tokens: float) -> dict:
    """Values of micro-batch diagnostics pooled by `+`; a `Share` counts the minibatch's skipped tokens too."""
    pooled: dict = {}
    for info in infos:
        for k, v in info.items():
            pooled[k] = pooled[k] + v if k in pooled else v
    return {k: (v + Share(0.0, n_tokens - v.weight) if isinstance(v, Share) else v).value for k, v in pooled.items()}


def _rows_of(experts: list, rows: torch.Tensor, B: int) -> list:
    """Slice recorded (B*L, k) expert ids per layer to the minibatch rows."""
    out = []
    for e in experts:
        per_row = e.view(B, -1, e.shape[-1])  # (B, L, k)
        out.append(per_row[rows.to(e.device)].reshape(-1, e.shape[-1]))
    return out
