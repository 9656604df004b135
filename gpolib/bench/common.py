"""What both sides of the benchmark share: its settings, the machine, and the like-for-like loss check."""
from __future__ import annotations

import contextlib
import os
import platform
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

from .. import paths

ROOT = paths.repo_root()
MODEL = "data/models/tiny-qwen3"
PROMPTS, G, LR, EPS = 16, 8, 1e-3, 0.2
MAX_NEW = 192
"""default generation budget: TrainConfig.max_new_tokens of the harder task regime (--max-new-tokens)"""
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


def cpu_model() -> str | None:
    """The CPU's model name from /proc/cpuinfo (Linux), e.g. 'AMD EPYC ...'; None where there is none."""
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return None


def environment() -> dict:
    import peft
    import transformers
    import trl
    env = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
           "peft": peft.__version__, "trl": trl.__version__, "cpu_count": os.cpu_count(),
           "torch_threads": torch.get_num_threads(), "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
           "cpu": platform.processor() or platform.machine(), "cpu_model": cpu_model()}
    with contextlib.suppress(Exception):
        env["loadavg_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    return env


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
    from ..config import LossConfig
    from ..objectives import Clip, policy_loss

    cfg = LossConfig(ratio_level="token", surrogate=Clip(eps_low=EPS, eps_high=EPS), aggregation="seq_mean_token_mean")
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
