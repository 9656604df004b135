"""How tokens are sampled, behind one call: `sample(model, prompt_ids, prompt_mask, spec)`.

`spec` is a `SampleSpec` (max_new_tokens, eos_id, pad_id, temperature, top_p, greedy, engine, plan, kernels), passed
whole, by name, to the bottom of the engine. Where the work happens:
  spec.py              `SampleSpec` and the engine choices
  loop.py              the decode loop: inverse-CDF draws from per-row uniforms, finished rows dropped from the
                       batch; `HFNet`, the transformers forward with a KV cache (engine 'hf', the reference)
  decoder.py           `Decoder`: the Qwen3 / Qwen3-MoE / Qwen2 layers re-written for decoding (preallocated KV
                       cache, fused projections, LoRA folded in), engine 'decoder' and 'auto' where supported
  weights.py           the weights the decoder computes with, read from the (peft) model
  plan.py              `Planner`: row shards x threads on the CPU, chosen by timing and kept; `run` on shards
  step_kernel.py       a whole dense float32 decode step in one C++ call
  attention_kernel.py  a decode step's attention in one C++ call per layer
  native.py            builds and loads kernels/*.cpp; the kernel setting (`KERNELS`, `kernels_setting`)
  kernel_choice.py     the default kernels: whichever ran fastest on this CPU, timed once per machine
  experts_kernel.py    an MoE layer's routed experts in one C++ call (the decoder, the trainer's no-grad passes
                       through `grouped_swiglu`; forward and backward for its training forward, `trained_swiglu`)
  vllm_backend.py      vLLM's `LLM.generate` with the policy as a LoRA adapter (`PolicyEngine`, `vllm_sample`)
The loop (`gpolib.rollout`, `gpolib.train`) imports this package only, never its modules.
"""
from __future__ import annotations

import torch

from ..lora import merged_lora
from . import attention_kernel, experts_kernel, kernel_choice, topk_kernel
from .experts_kernel import grouped_swiglu, trained_swiglu
from .topk_kernel import top_k_indices
from .loop import HFNet, after_eos_padded, decode_loop
from .native import KERNELS
from .plan import Planner, run
from .spec import ENGINES, SampleSpec
from .vllm_backend import INSTALL_HINT, PolicyEngine, vllm_sample
from .vllm_backend import make_engine as make_vllm_engine
from .weights import for_engine

__all__ = ["ENGINES", "INSTALL_HINT", "KERNELS", "PLANNER", "Planner", "PolicyEngine", "SampleSpec", "grouped_swiglu",
           "kernels_built", "no_grad_experts", "make_vllm_engine", "sample", "train_experts", "trained_swiglu",
           "vllm_sample"]

PLANNER = Planner()
"""the plans of this process's decoder batches, used by `sample` unless a call passes its own planner"""


@torch.inference_mode()
def sample(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, spec: SampleSpec,
           planner: Planner | None = None) -> tuple:
    """prompt_ids / prompt_mask (B, P) left-padded -> completion ids (B, T) (pad after EOS), sampling log-probs (B, T),
    T <= spec.max_new_tokens.

    One uniform per row and step is drawn first (B, spec.max_new_tokens) from torch's generator (none when greedy),
    so the samples do not depend on the plan or on batch compaction. The decoder runs where `spec.engine` allows and
    the model is supported, on `spec.plan` or the planner's (default `PLANNER`); else the transformers forward with
    the LoRA adapters merged.
    """
    B, P = prompt_ids.shape
    u = None if spec.greedy else torch.rand(B, spec.max_new_tokens, device=prompt_ids.device)  # (B, T) uniforms
    weights = for_engine(model, P + spec.max_new_tokens, spec.engine, spec.weights)
    if weights is None:
        with merged_lora(model):
            ids, lp = decode_loop(HFNet(model), prompt_ids, prompt_mask, spec, u)
    else:
        workers, threads = spec.plan or (planner or PLANNER).plan(weights, prompt_ids, prompt_mask, spec.kernels)
        ids, lp = run(weights, prompt_ids, prompt_mask, spec, u, workers, threads)
    return after_eos_padded(ids, lp, spec.eos_id, spec.pad_id)


def kernels_built() -> bool:
    """gpolib's C++ kernels are built for this machine (else every decoder step is torch, whatever `spec.kernels`)."""
    return attention_kernel.available()


def no_grad_experts():
    """The MoE experts function for the trainer's no-grad passes (`qwen_ops.fused(experts=...)`): the C++ kernel's
    `grouped_swiglu` where it is built and this machine's kernel choice is not 'none' (`kernel_choice.default`),
    else None (torch's grouped path)."""
    return grouped_swiglu if experts_kernel.available() and kernel_choice.default() != "none" else None


def router_top_k():
    """The MoE router's top-k for the trainer's passes (`qwen_ops.fused(top_k=...)`): the C++ kernel's
    `top_k_indices` where built and this machine's kernel choice is not 'none', else None (torch's topk)."""
    return top_k_indices if topk_kernel.available() and kernel_choice.default() != "none" else None


def train_experts():
    """The MoE experts function for the trainer's training forward (`qwen_ops.fused(train_experts=...)`): the C++
    kernels' `trained_swiglu` (forward and backward) where built and this machine's kernel choice is not 'none', else
    None (torch's grouped path)."""
    return trained_swiglu if experts_kernel.available() and kernel_choice.default() != "none" else None
