"""vLLM rollout backend (optional extra: `pip install "gpolib[vllm]"`, needs a CUDA GPU).

It cannot run on the embedded CPU default; it is exercised here only through its error path and
through `completions`, the conversion of vLLM's `RequestOutput` objects, on a recorded fixture.
It returns tensors only; `gpolib.rollout.generate(..., backend="vllm", engine=...)` makes the `Rollout`
(so this module imports nothing of gpolib). The training loop does not create an engine yet, so
`TrainConfig(backend="vllm")` is rejected.
On a GPU: `engine = make_engine(model_name)` once, then each step the current LoRA adapter is saved
to a folder and passed as a `LoRARequest`, so the engine samples from the policy being trained.
Log-probabilities: the engine is built with `logprobs_mode="processed_logprobs"`, i.e. after
temperature scaling, the same distribution the trainer uses for pi_theta.
"""
from __future__ import annotations

import torch

INSTALL_HINT = 'backend="vllm" needs the optional extra: pip install "gpolib[vllm]" (CUDA GPU required)'


def _import_vllm():
    try:
        import vllm  # noqa: F401
        from vllm import LLM, SamplingParams
        from vllm.lora.request import LoRARequest
    except ImportError as err:
        raise ImportError(INSTALL_HINT) from err
    return LLM, SamplingParams, LoRARequest


def make_engine(model: str, max_lora_rank: int = 16, gpu_memory_utilization: float = 0.3, dtype: str = "bfloat16"):
    """A vLLM engine with LoRA enabled."""
    LLM, _, _ = _import_vllm()
    return LLM(model=model, enable_lora=True, max_lora_rank=max_lora_rank, dtype=dtype,
               gpu_memory_utilization=gpu_memory_utilization, logprobs_mode="processed_logprobs")


def completions(outputs, group_size: int, max_new_tokens: int, pad_id: int) -> tuple:
    """vLLM RequestOutputs (one per prompt, `group_size` CompletionOutputs each) -> completion ids (B, T)
    right-padded with `pad_id`, and the sampling log-probs of those tokens (B, T), 0 on padding."""
    rows, logps = [], []
    for req in outputs:
        if len(req.outputs) != group_size:
            raise ValueError(f"expected {group_size} completions per prompt, got {len(req.outputs)}")
        for comp in req.outputs:
            ids = list(comp.token_ids)[:max_new_tokens]
            rows.append(torch.tensor(ids, dtype=torch.long))
            # comp.logprobs: one dict per position, {token_id: Logprob(logprob=...)}
            logps.append(torch.tensor([pos[tok].logprob for pos, tok in zip(comp.logprobs, ids)]))
    T = max(len(r) for r in rows)
    c_ids = torch.full((len(rows), T), pad_id, dtype=torch.long)
    c_logps = torch.zeros(len(rows), T)
    for i, (r, lp) in enumerate(zip(rows, logps)):
        c_ids[i, :len(r)] = r
        c_logps[i, :len(lp)] = lp
    return c_ids, c_logps


def vllm_sample(engine, prompts: list, group_size: int, max_new_tokens: int, temperature: float, top_p: float,
                greedy: bool, pad_id: int, lora_path: str | None = None) -> tuple:
    """Sample with vLLM's documented API: LLM.generate(prompts, SamplingParams(n, logprobs=0), lora_request).

    Returns `completions(...)`: ids (B, T) and sampling log-probs (B, T), B = len(prompts) * group_size.
    """
    _, SamplingParams, LoRARequest = _import_vllm()
    if engine is None:
        raise ValueError("backend='vllm' needs an engine: gpolib.vllm_backend.make_engine(model_name)")
    params = SamplingParams(n=group_size, temperature=0.0 if greedy else temperature, top_p=top_p,
                            max_tokens=max_new_tokens, logprobs=0)
    lora = LoRARequest("policy", 1, lora_path) if lora_path else None
    outputs = engine.generate(prompts, params, lora_request=lora, use_tqdm=False)
    return completions(outputs, group_size, max_new_tokens, pad_id)
