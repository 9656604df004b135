"""The single-device RL loop shared by every preset.

Per step: sample prompts -> roll out G responses each -> reward (+ DAPO overlong shaping) ->
DAPO dynamic sampling / GFPO filter -> advantages (`collect.py`) -> pi_old and mu minibatch
updates (`update.py`) -> metrics (`metrics.py`). `train` adds checkpoints, resume and the run cache
(`rundir.py`). Departures from the papers, all for the small single-device setting: LoRA instead of
full fine-tuning; one rollout engine shared with the trainer (no weight sync); prompts per step and
budgets scaled down (see presets.py and notebooks/params/).
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .collect import Batch, collect, length_stats
from .config import TrainConfig
from .errors import ConfigError, MissingDependencyError
from .memory import check_fits
from .reporting import reporter
from .metrics import update_defaults
from .objectives.selection import metrics_of
from .rewards import correctness_reward, soft_overlong_penalty
from .rollout import Rollout, autocast, generate
from .rundir import RunDir
from .runtime import cpu_threads, deterministic_cpu
from .tasks import render_prompt
from .policy import Policy
from .update import update
from .value_loop import make_baseline
from . import eval_cache

EVAL_TEMPERATURE = 1.0
"""held-out accuracy is sampled at T = 1 (the policy itself), whatever the rollout temperature (DESIGN, evidence)"""


class Trainer:
    """Model, optimiser, data and the phases of a step: collect (`collect.py`), update (`update.py`), evaluate.

    The phases never see the trainer: collect gets the config, `draw` and the baseline (`baseline.py`), update
    the `Policy` (model, parameters, optimiser), the config and the baseline.
    """

    def __init__(self, cfg: TrainConfig):
        from .models import load_policy
        from .tasks import check_vocabulary, load_tasks

        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        device = ("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto" else cfg.device
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise MissingDependencyError(f"device={cfg.device!r}: no CUDA device here (torch {torch.__version__}, "
                                         f"built for CUDA {torch.version.cuda or 'no'}); use device='cpu' or 'auto'")
        deterministic_cpu(device)  # an MoE's grouped expert matmul repeats its gradients only so
        # data first: a bad task file fails before the model is loaded
        self.train_tasks = load_tasks(cfg.task_train)
        self.eval_tasks = load_tasks(cfg.task_eval)[: cfg.eval_prompts]
        if len(self.eval_tasks) < cfg.eval_prompts:  # the config would record more prompts than were evaluated
            raise ConfigError(f"eval_prompts={cfg.eval_prompts} is invalid; allowed: <= the {len(self.eval_tasks)} "
                              f"prompts of {cfg.task_eval}")
        if len(self.train_tasks) < cfg.prompts_per_step:
            raise ConfigError(f"prompts_per_step={cfg.prompts_per_step} is invalid; allowed: <= the "
                              f"{len(self.train_tasks)} prompts of {cfg.task_train}")
        checkpointing = device.startswith("cuda") if cfg.gradient_checkpointing is None else cfg.gradient_checkpointing
        model, self.tok = load_policy(cfg.model, lora_r=cfg.lora_r, lora_alpha=cfg.lora_alpha, device=device,
                                      dtype=cfg.dtype, gradient_checkpointing=checkpointing, train_router=cfg.train_router)
        for path in (cfg.task_train, cfg.task_eval):  # a character the tokenizer lacks would train on <unk>
            check_vocabulary(path, self.tok)
        check_fits(cfg, model)
        self.engine = _vllm_engine(cfg) if cfg.backend == "vllm" else None
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        warm = cfg.warmup_steps
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / (warm + 1)))
        self.policy = Policy(model, params, opt, sched, device, cfg.temperature)
        self.baseline = make_baseline(cfg, model)  # a value model for PPO / VAPO, the group's otherwise

    # the policy's parts, held once (in `self.policy`, which the update phase trains)
    model = property(lambda self: self.policy.model, doc="the causal LM with its LoRA adapter")
    params = property(lambda self: self.policy.params, doc="its trainable parameters")
    opt = property(lambda self: self.policy.opt, doc="the policy's AdamW")
    sched = property(lambda self: self.policy.sched, doc="its learning-rate schedule")
    device = property(lambda self: self.policy.device, doc="where the policy runs")

    @property
    def value(self):
        """The value model (PPO / VAPO: advantage_estimator='gae'), else None."""
        return self.baseline.value

    # -- the phases of a step -------------------------------------------------------
    def collect(self, step: int) -> Batch:
        """Phase 1, seeded by the step: a scored, filtered batch with advantages (`collect.collect`)."""
        return collect(self.cfg, step, self.draw, self.tok.pad_token_id, self.baseline)

    def update(self, batch: Batch, step: int, after_minibatch=None) -> dict:
        """Phase 2: pi_old and the mu minibatch updates (`update.update`, `after_minibatch(k)` called after the k-th);
        the update metrics."""
        if self.engine is not None:
            self.engine.release()  # vLLM sleep mode: the update gets the engine's GPU memory
        return update(self.policy, self.cfg, self.baseline, batch, step, after_minibatch)

    def evaluate(self, step: int) -> dict:
        """Held-out accuracy at T = 1, top-p 1 (eval_samples per prompt) and greedy, mean length, truncation share.

        The sampling seed is `eval_seed`, shared by every arm and training seed and every evaluation of a run
        (common random numbers), never the training seed; the 'vllm' engine samples with its own generator.
        """
        torch.manual_seed(self.cfg.eval_seed)
        ro = self.rollout(self.eval_tasks, self.cfg.eval_samples, temperature=EVAL_TEMPERATURE, top_p=1.0, held_out=True)
        correct, _ = self.score(ro, self.eval_tasks)
        greedy = self.rollout(self.eval_tasks, 1, greedy=True, held_out=True)
        g_correct, _ = self.score(greedy, self.eval_tasks)
        return {"step": step, "acc/sample": float(correct.mean()), "acc/greedy": float(g_correct.mean()),
                **length_stats(ro, correct)}

    # -- the pieces the phases use ------------------------------------------------------
    def draw(self, step: int, round_: int) -> tuple:
        """One round of a step (`collect.Draw`): its prompts, G responses each, scored: (rollout, correct, reward)."""
        tasks = self.sample_prompts(step, round_)
        ro = self.rollout(tasks, self.cfg.group_size)
        return (ro, *self.score(ro, tasks))

    def sample_prompts(self, step: int, round_: int) -> list:
        rng = random.Random(f"{self.cfg.seed}-{step}-{round_}")
        return rng.sample(self.train_tasks, self.cfg.prompts_per_step)

    def rollout(self, tasks: list, group_size: int, greedy: bool = False, temperature: float | None = None,
                top_p: float | None = None, held_out: bool = False, max_new_tokens: int | None = None) -> Rollout:
        """Sample `group_size` responses per task at the run's temperature, top-p and budget unless given. The
        engine's quantized weights (`rollout_weights`) serve training rollouts only: held-out ones use the policy's
        own."""
        c = self.cfg
        self.model.eval()
        with cpu_threads(c.rollout_threads if self.device == "cpu" else 0), autocast(c.rollout_autocast, self.device):
            prompts = [render_prompt(self.tok, t["prompt"], c.prompt_style) for t in tasks]
            if self.engine is not None:  # the engine samples from the adapter of this optimizer step
                self.engine.sync(self.model, self.sched.last_epoch)
            budget = c.max_new_tokens if max_new_tokens is None else max_new_tokens
            return generate(self.model, self.tok, prompts, group_size, budget,
                            c.temperature if temperature is None else temperature, c.top_p if top_p is None else top_p,
                            c.backend, greedy=greedy, engine=self.engine, weights=None if held_out else c.rollout_weights)

    def score(self, ro: Rollout, tasks: list) -> tuple:
        """Correctness (B,) and shaped reward (B,) of a rollout."""
        answers = [tasks[i]["answer"] for i in ro.prompt_index.tolist()]
        correct = torch.tensor([correctness_reward(t, a) for t, a in zip(ro.texts, answers)])
        rewards = correct.clone()
        if self.cfg.overlong == "shaping":
            rewards = rewards + soft_overlong_penalty(ro.lengths, self.cfg.max_new_tokens, self.cfg.overlong_cache_len)
        return correct, rewards

    def logps(self, ro: Rollout, rows=slice(None), with_entropy: bool = False, chunk_rows: int = 64,
              bucket: bool = True):
        """log pi_theta of the completion tokens of `rows` (with grad), (b, T) [, entropy (b, T)]: `Policy.logps`."""
        return self.policy.logps(ro, rows, with_entropy=with_entropy, chunk_rows=chunk_rows, bucket=bucket)

    @torch.no_grad()
    def policy_logps(self, ro: Rollout) -> torch.Tensor:
        """log pi_theta of every completion token under the current policy, no grad, on the CPU. (B, T)."""
        self.model.eval()
        return self.logps(ro).cpu()

    # -- checkpoint state -----------------------------------------------------------
    def state_dict(self) -> dict:
        weights = {n: p.detach().cpu().clone() for n, p in self.model.named_parameters() if p.requires_grad}
        return {"weights": weights, "opt": self.opt.state_dict(), "sched": self.sched.state_dict(),
                "rng": torch.get_rng_state(), **self.baseline.state_dict()}  # the GFPO record, a value model

    def load_state_dict(self, state: dict) -> None:
        named = dict(self.model.named_parameters())
        with torch.no_grad():
            for n, w in state["weights"].items():
                named[n].copy_(w)
        self.opt.load_state_dict(state["opt"])
        self.sched.load_state_dict(state["sched"])
        torch.set_rng_state(state["rng"])
        self.baseline.load_state_dict(state)


def _vllm_engine(cfg: TrainConfig):
    """The run's vLLM engine: the base model loaded once, LoRA enabled, memory share and sleep mode from cfg."""
    from .models import resolve_path
    from .engine import PolicyEngine, make_vllm_engine as make_engine

    llm = make_engine(resolve_path(cfg.model), max_lora_rank=cfg.lora_r, gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
                      dtype=cfg.dtype, enable_sleep_mode=cfg.vllm_sleep, seed=cfg.seed)
    return PolicyEngine(llm, sleep=cfg.vllm_sleep)


def train_step(trainer: Trainer, step: int) -> dict:
    """One RL step; returns its metrics row (names in `gpolib.metrics.METRICS`)."""
    t0 = time.perf_counter()
    batch = trainer.collect(step)
    t1 = time.perf_counter()
    upd = trainer.update(batch, step)
    t2 = time.perf_counter()
    loss = trainer.cfg.loss
    placeholders = update_defaults({**loss.surrogate.metrics, **metrics_of(loss)})  # a skipped update writes them
    return {"step": step, **batch.stats, **placeholders, **upd, "lr": trainer.sched.get_last_lr()[0],
            "time/rollout_s": t1 - t0, "time/train_s": t2 - t1,
            "tokens_per_s": batch.stats["gen/tokens"] / max(t2 - t0, 1e-9)}


def adapter_save_steps(cfg: TrainConfig) -> set:
    """The steps after which the run keeps its adapter before the end (`cfg.adapter_steps`; a share f of the steps
    is step round(f * steps), kept within 1..steps - 1; none for a one-step run)."""
    out = {n if isinstance(n, int) else round(n * cfg.steps) for n in cfg.adapter_steps}
    return {min(max(n, 1), cfg.steps - 1) for n in out} if cfg.steps > 1 else set()


def train(cfg: TrainConfig, out_dir, progress: bool = True) -> list:
    """Run (or resume, or reuse) an RL run; returns the per-step metric dicts (also in out_dir/metrics.jsonl)."""
    run = RunDir(out_dir, cfg)
    run.check_config()
    if run.reuse():  # finished: read back (unless the workbook runner asked to recompute it)
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
        pretrain = state.get("value_pretrain", [])
        run.rewrite_metrics(metrics)
    else:
        run.rewrite_metrics([])
        metrics, evals, start, wall = [], [eval_cache.step0(trainer)], 0, 0.0  # shared by runs of one base policy
        pretrain = trainer.baseline.pretrain(trainer.draw)  # VAPO Value-Pretraining ([] without a value model)
    report = reporter(cfg.report_to, run.path, start)  # TensorBoard, when asked
    bar = tqdm(range(start, cfg.steps), desc=f"{cfg.name} seed {cfg.seed}", disable=not progress,
               initial=start, total=cfg.steps)
    for step in bar:
        row = train_step(trainer, step)
        metrics.append(row)
        run.append_metrics(row)
        report.log(row)
        if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and step + 1 < cfg.steps:
            evals.append(trainer.evaluate(step + 1))
        bar.set_postfix(acc=f"{row['acc/mean']:.2f}", len=f"{row['len/mean']:.0f}")
        if step + 1 in adapter_save_steps(cfg) and cfg.lora_r > 0:
            run.save_adapter(trainer.model, f"step-{step + 1}")
        if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.steps:
            ckpt = {"trainer": trainer.state_dict(), "metrics": metrics, "evals": evals, "step": step + 1,
                    "wall_s": wall + time.perf_counter() - t_start, "value_pretrain": pretrain}
            run.save_checkpoint(step + 1, ckpt)
    report.close()
    evals.append(trainer.evaluate(cfg.steps))
    if cfg.lora_r > 0:
        run.save_adapter(trainer.model)  # with a value model: its adapter in adapter/value/, its head beside it
        if trainer.value is not None:
            torch.save(trainer.value.head.state_dict(), run.path / "adapter" / "value_head.pt")
    run.write_summary({"fingerprint": cfg.fingerprint(), "finished": True, "steps": cfg.steps, "eval": evals,
                       "eval_start": evals[0], "eval_end": evals[-1], "wall_s": wall + time.perf_counter() - t_start,
                       **({"value_pretrain": pretrain} if pretrain else {})})
    return metrics


def load_summary(out_dir) -> dict:
    """summary.json of a finished run: fingerprint, steps, held-out evaluations, wall time."""
    return json.loads((Path(out_dir) / "summary.json").read_text())

