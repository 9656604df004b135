"""Phase 2 of a step: pi_old, then mu optimiser steps on disjoint minibatches of the batch.

Each minibatch is trained in micro-batches of at most `micro_batch_rows` rows with gradient
accumulation (memory is bounded by one micro-batch); rows whose advantage is 0 are skipped when
beta = 0 (they add nothing but a denominator share, `objectives.subset_scale`). Diagnostics are the
additive `Mean`s of `policy_loss` plus the update's own, pooled over micro-batches by `+` and averaged
over minibatches, without the loop knowing their names. On an MoE policy the update also measures GSPO's
routing volatility, `moe/expert_change` (Sec. 5.3): the rollout's experts under pi_old against one no-grad pass
after each optimiser step, each a pass over the rollout in length-sorted chunks (`_routing_pass`); without Routing
Replay the pass under pi_old also gives the later minibatches' pi_old, so measuring adds no pass before the update.
The phase reads the `Policy` (model, parameters, optimiser), the config and the baseline (whose `update` takes the
value model's steps under PPO / VAPO); nothing else of the trainer.
"""
from __future__ import annotations

import contextlib

import torch

from . import moe
from .collect import Batch
from .logprobs import chunks
from .metrics import Mean, Share, mean_of
from .objectives import policy_loss, subset_scale
from .policy import Policy
from .value_loop import active_rows, has_signal, positive_lm_term, positive_tokens


def update(policy: Policy, cfg, baseline, batch: Batch, step: int) -> dict:
    """mu optimiser steps on disjoint minibatches of the batch, then the baseline's own (a value model's);
    returns the update metrics of the step."""
    c = cfg
    B = len(batch.correct)
    if B == 0 or not has_signal(c, batch):
        return {"update/skipped": 1}
    gen = torch.Generator().manual_seed(c.seed * 7919 + step)
    minibatches = [mb.sort().values for mb in torch.randperm(B, generator=gen).chunk(c.mu)]
    # rows with A = 0 add nothing but a denominator share when beta = 0: skip their passes, rescale
    active = active_rows(c, batch)
    if c.log_expert_change and moe.is_moe(policy.model):
        olds, experts, routes = _pi_old_and_routes(policy, c, batch, minibatches, active)
    else:
        (olds, experts), routes = pi_old(policy, c, batch, minibatches, active), None
    policy.model.train()
    parts = [_minibatch_step(policy, c, batch, mb, active, old, experts, step, routes)
             for mb, old in zip(minibatches, olds)]
    names = dict.fromkeys(k for part in parts for k in part)
    out = {k: mean_of(part[k] for part in parts if k in part) for k in names}
    out.update(baseline.update(batch, minibatches))  # PPO / VAPO: the value model's steps, on the same minibatches
    return out


def pi_old(policy: Policy, cfg, batch: Batch, minibatches: list, active: torch.Tensor) -> tuple:
    """log pi_old for each minibatch, (B, T) or None, and the MoE routing to replay (per layer) or None.

    Where the old log-probs come from:
    - old_logps='engine': the rollout engine's sampling log-probs, for every minibatch (GSPO Sec. 5.4);
    - 'trainer' with Routing Replay on an MoE policy (GSPO Sec. 5.3): one no-grad pass over every row
      before the first update records each layer's experts; every minibatch uses those log-probs and
      replays those experts in its forward passes;
    - 'trainer' otherwise: the first minibatch is trained before the policy moves, so its pi_old is the
      detached log-prob of its own forward pass (None: no extra pass, as TRL with one update); the active
      rows of the later minibatches get one no-grad pass before the first update (other rows stay 0 and
      are never read).
    """
    c = cfg
    if c.old_logps == "engine":
        return [batch.rollout.sample_logps.to(policy.device)] * len(minibatches), None
    if c.routing_replay and moe.is_moe(policy.model):
        old, experts = _recompute_with_routing(policy, c, batch)
        return [old] * len(minibatches), experts
    later = torch.cat(minibatches[1:]) if len(minibatches) > 1 else torch.zeros(0, dtype=torch.long)
    rows = later[active[later]].sort().values
    old = _recompute(policy, c, batch, rows) if len(rows) else None
    return [None] + [old] * (len(minibatches) - 1), None


def _recompute(policy: Policy, cfg, batch: Batch, rows: torch.Tensor) -> torch.Tensor:
    """No-grad log-probs of `rows` under the current policy, in a (B, T) tensor that is 0 on other rows."""
    policy.model.eval()
    with torch.inference_mode():
        part = policy.logps(batch.rollout, rows, chunk_rows=cfg.micro_batch_rows)
    full = torch.zeros(batch.rollout.completion_ids.shape, device=part.device)
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


def _pi_old_and_routes(policy: Policy, cfg, batch: Batch, minibatches: list, active: torch.Tensor) -> tuple:
    """`pi_old`'s (log pi_old per minibatch, experts to replay) and the rollout's routing under pi_old in the packed
    layout of `_routing_pass`, for `moe/expert_change`:
    - Routing Replay: the replayed record, moved to the packed order (`moe.to_packed`);
    - pi_old recomputed by the trainer: one routing pass over every row gives both the routing and the later
      minibatches' pi_old (the first minibatch's is its own detached forward, as in `pi_old`);
    - the engine's log-probs as pi_old: one routing pass.
    Replay's record (one padded pass, rows in order at the full width) and a routing pass route a token alike but
    for near-ties, the floor of the measure under replay (packed against padded: 2.5e-6 of the (token, layer, slot)
    experts on the fine-grained MoE, `benchmarks/moe_routing_pass.py`)."""
    c = cfg
    if c.old_logps == "trainer" and not c.routing_replay:
        old, routes = _routing_pass(policy, c, batch)
        return [None] + [old] * (len(minibatches) - 1), None, routes
    olds, experts = pi_old(policy, c, batch, minibatches, active)
    routes = moe.to_packed(experts, _real_positions(batch)) if experts else _routing(policy, c, batch)
    return olds, experts, routes


def _real_positions(batch: Batch) -> torch.Tensor:
    """(B, P+T) bool: the rollout's real (prompt or completion) positions, whose row-major order is the packed one."""
    ro = batch.rollout
    return torch.cat([ro.prompt_mask, ro.completion_mask], dim=1).bool()


def _routing_pass(policy: Policy, cfg, batch: Batch) -> tuple:
    """One no-grad pass over every row under the current policy: log-probs (B, T) and each MoE layer's experts, one
    (N, k) per layer over the N real positions in row-major order (the packed order of `moe.to_packed`), whatever
    order the forward passes ran in. The rows run in length-sorted chunks of `micro_batch_rows` (memory bounded as
    in training), each cut to its longest row (`logprobs.chunks(trim=True)`) and left-justified as the training
    forward (`logprobs.justified_layout`: no attention mask; each row's real positions first, in row-major order).

    On notebook 08's fine-grained MoE (128 rows, completions 97 tokens on average in a width of 192) one pass took
    1.43 s on one thread at 16 rows a chunk, 1.52 s at 32, against 2.57 s for the packed layout it replaced (8 rows
    per packed sequence: attention over the whole sequence under a block-diagonal mask, 8x the useful work) with
    transformers' experts and 2.30 s packed with `qwen_ops.experts_forward`; the three route every token alike
    (`benchmarks/moe_update_pass.py`, `benchmarks/moe_update_pass.txt`)."""
    chunk_rows = cfg.micro_batch_rows
    ro = batch.rollout
    experts: list = []
    policy.model.eval()
    with torch.inference_mode(), moe.record_routing(policy.model, experts):
        lp = policy.logps(ro, chunk_rows=chunk_rows, bucket=True, justify=True)  # the record per justified position
    layers = moe.stack_by_layer(experts, len(moe.routers(policy.model)))  # per layer (sum_c b_c L_c, k)
    keep = _real_positions(batch)  # (B, P+T)
    kept, order = [], []
    for rows, _, _ in chunks(ro.prompt_mask, ro.completion_mask, chunk_rows, trim=True):
        n_real = keep[rows].sum(dim=1)  # (b,): a justified row holds its real positions first, in row-major order
        kept.append((torch.arange(int(n_real.max()))[None, :] < n_real[:, None]).reshape(-1))  # (b L,)
        order.append(rows)
    real = torch.cat(kept)  # (sum_c b_c L_c,) in the order the passes ran
    rows = torch.cat(order)  # (B,): the rows in chunk order
    row_of = torch.repeat_interleave(rows, keep.sum(dim=1)[rows])  # (N,): the row of each real position, chunk order
    index = torch.argsort(row_of, stable=True)  # (N,): chunk order -> row-major (packed) order
    return lp.clone(), [e[real.to(e.device)][index.to(e.device)] for e in layers]


def _routing(policy: Policy, cfg, batch: Batch) -> list:
    """Each MoE layer's experts at every real position of every row under the current policy (`_routing_pass`)."""
    return _routing_pass(policy, cfg, batch)[1]


def _routing_moved(policy: Policy, cfg, batch: Batch, routes: list) -> dict:
    """GSPO's routing volatility after an optimiser step: the share of the rollout's activated completion-token
    experts that the updated policy routes elsewhere than pi_old (`moe.expert_change`), overall and per layer;
    `routes`: pi_old's, in the packed layout of `_routing_pass`."""
    after = _routing(policy, cfg, batch)
    policy.model.train()
    ro = batch.rollout
    comp = torch.cat([torch.zeros_like(ro.prompt_mask), ro.completion_mask], dim=1)  # (B, P+T)
    overall, per_layer = moe.expert_change(routes, after, comp[_real_positions(batch)])  # mask (N,), packed order
    return {"moe/expert_change": overall.item(),
            **{f"moe/expert_change/l{i}": v for i, v in enumerate(per_layer.tolist())}}


def _minibatch_step(policy: Policy, cfg, batch: Batch, mb: torch.Tensor, active: torch.Tensor, old, experts,
                    step: int, routes: list | None = None) -> dict:
    """Accumulate gradients over micro-batches of the minibatch's active rows, clip, step; its metrics (on an
    MoE policy, with the routing pi_old gave the rollout, `routes`, how much of it the step moved)."""
    c = cfg
    rows = mb[active[mb]]
    n_tok_all = float(batch.loss_mask[mb].sum())
    n_positive = positive_tokens(batch, mb) if c.positive_lm_weight > 0 else 0.0  # VAPO's LM-loss normaliser
    # longest rows together: each micro-batch is trimmed to its own length
    order = rows[torch.argsort(batch.rollout.lengths[rows], stable=True)] if not experts else rows
    losses, infos = [], []
    for micro in order.split(c.micro_batch_rows) if len(order) else ():
        loss, info = _micro_step(policy, c, batch, micro.sort().values, (len(mb), n_tok_all, n_positive), old,
                                 experts, step)
        losses.append(loss)
        infos.append(info)
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
    if routes is not None:
        out.update(_routing_moved(policy, c, batch, routes))
    return out


def _micro_step(policy: Policy, cfg, batch: Batch, rows: torch.Tensor, totals: tuple, old, experts,
                step: int) -> tuple:
    """Forward + backward of one micro-batch, its loss scaled to its share of the minibatch loss; (loss, info).

    totals: the minibatch's rows, tokens and correct responses' tokens (the normalisers of the shares)."""
    c, ro = cfg, batch.rollout
    n_rows_all, n_tok_all, n_positive = totals
    replay = (moe.replay_routing(policy.model, _rows_of(experts, rows, len(batch.correct))) if experts
              else contextlib.nullcontext())
    with replay:
        lp, ent = policy.logps(ro, rows, with_entropy=True, chunk_rows=len(rows), bucket=not experts)
    old_lp = lp.detach() if old is None else old[rows]
    ref = ref_logps(policy, batch, rows) if c.loss.beta > 0 else None
    mask, adv = batch.loss_mask[rows].to(policy.device), batch.advantages[rows].to(policy.device)
    # TIS / MIS: the rollout engine's log-probs of the sampled tokens, passed when the correction is on or the
    # engine computes in reduced precision (its mismatch then measured, `mismatch/*`)
    on = c.loss.mismatch_correction != "none" or c.rollout_weights is not None or c.rollout_autocast is not None
    engine = {"engine_logps": ro.sample_logps[rows].to(policy.device)} if on else {}
    loss, info = policy_loss(lp, old_lp, adv, mask, c.loss, ref, **engine)
    loss = loss * subset_scale(c.loss.aggregation, len(rows), n_rows_all, float(mask.sum()), n_tok_all)
    # VAPO: + mu * NLL of the correct responses (its share of the minibatch's); nothing when mu = 0
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
