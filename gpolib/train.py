"""The single-device RL loop shared by every preset.

Per step: sample prompts -> roll out G responses each -> reward (+ DAPO overlong shaping) ->
DAPO dynamic sampling / GFPO filter -> advantages -> mu minibatch updates -> metrics.
Departures from the papers, all for the small single-device setting: LoRA instead of full
fine-tuning; one rollout engine shared with the trainer (no weight sync); prompts per step and
budgets scaled down (see presets.py and notebooks/params/).
"""
from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .config import TrainConfig
from .groups import adaptive_k, gfpo_advantages, gfpo_keep, informative_groups
from .logprobs import completion_logps
from .memory import check_fits
from .objectives import group_advantages, policy_loss, subset_scale
from .rewards import correctness_reward, overlong_filter_mask, soft_overlong_penalty
from .rollout import Rollout, concat, generate
from .rundir import RunDir
from .tasks import render_prompt
from . import moe


def _nanmean(values) -> float | None:
    vals = [float(v) for v in values]
    return sum(vals) / len(vals) if vals else None


@dataclass
class Batch:
    """A scored rollout ready for the update; rows are responses, consecutive groups of G."""

    rollout: Rollout
    correct: torch.Tensor  # (B,) 0/1 correctness
    rewards: torch.Tensor  # (B,) shaped reward
    advantages: torch.Tensor  # (B,)
    loss_mask: torch.Tensor  # (B, T)
    stats: dict


class Trainer:
    """Model, optimiser, data and the three phases of a step: collect, update, evaluate."""

    def __init__(self, cfg: TrainConfig):
        from .models import load_policy
        from .tasks import load_tasks

        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        self.device = ("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto" else cfg.device
        # data first: a bad task file fails before the model is loaded
        self.train_tasks = load_tasks(cfg.task_train)
        self.eval_tasks = load_tasks(cfg.task_eval)[: cfg.eval_prompts]
        if len(self.train_tasks) < cfg.prompts_per_step:
            raise ValueError(f"prompts_per_step={cfg.prompts_per_step} is invalid; allowed: <= the "
                             f"{len(self.train_tasks)} prompts of {cfg.task_train}")
        self.model, self.tok = load_policy(cfg.model, lora_r=cfg.lora_r, lora_alpha=cfg.lora_alpha,
                                           device=self.device, dtype=cfg.dtype)
        check_fits(cfg, self.model)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        warm = cfg.warmup_steps
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / (warm + 1)))
        self.group_means: list = []  # running record for GFPO adaptive k

    # -- 1. rollout and scoring ---------------------------------------------------
    def sample_prompts(self, step: int, round_: int) -> list:
        rng = random.Random(f"{self.cfg.seed}-{step}-{round_}")
        return rng.sample(self.train_tasks, self.cfg.prompts_per_step)

    def score(self, ro: Rollout, tasks: list) -> tuple:
        """Correctness (B,) and shaped reward (B,) of a rollout."""
        answers = [tasks[i]["answer"] for i in ro.prompt_index.tolist()]
        correct = torch.tensor([correctness_reward(t, a) for t, a in zip(ro.texts, answers)])
        rewards = correct.clone()
        if self.cfg.overlong == "shaping":
            rewards = rewards + soft_overlong_penalty(ro.lengths, self.cfg.max_new_tokens, self.cfg.overlong_cache)
        return correct, rewards

    def rollout(self, tasks: list, group_size: int, greedy: bool = False) -> Rollout:
        c = self.cfg
        self.model.eval()
        with cpu_threads(c.rollout_threads if self.device == "cpu" else 0):
            prompts = [render_prompt(self.tok, t["prompt"], c.prompt_style) for t in tasks]
            return generate(self.model, self.tok, prompts, group_size, c.max_new_tokens,
                            c.temperature, c.top_p, c.backend, greedy=greedy)

    def collect(self, step: int) -> Batch:
        """Generate until the batch is full (dynamic sampling) or one round (otherwise); score; filter."""
        c, G = self.cfg, self.cfg.group_size
        kept, n_groups, rounds, samples, tokens, stats = [], 0, 0, 0, 0, {}
        while True:
            tasks = self.sample_prompts(step, rounds)
            ro = self.rollout(tasks, G)
            correct, rewards = self.score(ro, tasks)
            if rounds == 0:
                stats = response_stats(ro, correct, rewards, G)
            rounds, samples, tokens = rounds + 1, samples + len(ro.texts), tokens + int(ro.lengths.sum())
            rows = torch.ones(len(ro.texts), dtype=torch.bool)
            if c.dynamic_sampling:
                rows = informative_groups(rewards, G).repeat_interleave(G)
            kept.append((ro.select(rows), correct[rows], rewards[rows]))
            n_groups += int(rows.sum()) // G
            if not c.dynamic_sampling or n_groups >= c.prompts_per_step or rounds >= c.max_gen_batches:
                break
        ro = concat([k[0] for k in kept], self.tok.pad_token_id)
        correct, rewards = torch.cat([k[1] for k in kept]), torch.cat([k[2] for k in kept])
        n = min(n_groups, c.prompts_per_step) * G
        ro, correct, rewards = ro.select(torch.arange(n)), correct[:n], rewards[:n]
        stats.update({"gen/batches": rounds, "gen/samples": samples, "gen/tokens": tokens, "groups/kept": n // G})
        return self.advantages(ro, correct, rewards, stats)

    def advantages(self, ro: Rollout, correct, rewards, stats) -> Batch:
        """GFPO filter (if configured) and group-relative advantages; filtered rows leave the batch."""
        c, G = self.cfg, self.cfg.group_size
        mask = ro.completion_mask.float()
        if c.overlong == "filter":
            mask = overlong_filter_mask(mask, ro.truncated)
        if c.gfpo_k is None or len(correct) == 0:
            adv = group_advantages(rewards, G, c.adv_scale) if len(correct) else rewards
            return Batch(ro, correct, rewards, adv, mask, stats)
        means = rewards.view(-1, G).mean(1)
        self.group_means = (self.group_means + means.tolist())[-2048:]
        k = adaptive_k(means, c.gfpo_k, G, torch.tensor(self.group_means)) if c.gfpo_adaptive else c.gfpo_k
        keep = gfpo_keep(rewards, ro.lengths, G, k, c.gfpo_metric)
        adv = gfpo_advantages(rewards, keep, G, c.adv_scale)
        stats["gfpo/len_kept"] = float(ro.lengths[keep].float().mean())
        sub = ro.select(keep)
        return Batch(sub, correct[keep], rewards[keep], adv[keep], mask[keep][:, : sub.completion_ids.shape[1]], stats)

    # -- 2. the mu minibatch updates ---------------------------------------------------
    def logps(self, ro: Rollout, rows=slice(None), with_entropy: bool = False, chunk_rows: int = 64,
              bucket: bool = True):
        return completion_logps(self.model, ro.prompt_ids[rows].to(self.device), ro.prompt_mask[rows].to(self.device),
                                ro.completion_ids[rows].to(self.device), ro.completion_mask[rows].to(self.device),
                                self.cfg.temperature, chunk_rows=chunk_rows, with_entropy=with_entropy, bucket=bucket)

    def old_logps(self, batch: Batch, rows=None):
        """pi_old per token (B, T) and recorded MoE routing.

        'engine': the sampling log-probs. 'trainer': a no-grad recompute, only of `rows` (the rows that
        are trained after the policy has moved; others stay 0), or None when nothing needs it (mu = 1).
        """
        c = self.cfg
        if c.old_logps == "engine":
            return batch.rollout.sample_logps.to(self.device), None
        replay = c.routing_replay and moe.is_moe(self.model)
        if not replay and (rows is None or len(rows) == 0):
            return None, None
        experts: list = []
        self.model.eval()
        with torch.inference_mode():
            if replay:  # every row: the recorded routing is replayed in every update
                with moe.record_routing(self.model, experts):
                    lp = self.logps(batch.rollout, chunk_rows=c.micro_batch_rows, bucket=False)
                return lp.clone(), moe.stack_by_layer(experts, len(moe.routers(self.model)))
            part = self.logps(batch.rollout, rows, chunk_rows=c.micro_batch_rows)
        full = torch.zeros(batch.rollout.completion_ids.shape, device=part.device)
        full[rows] = part
        return full, None

    def update(self, batch: Batch, step: int) -> dict:
        """mu optimiser steps on disjoint minibatches of the rollout; returns mean diagnostics.

        The first minibatch is trained before the policy moves, so its pi_old is the detached current
        policy; pi_old is recomputed only for the active rows of the later minibatches.
        """
        c = self.cfg
        B = len(batch.correct)
        if B == 0 or not bool((batch.advantages != 0).any()):
            return {"update/skipped": 1}
        gen = torch.Generator().manual_seed(c.seed * 7919 + step)
        minibatches = [mb.sort().values for mb in torch.randperm(B, generator=gen).chunk(c.mu)]
        # rows with A = 0 add nothing but a denominator share when beta = 0: skip their passes, rescale
        active = batch.advantages != 0 if c.loss.beta == 0 else torch.ones(B, dtype=torch.bool)
        later = torch.cat(minibatches[1:]) if len(minibatches) > 1 else torch.zeros(0, dtype=torch.long)
        old_all, experts = self.old_logps(batch, later[active[later]].sort().values)
        stats: dict = {}
        self.model.train()
        for i, mb in enumerate(minibatches):
            old = None if (i == 0 and c.old_logps == "trainer" and not experts) else old_all
            info = self._minibatch_step(batch, mb, active, old, experts, step)
            for k, v in info.items():
                stats.setdefault(k, []).append(v)
        return {k: _nanmean(x for x in v if x is not None) for k, v in stats.items()}

    def _minibatch_step(self, batch: Batch, mb_all, active, old_all, experts, step: int) -> dict:
        """Accumulate gradients over micro-batches of the minibatch's active rows, clip, step."""
        c = self.cfg
        rows = mb_all[active[mb_all]]
        n_tok_all = float(batch.loss_mask[mb_all].sum())
        infos = []
        # longest rows together: each micro-batch is trimmed to its own length
        order = rows[torch.argsort(batch.rollout.lengths[rows], stable=True)] if not experts else rows
        for micro in order.split(c.micro_batch_rows) if len(order) else ():
            micro = micro.sort().values
            info = self._micro_backward(batch, micro, len(mb_all), n_tok_all, old_all, experts, step)
            infos.append((float(batch.loss_mask[micro].sum()), info))
        if not infos:  # every row has A = 0: the same as a zero-gradient step
            for p in self.params:
                p.grad = torch.zeros_like(p)
        gn = torch.nn.utils.clip_grad_norm_(self.params, c.max_grad_norm)
        if not torch.isfinite(gn):
            raise FloatingPointError(f"non-finite gradient norm at step {step}; last good checkpoint kept")
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        return {"grad_norm": gn.item(), **_merge_infos(infos)}

    def _micro_backward(self, batch: Batch, rows, n_rows_all: int, n_tok_all: float, old_all, experts, step: int):
        """Forward + backward of one micro-batch; its loss is scaled to its share of the minibatch loss."""
        c, ro = self.cfg, batch.rollout
        replay = moe.replay_routing(self.model, _rows_of(experts, rows, len(batch.correct))) if experts else contextlib.nullcontext()
        with replay:
            lp, ent = self.logps(ro, rows, with_entropy=True, chunk_rows=len(rows), bucket=not experts)
        old = lp.detach() if old_all is None else old_all[rows]
        ref = self.ref_logps(ro, rows) if c.loss.beta > 0 else None
        mask, adv = batch.loss_mask[rows].to(self.device), batch.advantages[rows].to(self.device)
        loss, info = policy_loss(lp, old, adv, mask, c.loss, ref)
        n_tok = float(mask.sum())
        loss = loss * subset_scale(c.loss.aggregation, len(rows), n_rows_all, n_tok, n_tok_all)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite loss ({loss.item()}) at step {step}; last good checkpoint kept")
        loss.backward()
        for k in ("clip_frac_low", "clip_frac_high", "clip_frac"):
            info[k] *= n_tok / max(n_tok_all, 1.0)  # as a share of the minibatch's tokens
        info.update(loss=loss.item(), entropy=float((ent * mask).sum() / max(n_tok, 1.0)),
                    **clip_probs(lp.detach(), old, adv, mask, c.loss.eps_high))
        return info

    def ref_logps(self, ro: Rollout, rows):
        """log pi_ref: the base model (LoRA adapters disabled)."""
        with torch.no_grad(), self.model.disable_adapter():
            return self.logps(ro, rows)

    # -- 3. evaluation -------------------------------------------------------------
    def evaluate(self, step: int) -> dict:
        """Held-out accuracy at T (eval_samples per prompt) and greedy, mean length, truncation share."""
        torch.manual_seed(self.cfg.seed + 12345)  # the same sampling noise at every evaluation
        ro = self.rollout(self.eval_tasks, self.cfg.eval_samples)
        correct, _ = self.score(ro, self.eval_tasks)
        greedy = self.rollout(self.eval_tasks, 1, greedy=True)
        g_correct, _ = self.score(greedy, self.eval_tasks)
        return {"step": step, "acc/sample": float(correct.mean()), "acc/greedy": float(g_correct.mean()),
                **length_stats(ro, correct)}

    # -- checkpoint state -----------------------------------------------------------
    def state_dict(self) -> dict:
        weights = {n: p.detach().cpu().clone() for n, p in self.model.named_parameters() if p.requires_grad}
        return {"weights": weights, "opt": self.opt.state_dict(), "sched": self.sched.state_dict(),
                "group_means": list(self.group_means), "rng": torch.get_rng_state()}

    def load_state_dict(self, state: dict) -> None:
        named = dict(self.model.named_parameters())
        with torch.no_grad():
            for n, w in state["weights"].items():
                named[n].copy_(w)
        self.opt.load_state_dict(state["opt"])
        self.sched.load_state_dict(state["sched"])
        self.group_means = list(state["group_means"])
        torch.set_rng_state(state["rng"])


@contextlib.contextmanager
def cpu_threads(n: int):
    """Run the block with n torch CPU threads (0: leave the setting alone)."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _rows_of(experts: list, rows: torch.Tensor, B: int) -> list:
    """Slice recorded (B*L, k) expert ids per layer to the minibatch rows."""
    out = []
    for e in experts:
        per_row = e.view(B, -1, e.shape[-1])  # (B, L, k)
        out.append(per_row[rows.to(e.device)].reshape(-1, e.shape[-1]))
    return out


def _merge_infos(infos: list) -> dict:
    """Combine micro-batch diagnostics: loss and clip shares add up; the rest are token-weighted means."""
    out: dict = {}
    for key in {k for _, info in infos for k in info}:
        pairs = [(n, info[key]) for n, info in infos if info.get(key) is not None]
        if not pairs:
            out[key] = None
        elif key in ("loss", "clip_frac_low", "clip_frac_high", "clip_frac"):
            out[key] = sum(v for _, v in pairs)
        else:
            out[key] = sum(n * v for n, v in pairs) / max(sum(n for n, _ in pairs), 1e-9)
    return out


def clip_probs(logps, old, adv, mask, eps_high: float) -> dict:
    """DAPO Sec. 3.1 diagnostic: mean pi_old of tokens clipped at 1 + eps_high (A > 0), and of all tokens."""
    ratio = torch.exp(logps - old)
    up = (ratio > 1 + eps_high) & (adv.unsqueeze(1) > 0) & mask.bool()
    p_old = torch.exp(old)
    return {"clip_high_pi_old": float(p_old[up].mean()) if up.any() else None,
            "pi_old_mean": float(p_old[mask.bool()].mean())}


def length_stats(ro: Rollout, correct) -> dict:
    """Mean length overall / of correct / of incorrect responses (None when there are none), truncation share."""
    lengths = ro.lengths.float()
    return {"len/mean": float(lengths.mean()), "len/correct": _nanmean(lengths[correct > 0].tolist()),
            "len/incorrect": _nanmean(lengths[correct == 0].tolist()), "trunc/frac": float(ro.truncated.float().mean())}


def response_stats(ro: Rollout, correct, rewards, G: int) -> dict:
    """Per-step sampling statistics of a fresh rollout (before any filtering)."""
    per_group = correct.view(-1, G).sum(1)  # (n_groups,)
    return {"reward/mean": float(rewards.mean()), "reward/std": float(rewards.std()), "acc/mean": float(correct.mean()),
            **length_stats(ro, correct),
            "groups/all_correct": float((per_group == G).float().mean()),
            "groups/all_wrong": float((per_group == 0).float().mean()),
            "groups/zero_var": float((rewards.view(-1, G).std(1) == 0).float().mean()),
            # -E[log p(sampled token)]: an unbiased estimate of the per-token entropy of the sampling policy
            "entropy/sampled": float(-(ro.sample_logps * ro.completion_mask).sum() / ro.completion_mask.sum().clamp(min=1)),
            }


def train_step(trainer: Trainer, step: int) -> dict:
    """One RL step; returns its metrics row (DESIGN.md metric names)."""
    t0 = time.perf_counter()
    torch.manual_seed(trainer.cfg.seed * 1_000_003 + step)  # each step reproducible on its own (resume)
    batch = trainer.collect(step)
    t1 = time.perf_counter()
    upd = trainer.update(batch, step)
    t2 = time.perf_counter()
    row = {"step": step, **batch.stats,
           "groups/zero_var_trained": float((batch.rewards.view(-1, trainer.cfg.group_size).std(1) == 0).float().mean())
           if len(batch.rewards) and trainer.cfg.gfpo_k is None else 0.0,
           "entropy/mean": upd.get("entropy"), "clip/low": upd.get("clip_frac_low", 0.0),
           "clip/high": upd.get("clip_frac_high", 0.0), "clip/frac": upd.get("clip_frac", 0.0),
           "clip/high_pi_old": upd.get("clip_high_pi_old"), "pi_old/mean": upd.get("pi_old_mean"),
           "ratio/log_std": upd.get("ratio_log_std", 0.0), "loss/policy": upd.get("loss"),
           "kl/mean": upd.get("kl", 0.0), "grad/norm": upd.get("grad_norm"),
           "update/skipped": upd.get("update/skipped", 0), "lr": trainer.sched.get_last_lr()[0],
           "time/rollout_s": t1 - t0, "time/train_s": t2 - t1, "tokens_per_s": batch.stats["gen/tokens"] / max(t2 - t0, 1e-9)}
    return row


def train(cfg: TrainConfig, out_dir, progress: bool = True) -> list:
    """Run (or resume, or reuse) an RL run; returns the per-step metric dicts (also in out_dir/metrics.jsonl)."""
    run = RunDir(out_dir, cfg)
    run.check_config()
    if run.finished():
        return run.read_metrics()
    run.acquire()
    try:
        return _train_locked(cfg, run, progress)
    finally:
        run.release()


def _train_locked(cfg: TrainConfig, run: RunDir, progress: bool) -> list:
    t_start = time.perf_counter()
    trainer = Trainer(cfg)
    state = run.load_latest_checkpoint()
    if state is not None:
        trainer.load_state_dict(state["trainer"])
        metrics, evals, start, wall = state["metrics"], state["evals"], state["step"], state["wall_s"]
        run.rewrite_metrics(metrics)
    else:
        run.rewrite_metrics([])
        metrics, evals, start, wall = [], [trainer.evaluate(0)], 0, 0.0
    bar = tqdm(range(start, cfg.steps), desc=f"{cfg.name} seed {cfg.seed}", disable=not progress,
               initial=start, total=cfg.steps)
    for step in bar:
        row = train_step(trainer, step)
        metrics.append(row)
        run.append_metrics(row)
        if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and step + 1 < cfg.steps:
            evals.append(trainer.evaluate(step + 1))
        bar.set_postfix(acc=f"{row['acc/mean']:.2f}", len=f"{row['len/mean']:.0f}")
        if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.steps:
            ckpt = {"trainer": trainer.state_dict(), "metrics": metrics, "evals": evals, "step": step + 1,
                    "wall_s": wall + time.perf_counter() - t_start}
            run.save_checkpoint(step + 1, ckpt)
    evals.append(trainer.evaluate(cfg.steps))
    if cfg.lora_r > 0:
        trainer.model.save_pretrained(str(run.path / "adapter"))
    run.write_summary({"fingerprint": cfg.fingerprint(), "finished": True, "steps": cfg.steps, "eval": evals,
                       "eval_start": evals[0], "eval_end": evals[-1], "wall_s": wall + time.perf_counter() - t_start})
    return metrics


def load_summary(out_dir) -> dict:
    import json
    return json.loads((Path(out_dir) / "summary.json").read_text())

