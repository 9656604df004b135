"""TRL's side of the benchmark: GRPOTrainer on the same model, LoRA, prompts, reward and objective; the A/B
driver that alternates it with gpolib's step in one process; each side alone in a subprocess (own peak RSS)."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

from .common import EPS, G, LR, MAX_NEW, MODEL, PROMPTS, QWEN25_05B_SHAPE, ROOT, _sync, peak_rss_mb, rss_mb
from .ours import PHASES, build_gpolib, gpolib_step


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


def trl_mapping(mu: int) -> dict:
    """TRL batch arguments for gpolib's mu (see the module docstring)."""
    per_step = PROMPTS * G
    if per_step % mu:
        raise ValueError(f"mu={mu} must divide {per_step}")
    return dict(per_device_train_batch_size=per_step // mu, gradient_accumulation_steps=1,
                steps_per_generation=mu, num_iterations=1)


def build_trl(model: str, mu: int, steps: int, device: str, threads: int, max_new: int = MAX_NEW):
    """GRPOTrainer on the same model, LoRA, prompts, reward and objective; max_steps covers `steps` cycles."""
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from ..models import lora_config, resolve_path
    from ..rewards import correctness_reward
    from ..tasks import load_tasks

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
        max_completion_length=max_new, temperature=1.0, top_p=1.0, top_k=0, beta=0.0, loss_type="grpo",
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


# --- A/B driver -----------------------------------------------------------------
def run_ab(model: str, mu: int, steps: int, device: str, threads: int, max_new: int = MAX_NEW) -> dict:
    """gpolib and TRL in one process, alternating: warm-up A, warm-up B, then A, B, A, B, ... (`steps` each)."""
    from transformers import TrainerCallback

    torch.set_num_threads(threads)
    ours = build_gpolib(model, mu, device, max_new)
    trl = build_trl(model, mu, steps + 1, device, threads, max_new)
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
def run_side(side: str, model: str, mu: int, steps: int, device: str, threads: int, max_new: int = MAX_NEW) -> dict:
    """Warm-up + `steps` steps of one side only; the peak RSS (and CUDA peak) of this process is that side's."""
    torch.set_num_threads(threads)
    base_rss = rss_mb()
    if side == "gpolib":
        tr = build_gpolib(model, mu, device, max_new)
        after_load = rss_mb()
        times = [gpolib_step(tr, s)["s"] for s in range(steps + 1)]
    else:
        from transformers import TrainerCallback

        tr = build_trl(model, mu, steps + 1, device, threads, max_new)
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
    cmd = [sys.executable, "-m", "gpolib.bench", "--side", side, *argv_common]
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    lines = [l for l in p.stdout.splitlines() if l.startswith("SIDE_RESULT ")]
    if p.returncode or not lines:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(lines[-1][len("SIDE_RESULT "):])
