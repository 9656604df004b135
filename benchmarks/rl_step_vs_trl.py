"""One RL step of gpolib vs TRL's GRPOTrainer: same model, prompts, LoRA, sampling and objective.

Run: `python benchmarks/rl_step_vs_trl.py [--steps 5] [--mu 1 4]` or `python -m gpolib bench ...`
(needs the `bench` extra: `pip install -e ".[bench]"`). Everything is printed; nothing is written.

What one "step" is, on both sides: one rollout batch of 16 prompts x G = 8 = 128 completions (up to
96 new tokens, T = 1, top_p = 1, no top-k), scored by `gpolib.rewards.correctness_reward`, plus
its mu policy updates (GRPO loss, token ratio, eps = 0.2, sample-level aggregation, beta = 0).

mu mapping (checked against TRL 1.16's `GRPOConfig.__post_init__`, `_prepare_inputs` and
`_generate_and_score_completions`):
  gpolib mu = 1   TRL per_device_train_batch_size = 128, gradient_accumulation_steps = 1,
                  steps_per_generation = 1, num_iterations = 1: one optimizer step on all 128
                  completions; pi_old = pi_theta.detach() on both sides (no extra forward).
  gpolib mu = 4   TRL per_device_train_batch_size = 32, gradient_accumulation_steps = 1,
                  steps_per_generation = 4, num_iterations = 1: the generation batch (32 x 4 = 128)
                  is shuffled and split into 4 minibatches, one optimizer step each. Because
                  gradient_accumulation_steps % (steps_per_generation * num_iterations) != 0, TRL
                  computes old_per_token_logps once after generation, as gpolib does.
  A TRL "step" below is therefore `steps_per_generation` optimizer steps (TRL's global_step).

Timing: both trainers live in this process. TRL runs inside `trainer.train(max_steps=...)`; a
`TrainerCallback` runs the gpolib step at the start of every TRL generation cycle (A then B),
and a TRL step is timed from `on_step_begin` of its first optimizer step to `on_step_end` of its
last, plus the loop's own time between cycles (dataloader fetch, logging hooks). The first step
of each side is a warm-up and is not reported. Peak RSS of one process is shared by both sides,
so each side is also run alone in a subprocess (`--side gpolib|trl`) for its own peak.

The gpolib breakdown wraps the phases of the real `train_step` with timers (rollout, reward,
old-logps forward, new-logps forward, loss, backward, clip + optimizer, other = the rest).
Achieved GFLOP/s of the training passes uses FLOPs = 6 * N * positions for forward + backward
(2 * N forward, 4 * N backward, the dense-training convention), N = all model parameters (the
activations flow through the frozen base; the backward skips base weight gradients, so the
true count is nearer 4 * N; both are printed), positions = padded prompt + completion positions
the forward processes; attention score FLOPs are left out.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
import gpolib  # noqa: E402,F401  (sets OMP_WAIT_POLICY=PASSIVE before torch loads)
import torch  # noqa: E402

MODEL = "data/models/tiny-qwen3"
PROMPTS, G, MAX_NEW, LR, EPS = 16, 8, 96, 1e-3, 0.2
QWEN25_05B_SHAPE = dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                        intermediate_size=4864, vocab_size=151936, max_position_embeddings=32768,
                        tie_word_embeddings=True, rope_theta=1_000_000.0)
"""Qwen2.5-0.5B's published shape (config.json on the hub); weights are random."""


# --- machine -------------------------------------------------------------------
def matmul_peak_gflops(n: int = 1024, repeats: int = 8, inner: int = 4, threads: int = 2,
                       device: str = "cpu") -> float:
    """Best fp32 GFLOP/s of (n x n) @ (n x n) over `repeats` timings of `inner` matmuls (2 n^3 FLOPs each)."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    best = float("inf")
    for _ in range(repeats + 1):  # the first timing is a warm-up
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(inner):
            a @ b
        _sync(device)
        best = min(best, (time.perf_counter() - t0) / inner)
    return 2 * n ** 3 / best / 1e9


def _sync(device) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, MB.

    Linux: VmHWM of /proc/self/status. Not ru_maxrss: a child started by fork + exec inherits its
    parent's ru_maxrss, which would hide a side-alone run's own peak below the parent's.
    """
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024 if sys.platform != "darwin" else 2 ** 20)


def rss_mb() -> float:
    import psutil
    return psutil.Process().memory_info().rss / 2 ** 20


# --- like-for-like loss check -------------------------------------------------------
def fixed_loss_batch(B: int = 8, T: int = 12, seed: int = 0) -> dict:
    """Fixed per-token logps (leaf, requires grad), old logps, advantages (B,) and a ragged mask (B, T)."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g) * 3  # log pi_old in (-3, 0]
    logps = (old + 0.3 * torch.randn(B, T, generator=g)).requires_grad_(True)  # ratios spread past 1 +- eps
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).long()  # (B, T)
    adv = torch.randn(B, generator=g)
    return {"logps": logps, "old_logps": old, "advantages": adv, "mask": mask}


def gpolib_fixed_loss(batch: dict):
    from gpolib.config import LossConfig
    from gpolib.objectives import policy_loss

    cfg = LossConfig("token", EPS, EPS, "seq_mean_token_mean")
    loss, _ = policy_loss(batch["logps"], batch["old_logps"], batch["advantages"], batch["mask"], cfg)
    return loss


def trl_fixed_loss(batch: dict):
    """TRL's own `GRPOTrainer._compute_loss` (loss_type='grpo', beta=0) with the model forward stubbed out.

    The instance is made with `__new__` (no model, no accelerator): only the attributes the loss reads
    are set, and `_get_per_token_logps_and_entropies` returns the fixed logps instead of running a model.
    """
    from types import SimpleNamespace

    from trl import GRPOTrainer

    logps, mask = batch["logps"], batch["mask"]
    tr = GRPOTrainer.__new__(GRPOTrainer)
    ident = lambda x, **_: x
    tr.__dict__.update(
        loss_type="grpo", beta=0.0, epsilon_low=EPS, epsilon_high=EPS, importance_sampling_level="token",
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, use_vllm=False,
        vllm_importance_sampling_correction=False, aux_loss_enabled=False, _entropy_bonus_enabled=False,
        current_gradient_accumulation_steps=1, model=SimpleNamespace(training=True),
        args=SimpleNamespace(delta=None, steps_per_generation=1, use_bias_correction_kl=False),
        accelerator=SimpleNamespace(gather=ident, reduce=ident, gather_for_metrics=ident, num_processes=1),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _get_per_token_logps_and_entropies=lambda *a, **k: (logps, torch.zeros_like(logps), None))
    B, T = mask.shape
    inputs = {"prompt_ids": torch.zeros(B, 1, dtype=torch.long), "prompt_mask": torch.ones(B, 1, dtype=torch.long),
              "completion_ids": torch.zeros(B, T, dtype=torch.long), "completion_mask": mask,
              "advantages": batch["advantages"], "old_per_token_logps": batch["old_logps"]}
    return tr._compute_loss(None, inputs)


def like_for_like_loss_check(tol: float = 1e-6, seed: int = 0) -> dict:
    """gpolib GRPO loss vs TRL's on one fixed batch: values and d loss / d logps must agree to `tol`."""
    batch = fixed_loss_batch(seed=seed)
    ours = gpolib_fixed_loss(batch)
    (g_ours,) = torch.autograd.grad(ours, batch["logps"])
    theirs = trl_fixed_loss(batch)
    (g_theirs,) = torch.autograd.grad(theirs, batch["logps"])
    ratio = torch.exp(batch["logps"].detach() - batch["old_logps"])
    clipped = ((ratio - 1).abs() > EPS) & batch["mask"].bool()
    out = {"gpolib_loss": ours.item(), "trl_loss": theirs.item(), "abs_diff": abs(ours.item() - theirs.item()),
           "grad_max_abs_diff": float((g_ours - g_theirs).abs().max()),
           "clipped_token_share": float(clipped.sum() / batch["mask"].sum()), "tol": tol}
    out["ok"] = out["abs_diff"] <= tol and out["grad_max_abs_diff"] <= tol
    return out


# --- models --------------------------------------------------------------------
def random_qwen_05b(out_dir: Path, seed: int = 0) -> str:
    """Save a Qwen2.5-0.5B-shaped Qwen2 with random weights + the char tokenizer; returns the path."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tok = AutoTokenizer.from_pretrained(ROOT / MODEL)
    torch.manual_seed(seed)
    cfg = Qwen2Config(**QWEN25_05B_SHAPE, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                      bos_token_id=None)
    Qwen2ForCausalLM(cfg).save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return str(out_dir)


def build_gpolib(model: str, mu: int, device: str):
    from gpolib import presets
    from gpolib.train import Trainer

    cfg = presets.get("grpo", prompts_per_step=PROMPTS, group_size=G, max_new_tokens=MAX_NEW, mu=mu, lr=LR,
                      eval_prompts=8, model=model, device=device)
    return Trainer(cfg)


def trl_mapping(mu: int) -> dict:
    """TRL batch arguments for gpolib's mu (see the module docstring)."""
    per_step = PROMPTS * G
    if per_step % mu:
        raise ValueError(f"mu={mu} must divide {per_step}")
    return dict(per_device_train_batch_size=per_step // mu, gradient_accumulation_steps=1,
                steps_per_generation=mu, num_iterations=1)


def build_trl(model: str, mu: int, steps: int, device: str, threads: int):
    """GRPOTrainer on the same model, LoRA, prompts, reward and objective; max_steps covers `steps` cycles."""
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from gpolib.models import lora_config, resolve_path
    from gpolib.rewards import correctness_reward
    from gpolib.tasks import load_tasks

    path = resolve_path(model)
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    rows = load_tasks(str(ROOT / "data/tasks/train.jsonl"))
    ds = datasets.Dataset.from_dict({"prompt": [r["prompt"] for r in rows], "answer": [r["answer"] for r in rows]})

    def correctness(completions, answer, **_):
        return [correctness_reward(c, a) for c, a in zip(completions, answer)]

    m = trl_mapping(mu)
    warnings.filterwarnings("ignore", message=".*gradient_checkpointing. is deprecated", category=FutureWarning)
    args = GRPOConfig(
        output_dir=str(Path(tempfile.gettempdir()) / "gpolib-bench-trl"), report_to="none", save_strategy="no",
        logging_strategy="no", eval_strategy="no", disable_tqdm=True, use_cpu=device == "cpu",
        bf16=False, fp16=False, gradient_checkpointing=False,  # GRPOConfig defaults both to True
        max_steps=steps * m["steps_per_generation"], learning_rate=LR, num_generations=G,
        max_completion_length=MAX_NEW, temperature=1.0, top_p=1.0, top_k=0, beta=0.0, loss_type="grpo",
        epsilon=EPS, epsilon_high=EPS, scale_rewards="group", use_vllm=False, seed=0, dataloader_num_workers=0, **m)
    trainer = GRPOTrainer(model=base, reward_funcs=[correctness], args=args, train_dataset=ds,
                          processing_class=tok, peft_config=lora_config(base, 16, 32))
    trainer.remove_callback(PrinterCallback)  # no end-of-training metrics dump
    assert not (args.bf16 or args.fp16 or args.gradient_checkpointing or getattr(args, "activation_checkpointing", False))
    assert args.generation_batch_size == PROMPTS * G, args.generation_batch_size
    torch.set_num_threads(threads)
    return trainer


def trl_settings(trainer) -> dict:
    """The TRL arguments that define the step, read back from the built trainer."""
    a = trainer.args
    keys = ("per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
            "generation_batch_size", "num_iterations", "num_generations", "max_completion_length", "loss_type",
            "beta", "epsilon", "epsilon_high", "temperature", "top_p", "top_k", "scale_rewards", "learning_rate",
            "optim", "max_grad_norm", "bf16", "gradient_checkpointing", "use_vllm", "use_cpu")
    return {k: str(getattr(a, k, None)) if k == "optim" else getattr(a, k, None) for k in keys}


# --- gpolib step with a phase breakdown ------------------------------------------
PHASES = ("rollout", "reward", "old_logps_fwd", "new_logps_fwd", "loss", "backward", "optimizer", "other")


@contextlib.contextmanager
def phase_timers(trainer, out: dict):
    """Wrap the phases of gpolib's real train_step with timers; seconds go to out[phase], positions to out['pos_*']."""
    import gpolib.train as T

    dev, now = trainer.device, time.perf_counter
    mark = {"in_old": False, "loss_end": None, "count": None}

    def count_positions(_module, args, kwargs):  # what the model really processes, after any padding trim
        if mark["count"]:
            ids = kwargs.get("input_ids", args[0] if args else None)
            out[f"pos_{mark['count']}"] = out.get(f"pos_{mark['count']}", 0) + ids.numel()

    def timed(name, fn):
        @functools.wraps(fn)  # keeps the LR scheduler's marker on optimizer.step
        def wrapper(*a, **k):
            _sync(dev)
            t0 = now()
            r = fn(*a, **k)
            _sync(dev)
            out[name] = out.get(name, 0.0) + now() - t0
            return r
        return wrapper

    orig = {"rollout": trainer.rollout, "score": trainer.score, "old_logps": trainer.old_logps,
            "logps": trainer.logps, "opt_step": trainer.opt.step, "policy_loss": T.policy_loss,
            "clip": torch.nn.utils.clip_grad_norm_}

    def old_logps(*a, **k):
        mark["in_old"] = True
        try:
            return timed("old_logps_fwd", orig["old_logps"])(*a, **k)
        finally:
            mark["in_old"] = False

    def close_backward():  # loss.backward() runs between a loss and the next forward or the clip
        if mark["loss_end"] is not None:
            out["backward"] = out.get("backward", 0.0) + now() - mark["loss_end"]
            mark["loss_end"] = None

    def logps(*a, **k):
        _sync(dev)
        close_backward()
        mark["count"] = "old" if mark["in_old"] else "new"
        try:
            return orig["logps"](*a, **k) if mark["in_old"] else timed("new_logps_fwd", orig["logps"])(*a, **k)
        finally:
            mark["count"] = None

    def policy_loss(*a, **k):
        r = timed("loss", orig["policy_loss"])(*a, **k)
        mark["loss_end"] = now()
        return r

    def clip(*a, **k):
        _sync(dev)
        close_backward()
        return timed("optimizer", orig["clip"])(*a, **k)

    trainer.rollout, trainer.score = timed("rollout", orig["rollout"]), timed("reward", orig["score"])
    trainer.old_logps, trainer.logps, trainer.opt.step = old_logps, logps, timed("optimizer", orig["opt_step"])
    T.policy_loss, torch.nn.utils.clip_grad_norm_ = policy_loss, clip
    hook = trainer.model.register_forward_pre_hook(count_positions, with_kwargs=True)
    try:
        yield out
    finally:
        hook.remove()
        for name in ("rollout", "score", "old_logps", "logps"):
            delattr(trainer, name)  # back to the class methods
        trainer.opt.step = orig["opt_step"]  # the LR scheduler's own instance-level wrapper
        T.policy_loss, torch.nn.utils.clip_grad_norm_ = orig["policy_loss"], orig["clip"]


def gpolib_step(trainer, step: int) -> dict:
    """One timed gpolib step: wall seconds, completion tokens and the phase breakdown (seconds)."""
    from gpolib.train import train_step

    phases: dict = {}
    _sync(trainer.device)
    t0 = time.perf_counter()
    with phase_timers(trainer, phases):
        row = train_step(trainer, step)
    _sync(trainer.device)
    wall = time.perf_counter() - t0
    phases["other"] = wall - sum(phases.get(p, 0.0) for p in PHASES if p != "other")
    return {"s": wall, "tokens": int(row["gen/tokens"]), "phases": {p: phases.get(p, 0.0) for p in PHASES},
            "pos_new": phases.get("pos_new", 0), "pos_old": phases.get("pos_old", 0)}


def gpolib_breakdown(trainer, step: int = 0) -> dict:
    """Phase seconds of one gpolib step (keys: PHASES + 'total'); used by the tests on a tiny config."""
    r = gpolib_step(trainer, step)
    return {**r["phases"], "total": r["s"]}


# --- A/B driver -----------------------------------------------------------------
def run_ab(model: str, mu: int, steps: int, device: str, threads: int) -> dict:
    """gpolib and TRL in one process, alternating: warm-up A, warm-up B, then A, B, A, B, ... (`steps` each)."""
    from transformers import TrainerCallback

    torch.set_num_threads(threads)
    ours = build_gpolib(model, mu, device)
    trl = build_trl(model, mu, steps + 1, device, threads)
    spg = trl.args.steps_per_generation
    res = {"gpolib": [], "trl": [], "trl_gen": []}
    gens = _instrument_trl(trl, res["trl_gen"])

    class Alternate(TrainerCallback):
        t0 = t_end = None

        def on_step_begin(self, args, state, control, **kw):
            if state.global_step % spg:
                return
            gap = 0.0 if self.t_end is None else time.perf_counter() - self.t_end  # TRL loop time between cycles
            cycle = state.global_step // spg
            res["gpolib"].append(gpolib_step(ours, cycle))  # A
            torch.set_num_threads(threads)
            _sync(device)
            self.t0 = time.perf_counter() - gap  # B starts here

        def on_step_end(self, args, state, control, **kw):
            if state.global_step % spg:
                return
            _sync(device)
            self.t_end = time.perf_counter()
            res["trl"].append(self.t_end - self.t0)
            print(f"[mu={mu}] step {len(res['trl']) - 1}{' (warm-up)' if len(res['trl']) == 1 else ''}: "
                  f"gpolib {res['gpolib'][-1]['s']:.2f} s, TRL {res['trl'][-1]:.2f} s", file=sys.stderr, flush=True)

    trl.add_callback(Alternate())
    trl.train()
    assert len(res["trl"]) == steps + 1 == len(gens), (len(res["trl"]), len(gens))
    res["threads_seen"] = torch.get_num_threads()
    out = summarise(res, mu, ours)
    out["trl_settings"] = trl_settings(trl)
    return out


def _instrument_trl(trainer, sink: list) -> list:
    """Per TRL generation batch: completion tokens, seconds in `_generate` (sampling) and in
    `_generate_and_score_completions` (sampling + rewards + advantages + old logps when needed)."""
    orig_all, orig_gen, dev = trainer._generate_and_score_completions, trainer._generate, trainer.args.device
    cur: dict = {}

    def generate(*a, **k):
        _sync(dev)
        t0 = time.perf_counter()
        out = orig_gen(*a, **k)
        _sync(dev)
        cur["generate_s"] = time.perf_counter() - t0
        return out

    def gen_and_score(*a, **k):
        _sync(dev)
        t0 = time.perf_counter()
        out = orig_all(*a, **k)
        _sync(dev)
        sink.append({"tokens": int(out["completion_mask"].sum()), "gen_and_score_s": time.perf_counter() - t0,
                     "generate_s": cur.pop("generate_s", 0.0)})
        return out
    trainer._generate, trainer._generate_and_score_completions = generate, gen_and_score
    return sink


def summarise(res: dict, mu: int, ours) -> dict:
    """Drop the warm-up, then medians, tokens/s, ratio and the gpolib breakdown / GFLOP/s."""
    a, b, b_gen = res["gpolib"][1:], res["trl"][1:], res["trl_gen"][1:]
    b_tok = [g["tokens"] for g in b_gen]
    n_params = sum(p.numel() for p in ours.model.parameters())
    med = lambda xs: statistics.median(xs)
    phases = {p: med([r["phases"][p] for r in a]) for p in PHASES}
    fb_s = sum(r["phases"]["new_logps_fwd"] + r["phases"]["backward"] for r in a)
    pos = sum(r["pos_new"] for r in a)
    old_s, old_pos = sum(r["phases"]["old_logps_fwd"] for r in a), sum(r["pos_old"] for r in a)
    gen_s, gen_tok = sum(r["phases"]["rollout"] for r in a), sum(r["tokens"] for r in a)
    out = {
        "mu": mu, "steps": len(a),
        "gpolib": {"s_per_step_median": med([r["s"] for r in a]), "s_per_step_all": [r["s"] for r in a],
                   "completion_tokens_per_step": [r["tokens"] for r in a],
                   "completion_tokens_per_s": sum(r["tokens"] for r in a) / sum(r["s"] for r in a)},
        "trl": {"s_per_step_median": med(b), "s_per_step_all": b, "completion_tokens_per_step": b_tok,
                "completion_tokens_per_s": sum(b_tok) / sum(b)},
        "gpolib_breakdown_s_median": phases,
        "trl_breakdown_s_median": {
            "rollout (generate)": med([g["generate_s"] for g in b_gen]),
            "reward+advantages+old_logps": med([g["gen_and_score_s"] - g["generate_s"] for g in b_gen]),
            "updates (fwd+bwd+optimizer) + loop": med([t - g["gen_and_score_s"] for t, g in zip(b, b_gen)])},
        "gpolib_flops": {
            "n_params": n_params,
            "train_positions_per_step": pos / len(a),
            "train_gflops_6N": 6 * n_params * pos / fb_s / 1e9 if fb_s else None,
            "train_gflops_4N": 4 * n_params * pos / fb_s / 1e9 if fb_s else None,
            "old_logps_gflops_2N": 2 * n_params * old_pos / old_s / 1e9 if old_pos else None,
            "rollout_gflops_2N_per_new_token": 2 * n_params * gen_tok / gen_s / 1e9 if gen_s else None},
        "threads_seen": res.get("threads_seen"),
        "peak_rss_mb_shared": peak_rss_mb(),
    }
    out["ratio_gpolib_over_trl_s"] = out["gpolib"]["s_per_step_median"] / out["trl"]["s_per_step_median"]
    return out


# --- one side alone (own peak RSS) ----------------------------------------------
def run_side(side: str, model: str, mu: int, steps: int, device: str, threads: int) -> dict:
    """Warm-up + `steps` steps of one side only; the peak RSS (and CUDA peak) of this process is that side's."""
    torch.set_num_threads(threads)
    base_rss = rss_mb()
    if side == "gpolib":
        tr = build_gpolib(model, mu, device)
        after_load = rss_mb()
        times = [gpolib_step(tr, s)["s"] for s in range(steps + 1)]
    else:
        from transformers import TrainerCallback

        tr = build_trl(model, mu, steps + 1, device, threads)
        after_load, times, spg = rss_mb(), [], tr.args.steps_per_generation

        class Clock(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                if state.global_step % spg == 0:
                    self.t0 = time.perf_counter()

            def on_step_end(self, args, state, control, **kw):
                if state.global_step % spg == 0:
                    times.append(time.perf_counter() - self.t0)
        tr.add_callback(Clock())
        tr.train()
    out = {"side": side, "mu": mu, "rss_start_mb": base_rss, "rss_after_load_mb": after_load,
           "peak_rss_mb": peak_rss_mb(), "s_per_step_alone": times[1:]}
    if str(device).startswith("cuda"):
        out["cuda_peak_mb"] = torch.cuda.max_memory_allocated() / 2 ** 20
    return out


def side_in_subprocess(side: str, argv_common: list) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--side", side, *argv_common]
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    lines = [l for l in p.stdout.splitlines() if l.startswith("SIDE_RESULT ")]
    if p.returncode or not lines:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(lines[-1][len("SIDE_RESULT "):])


# --- report ---------------------------------------------------------------------
def environment() -> dict:
    import platform

    import peft
    import transformers
    import trl
    env = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
           "peft": peft.__version__, "trl": trl.__version__, "cpu_count": os.cpu_count(),
           "torch_threads": torch.get_num_threads(), "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
           "cpu": platform.processor() or platform.machine()}
    with contextlib.suppress(Exception):
        env["loadavg_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    return env


def print_report(r: dict, sides: dict) -> None:
    a, b = r["gpolib"], r["trl"]
    fmt = lambda xs: "[" + ", ".join(f"{x:.2f}" for x in xs) + "]"
    print(f"\n=== mu = {r['mu']} ({r['steps']} timed steps each, after 1 warm-up; TRL {trl_mapping(r['mu'])}) ===")
    print(f"{'':8s} {'s/step median':>14s} {'completion tok/s':>17s}  s/step all / tokens per step")
    print(f"{'gpolib':8s} {a['s_per_step_median']:14.2f} {a['completion_tokens_per_s']:17.0f}  "
          f"{fmt(a['s_per_step_all'])} {a['completion_tokens_per_step']}")
    print(f"{'trl':8s} {b['s_per_step_median']:14.2f} {b['completion_tokens_per_s']:17.0f}  "
          f"{fmt(b['s_per_step_all'])} {b['completion_tokens_per_step']}")
    print("TRL settings:", json.dumps(r["trl_settings"]))
    print(f"ratio gpolib / TRL  s/step median: {r['ratio_gpolib_over_trl_s']:.3f}   "
          f"tok/s: {a['completion_tokens_per_s'] / b['completion_tokens_per_s']:.3f}")
    print(f"peak RSS, one process with both (shared): {r['peak_rss_mb_shared']:.0f} MB")
    for side, s in sides.items():
        extra = f", CUDA peak {s['cuda_peak_mb']:.0f} MB" if "cuda_peak_mb" in s else ""
        print(f"peak RSS, {side} alone: {s['peak_rss_mb']:.0f} MB (after imports {s['rss_start_mb']:.0f}, after load "
              f"{s['rss_after_load_mb']:.0f}){extra}; s/step alone {fmt(s['s_per_step_alone'])}")
    if len(sides) == 2:
        print(f"ratio gpolib / TRL  peak RSS alone: {sides['gpolib']['peak_rss_mb'] / sides['trl']['peak_rss_mb']:.3f}")
    total = sum(r["gpolib_breakdown_s_median"].values())
    print("gpolib step breakdown (median s per step; share of their sum):")
    for p, s in r["gpolib_breakdown_s_median"].items():
        print(f"  {p:14s} {s:7.3f}  {100 * s / total:5.1f}%")
    total = sum(r["trl_breakdown_s_median"].values())
    print("TRL step breakdown (median s per step; share of their sum):")
    for p, s in r["trl_breakdown_s_median"].items():
        print(f"  {p:36s} {s:7.3f}  {100 * s / total:5.1f}%")
    f = r["gpolib_flops"]
    g = lambda x: "n/a" if x is None else f"{x:.1f}"
    print(f"gpolib achieved GFLOP/s (N = {f['n_params']:,} params, {f['train_positions_per_step']:.0f} positions "
          f"trained per step): train fwd+bwd {g(f['train_gflops_6N'])} (6N) / {g(f['train_gflops_4N'])} (4N, frozen "
          f"base); old-logps fwd {g(f['old_logps_gflops_2N'])} (2N); rollout {g(f['rollout_gflops_2N_per_new_token'])} "
          f"(2N per new token)")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="rl_step_vs_trl", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5, help="timed steps per side (after one warm-up each)")
    p.add_argument("--mu", type=int, nargs="+", default=[1, 4], help="policy updates per rollout batch")
    p.add_argument("--side", choices=["both", "gpolib", "trl"], default="both",
                   help="'both': A/B in one process (+ each side alone in a subprocess for peak RSS)")
    p.add_argument("--rss-steps", type=int, default=2, help="timed steps of each side-alone subprocess run")
    p.add_argument("--no-side-runs", action="store_true", help="skip the side-alone subprocess runs")
    p.add_argument("--device", default="cpu", help="'cpu' or 'cuda'")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads for both sides")
    p.add_argument("--model", default=MODEL, help="local path or hub name (default: the embedded tiny Qwen3)")
    p.add_argument("--random-qwen-0.5b", dest="random_qwen", action="store_true",
                   help="a Qwen2.5-0.5B-shaped model with random weights (timing only; the char tokenizer)")
    p.add_argument("--json", default="", help="also write the results to this JSON file")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with contextlib.ExitStack() as stack:
        model = args.model
        if args.random_qwen:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            model = random_qwen_05b(tmp / "qwen2.5-0.5b-random")
        if args.side != "both":
            for mu in args.mu:
                print("SIDE_RESULT " + json.dumps(run_side(args.side, model, mu, args.steps, args.device, args.threads)),
                      flush=True)
            return 0
        return _main_both(args, model)


def _main_both(args, model: str) -> int:
    print("environment:", json.dumps(environment()))
    peak = matmul_peak_gflops(threads=args.threads, device=args.device)
    print(f"fp32 matmul peak (1024^3, {args.threads} threads, best of 8): {peak:.1f} GFLOP/s")
    check = like_for_like_loss_check()
    print("like-for-like loss check (gpolib policy_loss vs TRL GRPOTrainer._compute_loss, loss_type='grpo'):",
          json.dumps(check))
    if not check["ok"]:
        raise AssertionError(f"gpolib and TRL GRPO losses differ: {check}")
    results = {"environment": environment(), "matmul_peak_gflops": peak, "loss_check": check, "runs": []}
    for mu in args.mu:
        r = run_ab(model, mu, args.steps, args.device, args.threads)
        sides = {}
        if not args.no_side_runs:
            common = ["--mu", str(mu), "--steps", str(args.rss_steps), "--device", args.device,
                      "--threads", str(args.threads), "--model", model]
            sides = {s: side_in_subprocess(s, common) for s in ("gpolib", "trl")}
        r["sides_alone"] = sides
        r["train_gflops_share_of_peak"] = (r["gpolib_flops"]["train_gflops_6N"] or 0) / peak
        print_report(r, sides)
        print(f"gpolib train fwd+bwd at {100 * r['train_gflops_share_of_peak']:.1f}% of the matmul peak (6N count)")
        results["runs"].append(r)
    print("\nRESULTS_JSON " + json.dumps(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
