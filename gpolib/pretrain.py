"""Supervised pretraining of the embedded base policies on the arithmetic-chain task.

Each step draws `batch_size` fresh problems from the task generator (never a val or
held-out prompt) and one SFT completion for each (`gpolib.tasks.solution_text`: every
product written directly or long at random, every result correct), so the base policy
has practised both forms and picks between them per step; its errors come from what it
cannot reliably do in one go (3- and 4-digit products written directly), not from wrong
data. The budget (`steps`) is part of the recipe: a longer one makes the direct form
more reliable too. The loss is next-token cross-entropy on completion tokens (and EOS)
only; for the MoE the router load-balancing loss (coefficient `router_aux_loss_coef`)
is added: transformers' form, which pools the expert counts over the layers, or the Switch Transformer's per layer
(`balance_per_layer`). Training can start from a shipped model's weights (`init`): the load-balanced fine MoE
continues the fine MoE with a larger per-layer coefficient (benchmarks/moe_balance_sweep.py).
"""
from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM

from gpolib import folders
from gpolib.models import EMBEDDED, tiny_config
from gpolib.runtime import deterministic_cpu
from gpolib.tasks import N_OPS_CYCLE, default_task_path, load_tasks, make_problem, repo_root, solution_text
from gpolib.tokenizer import build_tokenizer

MOE_ARCHS = ("moe", "moe-fine", "moe-balanced", "moe-floor")
"""the embedded architectures trained with the router load-balancing loss (Qwen3-MoE's `router_aux_loss_coef`)"""


@dataclass
class PretrainConfig:
    """Supervised pretraining recipe of one embedded base policy."""

    arch: str = "dense"
    """"dense" (Qwen3ForCausalLM), "moe" or "moe-fine" (Qwen3MoeForCausalLM)"""
    steps: int = 800
    """optimizer steps"""
    batch_size: int = 64
    """sequences per step"""
    lr: float = 3e-3
    """peak AdamW learning rate (linear warmup, cosine decay to 10%)"""
    warmup: int = 100
    """warmup steps"""
    weight_decay: float = 0.01
    """AdamW weight decay"""
    p_long: float = 0.3
    """probability that an SFT product is written long (digit by digit) instead of directly"""
    micro_batches: int = 1
    """the batch's rows sorted by length and cut into this many micro-batches, each trimmed to its own longest row,
    gradients accumulated: the same cross-entropy (summed over the batch's completion tokens, divided by their
    count) with less padding; the load-balancing loss is the mean of the micro-batches' (its time: benchmarks/README.md,
    "Timings that were in docstrings")"""
    seed: int = 0
    """seeds torch and the data stream"""
    init: str = ""
    """a model folder whose weights training starts from (same shape as `arch`); "" trains from scratch"""
    aux_coef: float | None = None
    """MoE: the load-balancing loss coefficient (config `router_aux_loss_coef`); None keeps the arch's (0.01)"""
    aux_per_layer: bool = False
    """MoE: the Switch Transformer loss per layer, averaged over layers (`balance_per_layer`), in place of
    transformers' form, which pools each expert index's counts over the layers (an expert dead in one layer but busy
    in another is then pushed further down)"""
    floor_coef: float = 0.0
    """MoE: coefficient of `underload_per_layer`, a hinge that raises each layer's experts whose share of the top-k
    picks is below `floor` x uniform; 0 leaves it out. The Switch loss's gradient on an expert's probability is
    proportional to that expert's own load, so it barely moves an expert that is rarely picked
    (benchmarks/README.md, the load-balance sweep)"""
    floor: float = 0.5
    """MoE: the load, as a multiple of the uniform share 1/E, below which `underload_per_layer` pushes an expert up"""
    out: str = ""
    """output directory; "" means the shipped location of `arch`"""

    def __post_init__(self):
        if self.arch not in EMBEDDED:
            raise ValueError(f"arch={self.arch!r} is invalid; allowed: {sorted(EMBEDDED)}")
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError(f"steps={self.steps}, batch_size={self.batch_size}: both must be >= 1")
        if self.aux_coef is not None and self.aux_coef < 0:
            raise ValueError(f"aux_coef={self.aux_coef} must be >= 0")
        if self.floor_coef < 0 or not 0 < self.floor < 1:
            raise ValueError(f"floor_coef={self.floor_coef} must be >= 0 and floor={self.floor} in (0, 1)")
        if not 1 <= self.micro_batches <= self.batch_size:
            raise ValueError(f"micro_batches={self.micro_batches} must be in [1, batch_size={self.batch_size}]")
        self.out = self.out or str(repo_root() / EMBEDDED[self.arch])


def lr_at(step: int, cfg: PretrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def reserved_prompts() -> set[str]:
    """Prompts of the val and held-out splits: never drawn for supervised training."""
    return {row["prompt"] for split in ("val", "heldout") for row in load_tasks(default_task_path(split))}


def sft_batch(reserved: set[str], tok, rng: random.Random, cfg: PretrainConfig):
    """Right-padded (input_ids, attention_mask, labels), each (B, T); labels -100 off the completion."""
    seqs, n_prompt = [], []
    while len(seqs) < cfg.batch_size:
        problem = make_problem(rng, N_OPS_CYCLE[rng.randrange(len(N_OPS_CYCLE))])
        if problem.prompt in reserved:
            continue
        prompt_ids = tok(problem.prompt).input_ids
        completion = solution_text(problem, rng, cfg.p_long)
        seqs.append(prompt_ids + tok(completion).input_ids + [tok.eos_token_id])
        n_prompt.append(len(prompt_ids))
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), tok.pad_token_id, dtype=torch.long)  # (B, T)
    labels = torch.full((len(seqs), T), -100, dtype=torch.long)  # (B, T)
    for i, (s, p) in enumerate(zip(seqs, n_prompt)):
        ids[i, :len(s)] = torch.tensor(s)
        labels[i, p:len(s)] = torch.tensor(s[p:])
    mask = (torch.arange(T) < torch.tensor([len(s) for s in seqs])[:, None]).long()  # (B, T)
    return ids, mask, labels


def length_chunks(mask: torch.Tensor, micro_batches: int) -> list:
    """A batch's rows sorted by length (mask (B, T)) and cut into `micro_batches` chunks: [(rows (b,), T_chunk)],
    T_chunk the chunk's longest row, to which it is trimmed."""
    lengths = mask.sum(dim=1)  # (B,)
    return [(rows, int(lengths[rows].max())) for rows in torch.argsort(lengths, stable=True).chunk(micro_batches)]


def shipped_config(arch: str, **overrides) -> PretrainConfig:
    """The recipe the shipped embedded model of `arch` was trained with (its train_log.json: steps, batch,
    micro-batches, lr, ...), with `overrides` (e.g. out, steps)."""
    log = json.loads((repo_root() / EMBEDDED[arch] / "train_log.json").read_text())
    recipe = {f.name: log["config"][f.name] for f in fields(PretrainConfig) if f.name in log["config"]}
    return PretrainConfig(**{**recipe, "arch": arch, **overrides})


def balance_per_layer(router_logits: tuple, mask: torch.Tensor, k: int) -> torch.Tensor:
    """Switch Transformer load-balancing loss (Fedus et al. 2022, Eq. 4-6) per layer, mean over layers:
    mean_l E * sum_e f_le * P_le, f_le = the top-k picks of expert e in layer l per real token (sums to k), P_le the
    mean router probability of e in l over the real tokens. router_logits: per layer (N, E); mask (N,). k at a
    uniform load; the same scale as transformers' pooled form, which sums f and P over the layers before the product."""
    keep = mask.reshape(-1).to(router_logits[0].dtype)  # (N,)
    n = keep.sum().clamp(min=1)
    out = []
    for logits in router_logits:
        probs = torch.softmax(logits.float(), dim=-1)  # (N, E)
        picks = torch.zeros_like(probs).scatter_(1, probs.topk(k, dim=-1).indices, 1.0)  # (N, E), k ones a row
        f = (picks * keep[:, None]).sum(dim=0) / n  # (E,)
        p = (probs * keep[:, None]).sum(dim=0) / n  # (E,)
        out.append(probs.shape[-1] * (f * p).sum())
    return torch.stack(out).mean()


SOFT_PICK_T = 1.0
"""temperature (router-logit units) of `soft_picks`' sigmoid around the top-k threshold"""


def soft_picks(logits: torch.Tensor, k: int, t: float = SOFT_PICK_T) -> torch.Tensor:
    """A differentiable stand-in for the top-k pick indicator: sigmoid((logit - c) / t), c (detached) midway between
    each token's k-th and (k+1)-th largest logit. logits (N, E) -> (N, E) in (0, 1); above 1/2 exactly at the picks."""
    top = logits.detach().topk(k + 1, dim=-1).values  # (N, k + 1), descending
    c = 0.5 * (top[:, k - 1] + top[:, k])  # (N,)
    return torch.sigmoid((logits - c[:, None]) / t)


def underload_per_layer(router_logits: tuple, mask: torch.Tensor, k: int, floor: float) -> torch.Tensor:
    """mean_l sum_e relu(floor - u_le): u_le = (E / k) x expert e's share of the real tokens' top-k picks in layer l,
    its load as a multiple of the uniform share (mean 1 over the experts). The value uses the hard picks (it is zero
    exactly when every expert's pick share is >= floor x uniform, P3's premise at floor 0.25); the gradient flows
    through `soft_picks` (straight through), so a short expert's router logit is pushed up on every token, most where
    it is near the top-k threshold. A dead expert adds `floor`. router_logits: per layer (N, E); mask (N,)."""
    keep = mask.reshape(-1).to(router_logits[0].dtype)  # (N,)
    n = keep.sum().clamp(min=1)
    out = []
    for logits in router_logits:
        E = logits.shape[-1]
        logits = logits.float()
        hard = torch.zeros_like(logits).scatter_(1, logits.topk(k, dim=-1).indices, 1.0)  # (N, E), k ones a row
        soft = soft_picks(logits, k)  # (N, E)
        picks = hard + soft - soft.detach()  # hard in value, soft in gradient
        load = (picks * keep[:, None]).sum(dim=0) / n * (E / k)  # (E,)
        out.append(torch.relu(floor - load).sum())
    return torch.stack(out).mean()


def batch_step(model, batch: tuple, micro_batches: int, is_moe: bool, per_layer_coef: float = 0.0,
               floor_coef: float = 0.0, floor: float = 0.5) -> float:
    """Forward + backward of one SFT batch (ids, mask, labels), each (B, T); returns its loss.

    micro_batches = 1: one padded forward (transformers' loss: mean cross-entropy over the labelled tokens, plus
    router_aux_loss_coef x the load-balancing loss on MoE). micro_batches > 1: rows sorted by length, cut into that
    many chunks, each trimmed to its longest row; each chunk's cross-entropy is summed and divided by the batch's
    labelled-token count (`num_items_in_batch`), its load-balancing term weighted 1 / micro_batches.
    per_layer_coef > 0 adds that coefficient x `balance_per_layer` of each call (weighted alike); the model's own
    pooled term is then expected off (`model.router_aux_loss_coef` = 0). floor_coef > 0 adds that coefficient x
    `underload_per_layer(..., floor)` of each call, weighted alike."""
    ids, mask, labels = batch
    if micro_batches == 1:
        out = model(input_ids=ids, attention_mask=mask, labels=labels, output_router_logits=is_moe)
        loss = out.loss + _balance_terms(model, out, mask, per_layer_coef, floor_coef, floor)
        loss.backward()
        return loss.item()
    n_items = (labels[:, 1:] != -100).sum()  # the tokens the shifted labels score
    total = 0.0
    for rows, T in length_chunks(mask, micro_batches):
        out = model(input_ids=ids[rows, :T], attention_mask=mask[rows, :T], labels=labels[rows, :T],
                    output_router_logits=is_moe, num_items_in_batch=n_items)
        loss = out.loss
        if is_moe:  # transformers adds coef x aux at full weight per call: keep 1 / micro_batches of it
            loss = loss - model.router_aux_loss_coef * out.aux_loss * (1 - 1 / micro_batches)
        loss = loss + _balance_terms(model, out, mask[rows, :T], per_layer_coef, floor_coef, floor) / micro_batches
        loss.backward()
        total += loss.item()
    return total


def _balance_terms(model, out, mask: torch.Tensor, per_layer_coef: float, floor_coef: float, floor: float):
    """per_layer_coef x `balance_per_layer` + floor_coef x `underload_per_layer` of one forward's router logits (per
    layer (B*T, E)) over its real tokens (mask (B, T)); 0 where both coefficients are 0."""
    if not (per_layer_coef or floor_coef):
        return 0.0
    k, m = model.config.num_experts_per_tok, mask.reshape(-1)
    terms = 0.0
    if per_layer_coef:
        terms = terms + per_layer_coef * balance_per_layer(out.router_logits, m, k)
    if floor_coef:
        terms = terms + floor_coef * underload_per_layer(out.router_logits, m, k, floor)
    return terms


def build_model(cfg: PretrainConfig, tok):
    """The model training starts from: `cfg.init`'s weights, else a fresh one of `cfg.arch`; for a MoE, its
    load-balancing coefficient set (`aux_coef`; with `aux_per_layer`, transformers' pooled term off in training,
    the config recording the coefficient)."""
    if cfg.init:
        from gpolib.paths import resolve

        model = AutoModelForCausalLM.from_pretrained(resolve(cfg.init), dtype=torch.float32)
    else:
        model = AutoModelForCausalLM.from_config(tiny_config(cfg.arch, len(tok), tok.pad_token_id, tok.eos_token_id))
    if cfg.arch in MOE_ARCHS and cfg.aux_coef is not None:
        model.config.router_aux_loss_coef = cfg.aux_coef
        model.router_aux_loss_coef = 0.0 if cfg.aux_per_layer else cfg.aux_coef  # read by transformers' forward
    return model


def pretrain(cfg: PretrainConfig, show_progress: bool = True) -> list[float]:
    """Train from scratch, save model + tokenizer + train_log.json to cfg.out; returns the loss curve.

    Steps: 1. seed; 2. build tokenizer and model; 3. loop: sample SFT batch, forward with
    labels, AdamW step; 4. save_pretrained (safetensors), tokenizer, log.
    """
    folders.claim(cfg.out, "model", legacy=lambda p: (p / "train_log.json").is_file())  # never a folder not ours
    torch.manual_seed(cfg.seed)
    deterministic_cpu("cpu")  # the fine MoE's grouped expert matmul repeats its gradients only so (a rebuild is exact)
    rng = random.Random(cfg.seed)
    tok = build_tokenizer(padding_side="right")
    model = build_model(cfg, tok)
    reserved = reserved_prompts()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    is_moe = cfg.arch in MOE_ARCHS
    losses, start = [], time.perf_counter()
    for step in (bar := tqdm(range(cfg.steps), disable=not show_progress, desc=f"pretrain {cfg.arch}")):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        opt.zero_grad(set_to_none=True)
        loss = batch_step(model, sft_batch(reserved, tok, rng, cfg), cfg.micro_batches, is_moe,
                          cfg.aux_coef if cfg.aux_per_layer else 0.0, cfg.floor_coef, cfg.floor)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(round(loss, 6))
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
    wall = time.perf_counter() - start
    save(model, cfg, losses, wall)
    return losses


def _relative(path: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(repo_root())) if path.is_relative_to(repo_root()) else str(path)


def save(model, cfg: PretrainConfig, losses: list[float], wall_s: float) -> None:
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config.pad_token_id = model.config.pad_token_id
    model.save_pretrained(out)
    build_tokenizer(padding_side="left").save_pretrained(out)
    log = {"config": asdict(cfg) | {"out": _relative(out)},
           "wall_s": round(wall_s, 1), "n_params": sum(p.numel() for p in model.parameters()),
           "torch_threads": torch.get_num_threads(), "loss": losses}
    folders.write_text(out / "train_log.json", json.dumps(log, indent=1))
