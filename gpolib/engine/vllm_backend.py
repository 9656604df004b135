"""vLLM rollout backend (optional extra: `pip install "gpolib[vllm]"`, needs a CUDA GPU).

It returns tensors only; `gpolib.rollout.generate(..., backend="vllm", engine=...)` makes the `Rollout`
(so this module imports nothing of gpolib; it reads a `SampleSpec` by its field names). `TrainConfig(backend="vllm")`
makes the loop build a `PolicyEngine` once (`make_engine`, exported as `gpolib.engine.make_vllm_engine`: LoRA enabled,
`vllm_gpu_memory_utilization`, sleep mode when `vllm_sleep`), which the rollouts use as their engine.

How the engine gets the current policy: a LoRA request, not merged weights. Before the first rollout
after each optimizer step the trainer's adapter is saved to a folder (a few MB at r = 16) and sent as a
`LoRARequest` with a new `lora_int_id` (vLLM caches adapters by id, so a reused id would serve the old
policy). Why: the frozen base weights are loaded into the engine once and never move; only the adapter
travels, through vLLM's public `LLM.generate(..., lora_request=...)`. Pushing merged weights would copy
the whole model every step and needs vLLM's internal model-runner API, which changes between releases.
The cost is vLLM's LoRA kernels during sampling; full fine-tuning (lora_r = 0) is not supported here.
Log-probabilities: the engine is built with `logprobs_mode="processed_logprobs"`, i.e. after temperature
scaling, the same distribution the trainer uses for pi_theta; with `old_logps="engine"` they are pi_old.
Sleep mode: with `vllm_sleep` the engine sleeps (level 1: weights to CPU memory, KV cache freed) during
the update and wakes before the next rollout, so the update can use the GPU memory the engine held.
vLLM is not installable on the machines that run the tests: tests/test_vllm_wiring.py drives this code
with a stand-in implementing the documented API used here (tests/vllm_standin.py).
"""
from __future__ import annotations

import torch

INSTALL_HINT = 'backend="vllm" needs the optional extra: pip install "gpolib[vllm]" (CUDA GPU required)'


class VLLMMissing(ImportError):
    """vLLM is not installed. An expected failure (one line, exit 2: `gpolib.errors.message` honours `user_error`),
    declared so because this module imports nothing of gpolib."""

    user_error = True


def _import_vllm():
    try:
        import vllm  # noqa: F401
        from vllm import LLM, SamplingParams
        from vllm.lora.request import LoRARequest
    except ImportError as err:
        raise VLLMMissing(f"{INSTALL_HINT} ({err})") from None
    return LLM, SamplingParams, LoRARequest


def make_engine(model: str, max_lora_rank: int = 16, gpu_memory_utilization: float = 0.3, dtype: str = "bfloat16",
                enable_sleep_mode: bool = False, seed: int = 0):
    """A vLLM engine with LoRA enabled; `gpu_memory_utilization` is the share of GPU memory it may take."""
    LLM, _, _ = _import_vllm()
    return LLM(model=model, enable_lora=True, max_lora_rank=max_lora_rank, dtype=dtype,
               gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=enable_sleep_mode, seed=seed,
               logprobs_mode="processed_logprobs")


class PolicyEngine:
    """A vLLM engine that always samples from the policy being trained (see the module docstring).

    `sync(model, version)` saves the adapter when `version` (optimizer steps taken) changed; `generate`
    has `LLM.generate`'s signature, wakes the engine if asleep and adds the current LoRA request;
    `release()` puts it to sleep when sleep mode is on.
    """

    def __init__(self, llm, sleep: bool = False):
        import tempfile
        import weakref

        self.llm, self.sleep_mode, self.asleep = llm, sleep, False
        self.dir = tempfile.mkdtemp(prefix="gpolib-vllm-adapter-")
        self.version, self.request = None, None
        weakref.finalize(self, _remove_tree, self.dir)

    def sync(self, model, version: int) -> None:
        """Save the current adapter and make it the one sampled from, once per optimizer step."""
        if version == self.version:
            return
        _, _, LoRARequest = _import_vllm()
        path = f"{self.dir}/v{version}"
        model.save_pretrained(path)
        if self.request is not None:
            _remove_tree(self.request.lora_path)  # the engine loaded it already; its id is never reused
        self.version = version
        self.request = LoRARequest(f"policy-v{version}", version + 1, path)  # vLLM ids start at 1

    def generate(self, prompts, sampling_params, lora_request=None, use_tqdm=False):
        if self.request is None:
            raise RuntimeError("PolicyEngine.sync(model, version) must run before the first rollout")
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False
        return self.llm.generate(prompts, sampling_params, lora_request=lora_request or self.request,
                                 use_tqdm=use_tqdm)

    def release(self) -> None:
        """Sleep (level 1) until the next rollout, when sleep mode is on."""
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True


def _remove_tree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


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


def vllm_sample(engine, prompts: list, group_size: int, spec, lora_path: str | None = None) -> tuple:
    """Sample `group_size` completions per prompt text as `spec` (a `SampleSpec`: max_new_tokens, temperature, top_p,
    greedy, pad_id) asks, with vLLM's documented API: LLM.generate(prompts, SamplingParams(n, logprobs=0),
    lora_request).

    Returns `completions(...)`: ids (B, T) and sampling log-probs (B, T), B = len(prompts) * group_size.
    """
    _, SamplingParams, LoRARequest = _import_vllm()
    if engine is None:
        raise ValueError("backend='vllm' needs an engine: gpolib.engine.make_vllm_engine(model_name)")
    params = SamplingParams(n=group_size, temperature=0.0 if spec.greedy else spec.temperature, top_p=spec.top_p,
                            max_tokens=spec.max_new_tokens, logprobs=0)
    lora = LoRARequest("policy", 1, lora_path) if lora_path else None
    outputs = engine.generate(prompts, params, lora_request=lora, use_tqdm=False)
    return completions(outputs, group_size, spec.max_new_tokens, spec.pad_id)
