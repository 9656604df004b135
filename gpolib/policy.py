"""What the update phase trains: the policy model with its trainable parameters, optimiser and schedule.

`Trainer` builds one `Policy` and hands it to `update.update`; a phase reads only this object and the config,
never the trainer (a test can build both by hand, see tests/test_phases.py).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from . import qwen_ops
from .engine import no_grad_experts, router_top_k, train_experts
from .lora import folded_experts
from .logprobs import completion_logps
from .rollout import Rollout


@dataclass
class Policy:
    """The policy as the update sees it; log-probs are those of the tempered sampling distribution."""

    model: torch.nn.Module
    """the causal LM with its LoRA adapter (and trainable router, when asked)"""
    params: list
    """its trainable parameters, the optimiser's and the gradient clip's"""
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LRScheduler
    device: str
    temperature: float
    """the rollout temperature: log pi = log softmax(logits / temperature)"""
    fused_ops: bool = True
    """RMSNorm and RoPE with their backward written out (`qwen_ops`); False: transformers' own (for comparisons)"""
    experts_kernel: bool = True
    """no-grad passes (pi_old, the routing passes of `moe/expert_change`): an MoE's routed experts by the C++ kernel
    (`gpolib.engine.no_grad_experts`) where it serves; False: `qwen_ops.experts_forward` (for comparisons)"""
    train_experts_kernel: bool = True
    """passes with a gradient (the training forward): an MoE's routed experts by the C++ kernels, forward and backward
    (`gpolib.engine.train_experts`) where they serve; False: `qwen_ops.experts_forward` (for comparisons)"""
    router_kernel: bool = True
    """every pass: an MoE router's top-k indices by the C++ kernel (`gpolib.engine.router_top_k`) where it serves;
    False: torch's topk (for comparisons)"""

    def logps(self, ro: Rollout, rows=slice(None), with_entropy: bool = False, chunk_rows: int = 64,
              bucket: bool = True, justify: bool = True):
        """log pi_theta of the completion tokens of `rows` (with grad), (b, T) [, entropy (b, T)]; a Qwen3 policy's
        RMSNorm and RoPE with their backward written out (`qwen_ops`); in a no-grad pass an MoE's expert LoRA folded
        once for all chunks (`lora.folded_experts`, bit for bit peft's) and its experts by the C++ kernel where it
        serves (`experts_kernel`; with a gradient, `train_experts_kernel`), its routers' top-k too (`router_kernel`).
        bucket / justify: `completion_logps`."""
        no_grad = not torch.is_grad_enabled()
        fold = folded_experts(self.model) if no_grad else contextlib.nullcontext()
        experts = no_grad_experts() if no_grad and self.experts_kernel else None
        trained = train_experts() if not no_grad and self.train_experts_kernel else None
        top_k = router_top_k() if self.router_kernel else None
        with qwen_ops.fused(self.fused_ops, experts=experts, train_experts=trained, top_k=top_k), fold:
            return completion_logps(self.model, ro.prompt_ids[rows].to(self.device),
                                    ro.prompt_mask[rows].to(self.device),
                                    ro.completion_ids[rows].to(self.device), ro.completion_mask[rows].to(self.device),
                                    self.temperature, chunk_rows=chunk_rows, with_entropy=with_entropy, bucket=bucket,
                                    justify=justify)

    def step(self) -> None:
        """One optimiser and schedule step, gradients cleared."""
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
