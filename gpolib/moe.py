"""Mixture-of-experts routing: record the experts each token is sent to, replay them, and measure how much an
update moves them (GSPO Sec. 5.3).

Routing Replay: the experts chosen by pi_old are cached and reused in the forward passes of pi_theta,
so the token ratio compares the same sub-networks. In transformers' Qwen3-MoE each sparse block calls
`self.gate(hidden)` -> (router_logits, routing_weights, selected_experts); a forward hook on the gate
records `selected_experts`, or replaces them with the recorded ones and recomputes their weights from
the new router logits. Routing volatility (`moe/expert_change`): `ExpertChange`, the update's hook, routes the
rollout under pi_old and again after each optimiser step (`routing_pass`) and counts the experts that moved.
"""
from __future__ import annotations

import contextlib

import torch

from .logprobs import chunks
from .validation import EXPERT_CHANGE_MODES


def routers(model) -> list:
    """The gate of every sparse MoE block (a module holding `gate` and `experts`), in layer order.

    Each entry is the module the block calls: the router itself, or the peft wrapper around it when the
    router is trained (`models.lora_config(train_router=True)`), so one hook per layer sees one call.
    Qwen3-MoE and Qwen2-MoE blocks qualify (Qwen2-MoE's `shared_expert_gate` is not a block's `gate`).
    """
    return [m.gate for m in model.modules()
            if "gate" in m._modules and "experts" in m._modules and hasattr(router_module(m.gate), "top_k")]


def router_module(gate):
    """The router a (possibly peft-wrapped) gate runs now: the trained copy of a `ModulesToSaveWrapper`, its
    frozen original when adapters are disabled (the reference policy), the base layer of a LoRA wrapper."""
    if "original_module" in gate._modules:  # peft ModulesToSaveWrapper
        active = gate.active_adapters
        if gate.disable_adapters or not active or any(a not in gate.modules_to_save for a in active):
            return router_module(gate.original_module)
        return router_module(gate.modules_to_save[active[0]])
    if "base_layer" in gate._modules:  # peft LoRA layer
        return router_module(gate.base_layer)
    return gate


def is_moe(model) -> bool:
    return len(routers(model)) > 0


@contextlib.contextmanager
def _router_hooks(model, store: list, read):
    """Append `read(router output)` of each layer's router to `store` during the forward passes inside."""
    handles = [r.register_forward_hook(lambda module, args, output: store.append(read(output)))
               for r in routers(model)]
    try:
        yield store
    finally:
        for h in handles:
            h.remove()


def record_routing(model, store: list):
    """Append each layer's selected experts (B*L, k) to `store` during the forward passes inside."""
    return _router_hooks(model, store, lambda output: output[2].detach().clone())


def stack_by_layer(store: list, n_layers: int) -> list:
    """Records of several forward calls (call-major: layer 0..n-1 per call) -> one (N_total, k) per layer."""
    if len(store) % n_layers:
        raise ValueError(f"{len(store)} router records do not divide into {n_layers} layers")
    return [torch.cat(store[layer::n_layers]) for layer in range(n_layers)]


def _replayed(module, output, experts: torch.Tensor):
    """Router output with forced experts (GSPO Sec. 5.3): weights are the new router's probabilities at the
    recorded experts, w_j = softmax(z)_{e_j} over all E experts, divided by sum_j w_j if norm_topk_prob."""
    logits = output[0]  # (N, E)
    if experts.shape[0] != logits.shape[0]:
        raise ValueError(f"replayed routing has {experts.shape[0]} tokens, the forward pass {logits.shape[0]}")
    probs = torch.softmax(logits, dim=-1, dtype=torch.float)  # (N, E)
    weights = probs.gather(1, experts)  # (N, k)
    if getattr(router_module(module), "norm_topk_prob", False):
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return logits, weights.to(logits.dtype), experts


@contextlib.contextmanager
def replay_routing(model, experts_per_layer: list):
    """Force each layer's router to the given experts (list of (N, k) long tensors, N = B*L of the batch)."""
    layers = routers(model)
    if len(experts_per_layer) != len(layers):
        raise ValueError(f"expected experts for {len(layers)} MoE layers, got {len(experts_per_layer)}")
    handles = [r.register_forward_hook(lambda m, a, out, e=e: _replayed(m, out, e))
               for r, e in zip(layers, experts_per_layer)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def to_real_positions(experts_per_layer: list, keep: torch.Tensor) -> list:
    """A padded routing record -> the record of the real positions alone, row-major (the order `routing_pass` hands
    back): each layer's (b*L, k) experts of b rows of L positions, kept where `keep` (b, L) -> (N, k)."""
    flat = keep.reshape(-1).bool()  # (b*L,)
    out = []
    for e in experts_per_layer:
        if e.shape[0] != flat.shape[0]:
            raise ValueError(f"routing record has {e.shape[0]} tokens, the padded rows {flat.shape[0]}")
        out.append(e[flat.to(e.device)])
    return out


def routing_change(before: list, after: list) -> torch.Tensor:
    """Share of tokens whose top-k expert set changed, per layer. Lists of (N, k) -> (n_layers,)."""
    out = []
    for b, a in zip(before, after):
        changed = (b.sort(dim=-1).values != a.sort(dim=-1).values).any(dim=-1)  # (N,)
        out.append(changed.float().mean())
    return torch.stack(out)


def expert_change(before, after, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GSPO's routing volatility (Sec. 5.3, "~10% of the experts activated ... change" per update): the share of
    activated (token, layer, slot) experts under the updated policy that pi_old did not activate for that token
    in that layer, |after_t,l \\ before_t,l| / k summed over the tokens of `mask`, divided by their number.

    before/after: (L, *S, k) expert ids, or a list of L tensors (*S, k); mask (*S) with 1 at the tokens counted.
    Returns (overall share (), per-layer share (L,)); overall = mean over layers (every layer has the same
    tokens). Both sets have k members, so |after \\ before| = |before \\ after|. Unlike `routing_change` (any
    change of a token's set counts 1), a set with one of k = 8 experts replaced counts 1/8.
    """
    before, after = (torch.stack(list(r)) if isinstance(r, (list, tuple)) else r for r in (before, after))
    if before.shape != after.shape or before.shape[1:-1] != mask.shape:
        raise ValueError(f"routing records {tuple(before.shape)} and {tuple(after.shape)} must both be (L, *S, k) "
                         f"with S = the mask's shape {tuple(mask.shape)}")
    new = _not_in(after, before)  # (L, *S, k): slot of after not in before
    m = mask.to(new.device).bool().unsqueeze(-1).expand_as(new[0])  # (*S, k)
    per_layer = (new & m).flatten(1).sum(dim=1).float() / m.sum().clamp(min=1)  # (L,)
    return per_layer.mean(), per_layer


def _not_in(after: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
    """(..., k) bool: after[..., j] is none of before[..., :] (k distinct ids each). Ids in [0, 64): each set as the
    bits of one int64, a slot's bit read by a shift (3 passes over (..., k)); else by comparing every pair."""
    if after.numel() and min(after.min(), before.min()) >= 0 and max(after.max(), before.max()) < 64:
        members = (torch.ones((), dtype=torch.int64, device=before.device) << before.long()).sum(-1, keepdim=True)
        return ((members >> after.long()) & 1) == 0  # distinct ids: their sum is their OR
    return ~(after.unsqueeze(-1) == before.unsqueeze(-2)).any(dim=-1)


def real_positions(ro) -> torch.Tensor:
    """(B, P+T) bool: a rollout's real (prompt or completion) positions; their row-major order is a routing record's."""
    return torch.cat([ro.prompt_mask, ro.completion_mask], dim=1).bool()


def routing_pass(policy, ro, chunk_rows: int, rows: torch.Tensor | None = None) -> tuple:
    """One no-grad pass over `rows` (default every row) under the current policy: log-probs (b, T) and each MoE layer's
    experts at the rows' real positions (`pass_routes`). The rows run in length-sorted chunks of `chunk_rows` (memory
    bounded as in training), each cut to its longest row (`logprobs.chunks(trim=True)`) and left-justified as the
    training forward (no attention mask; each row's real positions first); `benchmarks/README.md`
    (`moe_update_pass.py`) has its timing."""
    rows = torch.arange(len(ro.lengths)) if rows is None else rows
    experts: list = []
    policy.model.eval()
    with torch.inference_mode(), record_routing(policy.model, experts):
        lp = policy.logps(ro, rows, chunk_rows=chunk_rows, bucket=True, justify=True)  # record per justified position
    return lp.clone(), pass_routes(experts, ro, rows, chunk_rows, len(routers(policy.model)))


def pass_routes(store: list, ro, rows: torch.Tensor, chunk_rows: int, n_layers: int) -> list:
    """The routing record of `Policy.logps(ro, rows, chunk_rows=chunk_rows)` in justified length-sorted chunks (`store`
    as `record_routing` fills it) -> each layer's experts (N, k) at the N real positions of `rows`, row by row in the
    order of `rows` and each row's positions in order, whatever order the chunks ran in."""
    layers = stack_by_layer(store, n_layers)  # per layer (sum_c b_c L_c, k)
    keep = real_positions(ro)[rows]  # (b, P+T)
    kept, order = [], []
    for sub, _, _ in chunks(ro.prompt_mask[rows], ro.completion_mask[rows], chunk_rows, trim=True):
        n_real = keep[sub].sum(dim=1)  # (b_c,): a justified row holds its real positions first, in row-major order
        kept.append((torch.arange(int(n_real.max()))[None, :] < n_real[:, None]).reshape(-1))  # (b_c L_c,)
        order.append(sub)
    real = torch.cat(kept)  # (sum_c b_c L_c,) in the order the passes ran
    sub = torch.cat(order)  # (b,): indices into `rows` in chunk order
    row_of = torch.repeat_interleave(sub, keep.sum(dim=1)[sub])  # (N,): each real position's index into `rows`
    index = torch.argsort(row_of, stable=True)  # (N,): chunk order -> the order of `rows`
    pos = real.nonzero().squeeze(1)[index]  # (N,): each kept record's place in the chunks' records
    return [e[pos.to(e.device)] for e in layers]


class ExpertChange:
    """The update's hook for GSPO's routing volatility (Sec. 5.3): the share of the rollout's activated
    completion-token experts that the policy routes elsewhere than pi_old after each optimiser step (`expert_change`),
    overall and per layer, averaged over the update's optimiser steps (`moe/expert_change`, `moe/expert_change/l{i}`).

    pi_old's routing (`before`): Routing Replay's record, or routing passes, whose log-probs are pi_old's (the update
    then needs no other pass before its first step), or records of training forwards run before the first step
    (`record`). The routing after a step: a routing pass (`after_step`) or the training forward of the next minibatch,
    which routes its rows under the updated policy (`measure`). Which rows, `mode` (`update.update` plans them):
    - 'full': every row of the rollout after every step (1 + mu routing passes over the rollout per update);
    - 'minibatch': after step j the rows the next minibatch trains (its active rows; after the last step the first
      minibatch's, routed by one pass over them alone). A subsample estimate of the full measure: the same share over
      about 1/mu of the rows, rows whose advantage is 0 never among them; equal to 'full' restricted to the same rows
      (tests/test_moe_expert_change.py).
    Replay's record (one padded pass) and a routing pass route a token alike but for near-ties, the floor of the
    measure under replay (2.5e-6 of the (token, layer, slot) experts on the fine-grained MoE, benchmarks/README.md);
    so do a training forward and a routing pass (the experts by torch vs. the C++ kernel, float32 rounding)."""

    def __init__(self, policy, ro, chunk_rows: int, mode: str = "full"):
        if mode not in EXPERT_CHANGE_MODES:
            raise ValueError(f"mode={mode!r} is invalid; allowed: {', '.join(EXPERT_CHANGE_MODES)}")
        self.policy, self.ro, self.chunk_rows, self.mode = policy, ro, chunk_rows, mode
        self.keep = real_positions(ro)  # (B, P+T)
        self.comp = torch.cat([torch.zeros_like(ro.prompt_mask), ro.completion_mask], dim=1)[self.keep]  # (N,)
        self.routes: torch.Tensor | None = None
        """pi_old's experts (L, N, k) at the rollout's N real positions, row-major; -1 where not recorded"""
        self.changes: list = []
        """per measured optimiser step: the share per layer (L,)"""
        self.old_logps: torch.Tensor | None = None
        """pi_old's log-probs (B, T) from its own routing passes, NaN for rows no pass covered: `update_ratios`' base"""
        self.ratios: list = []
        """per optimiser step routed by a pass over rows whose pi_old log-probs are known: `update_ratios`"""

    def _positions(self, rows: torch.Tensor) -> torch.Tensor:
        """(n,) indices into the rollout's row-major real positions of `rows`' real positions, in the order of rows."""
        n_real = self.keep.sum(dim=1)  # (B,)
        start = n_real.cumsum(0) - n_real  # (B,)
        counts = n_real[rows]  # (b,)
        first = torch.repeat_interleave(counts.cumsum(0) - counts, counts)  # (n,): each position's row's offset
        return torch.repeat_interleave(start[rows], counts) + torch.arange(int(counts.sum())) - first

    def record(self, rows: torch.Tensor, routes: list) -> None:
        """pi_old's routing of `rows`: each layer's experts (n, k) at their real positions, in the order of rows."""
        if self.routes is None:
            self.routes = torch.full((len(routes), len(self.comp), routes[0].shape[-1]), -1, dtype=torch.long)
        self.routes[:, self._positions(rows)] = torch.stack(routes).to(self.routes.device)

    def before(self, experts: list | None = None, rows: torch.Tensor | None = None):
        """pi_old's routing: `experts` (a padded per-layer record of every row, Routing Replay's) or a routing pass over
        `rows` (default every row), whose log-probs (b, T) are returned (None for a record)."""
        if experts is not None:
            self.routes = torch.stack(to_real_positions(experts, self.keep))
            return None
        rows = torch.arange(len(self.keep)) if rows is None else rows
        lp, routes = routing_pass(self.policy, self.ro, self.chunk_rows, rows)
        self.record(rows, routes)
        if self.old_logps is None:
            self.old_logps = torch.full(self.ro.completion_mask.shape, float("nan"), dtype=lp.dtype)
        self.old_logps[rows] = lp
        return lp

    def measure(self, rows: torch.Tensor, routes: list) -> None:
        """The change of `rows`' routing under the updated policy (`record`'s layout) from pi_old's, kept per layer."""
        pos = self._positions(rows)
        before = self.routes[:, pos]  # (L, n, k)
        if bool((before < 0).any()):
            raise RuntimeError("pi_old's routing of some measured rows was never recorded")
        self.changes.append(expert_change(before, torch.stack(routes).to(before.device), self.comp[pos])[1])

    def after_step(self, rows: torch.Tensor | None = None) -> None:
        """Route `rows` (default every row) after an optimiser step and measure them (the policy left in training
        mode); where pi_old's log-probs of those rows came from a routing pass, also how far the step moved their
        likelihoods (`update_ratios`, from the same pass)."""
        rows = torch.arange(len(self.keep)) if rows is None else rows
        if len(rows):
            lp, routes = routing_pass(self.policy, self.ro, self.chunk_rows, rows)
            self.measure(rows, routes)
            mask = self.ro.completion_mask[rows]  # (b, T)
            old = None if self.old_logps is None else self.old_logps[rows]  # (b, T)
            if old is not None and not bool(old[mask.bool()].isnan().any()):
                self.ratios.append(update_ratios(old, lp, mask))
        self.policy.model.train()

    def metrics(self) -> dict:
        """The shares averaged over the measured optimiser steps, and `update_ratios` over the steps that have them;
        {} when none was measured."""
        if not self.changes:
            return {}
        per_layer = torch.stack(self.changes).mean(dim=0)  # (L,)
        ratios = {k: sum(r[k] for r in self.ratios) / len(self.ratios) for k in (self.ratios[0] if self.ratios else {})}
        return {"moe/expert_change": per_layer.mean().item(),
                **{f"moe/expert_change/l{i}": v for i, v in enumerate(per_layer.tolist())}, **ratios}


def update_ratios(old_logps: torch.Tensor, logps: torch.Tensor, mask: torch.Tensor) -> dict:
    """How far an optimiser step moved the likelihoods of the rollout tokens whose routing `ExpertChange` measures
    (the same tokens, the same pass): over the completion tokens of `mask` (B, T), log rho_t = logp - old_logp
    (B, T each): its std (`moe/update_log_ratio_std`), the largest token ratio max_t rho_t (`moe/update_max_ratio`),
    KL(pi_old || pi) by k3 = rho - 1 - log rho on pi_old's tokens (`moe/update_kl`); and the std over responses of
    GSPO's sequence log ratio mean_t log rho_t (Eq. 7, `moe/update_seq_log_ratio_std`)."""
    m = mask.bool()
    log_r = (logps - old_logps).double()  # (B, T)
    tok = log_r[m]  # (n,)
    seq = (log_r * m).sum(dim=1) / m.sum(dim=1).clamp(min=1)  # (B,)
    seq = seq[m.any(dim=1)]
    return {"moe/update_log_ratio_std": tok.std(unbiased=False).item() if tok.numel() else 0.0,
            "moe/update_max_ratio": tok.exp().max().item() if tok.numel() else 1.0,
            "moe/update_kl": (tok.exp() - 1 - tok).mean().item() if tok.numel() else 0.0,
            "moe/update_seq_log_ratio_std": seq.std(unbiased=False).item() if seq.numel() else 0.0}
