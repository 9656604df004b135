"""A stand-in for the part of vLLM's documented offline API that gpolib.engine.vllm_backend uses.

vLLM needs a CUDA GPU and cannot be installed on the machines that run these tests, so `install()`
puts a module named `vllm` into `sys.modules` with:
  LLM(model=..., enable_lora=..., max_lora_rank=..., dtype=..., gpu_memory_utilization=...,
      enable_sleep_mode=..., logprobs_mode="processed_logprobs", seed=...)
  LLM.generate(prompts, SamplingParams, lora_request=LoRARequest | None, use_tqdm=False)
      -> [RequestOutput(outputs=[CompletionOutput(token_ids, logprobs=[{token_id: Logprob}], text)])]
  LLM.sleep(level=1), LLM.wake_up()
  SamplingParams(n, temperature, top_p, max_tokens, logprobs=0)
  vllm.lora.request.LoRARequest(lora_name, lora_int_id, lora_path)
Behaviour copied from vLLM's documentation where it matters for correctness: adapters are cached by
`lora_int_id` (a reused id serves the adapter first loaded under it); logprobs are of the sampled
token under the temperature-scaled distribution ("processed_logprobs"); generation stops after EOS
(included) or max_tokens; calling generate while asleep is an error. Sampling runs the HF model on CPU.
"""
from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field

import torch


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 16
    logprobs: int | None = None


@dataclass
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str


@dataclass
class Logprob:
    logprob: float


@dataclass
class CompletionOutput:
    token_ids: list
    logprobs: list
    text: str


@dataclass
class RequestOutput:
    prompt: str
    outputs: list = field(default_factory=list)


class LLM:
    instances: list = []

    def __init__(self, model: str, **kwargs):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.kwargs = dict(kwargs, model=model)
        self.base = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        self.tok = AutoTokenizer.from_pretrained(model)
        self.adapters: dict = {}  # lora_int_id -> path it was loaded from (vLLM caches adapters by id)
        self.peft = None  # the base wrapped with every adapter loaded so far
        self.calls: list = []  # ("generate", lora_int_id) | ("sleep", level) | ("wake_up",)
        self.asleep = False
        LLM.instances.append(self)

    def _policy(self, lora):
        if lora is None:
            return self.base
        name = str(lora.lora_int_id)
        if lora.lora_int_id not in self.adapters:  # loaded once per id, as vLLM's adapter cache does
            from peft import PeftModel

            if self.peft is None:
                self.peft = PeftModel.from_pretrained(self.base, lora.lora_path, adapter_name=name).eval()
            else:
                self.peft.load_adapter(lora.lora_path, adapter_name=name)
            self.adapters[lora.lora_int_id] = lora.lora_path
        self.peft.set_adapter(name)
        return self.peft

    @torch.inference_mode()
    def _sample(self, model, prompt: str, params: SamplingParams) -> CompletionOutput:
        ids = self.tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids  # (1, P)
        out, logps = [], []
        for _ in range(params.max_tokens):
            logits = model(input_ids=torch.cat([ids, torch.tensor([out], dtype=torch.long)], 1)).logits[0, -1]
            if params.temperature == 0:
                tok = int(logits.argmax())
                lp = torch.log_softmax(logits.float(), -1)[tok]
            else:
                logp = torch.log_softmax(logits.float() / params.temperature, -1)  # processed logprobs
                tok = int(torch.multinomial(logp.exp(), 1))
                lp = logp[tok]
            out.append(tok)
            logps.append({tok: Logprob(float(lp))})
            if tok == self.tok.eos_token_id:
                break
        return CompletionOutput(out, logps, self.tok.decode(out, skip_special_tokens=True))

    def generate(self, prompts, sampling_params, lora_request=None, use_tqdm=True):
        if self.asleep:
            raise RuntimeError("generate() called on a sleeping engine: call wake_up() first")
        self.calls.append(("generate", None if lora_request is None else lora_request.lora_int_id))
        model = self._policy(lora_request)
        return [RequestOutput(p, [self._sample(model, p, sampling_params) for _ in range(sampling_params.n)])
                for p in prompts]

    def sleep(self, level: int = 1):
        if not self.kwargs.get("enable_sleep_mode"):
            raise RuntimeError("sleep() needs LLM(enable_sleep_mode=True)")
        self.asleep = True
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.asleep = False
        self.calls.append(("wake_up",))


def install() -> types.ModuleType:
    """Register the stand-in as `vllm` (and `vllm.lora.request`) in sys.modules; returns it."""
    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = LLM, SamplingParams
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest
    lora.request = request
    vllm.lora = lora
    LLM.instances = []
    sys.modules.update({"vllm": vllm, "vllm.lora": lora, "vllm.lora.request": request})
    return vllm


def uninstall() -> None:
    for name in ("vllm", "vllm.lora", "vllm.lora.request"):
        sys.modules.pop(name, None)
