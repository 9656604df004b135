"""Rollouts: G samples per prompt -> a `Rollout` of ids, masks, sampling log-probs and truncation flags.

Backends share one interface, `generate(model, tokenizer, prompts, ...)`; all but "hf_generate" sample through
`gpolib.engine` (`sample` with a `SampleSpec`, or `vllm_sample`), which returns tensors; this module makes the Rollout:
  "decoder"     the engine's decode loop on its `Decoder` (the Qwen3 / Qwen3-MoE / Qwen2 layers re-written for
                decoding: preallocated KV cache, fused projections, LoRA folded in; default); other
                architectures fall back to "hf";
  "hf"          the same loop on the transformers model forward with a KV cache, left padding, finished
                rows dropped from the batch (CPU and GPU; 40% faster than `generate` here);
  "hf_generate" transformers `generate` itself (reference; same greedy output, tested);
  "vllm"        vLLM's `LLM.generate` (optional extra `pip install gpolib[vllm]`), `gpolib.engine.vllm_sample`.
Sampling log-probabilities are those of the sampled tokens under softmax(logits / temperature), the
distribution the trainer also uses; with top_p < 1 the nucleus truncation is not renormalised into them.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from .lora import merged_lora
from .validation import BACKENDS, fail


@dataclass
class Rollout:
    """One batch of sampled responses; B = n_prompts * group_size rows, group members consecutive."""

    prompt_ids: torch.Tensor
    """(B, P) prompt token ids, left-padded."""
    prompt_mask: torch.Tensor
    """(B, P) 1 on real prompt tokens."""
    completion_ids: torch.Tensor
    """(B, T) sampled token ids, right-padded; T = longest completion in the batch."""
    completion_mask: torch.Tensor
    """(B, T) 1 on generated tokens up to and including EOS."""
    sample_logps: torch.Tensor
    """(B, T) log-probabilities of the sampled tokens under the sampling temperature (the engine's pi_old)."""
    truncated: torch.Tensor
    """(B,) bool: the response reached the budget without EOS."""
    texts: list
    """decoded completions (special tokens removed)."""
    prompt_index: torch.Tensor
    """(B,) index of the prompt (into the list passed to `generate`) each row answers."""

    @property
    def lengths(self) -> torch.Tensor:
        """(B,) completion lengths in tokens."""
        return self.completion_mask.sum(dim=1).long()

    def select(self, rows: torch.Tensor) -> "Rollout":
        """The rows `rows` (bool mask or index tensor) of this batch, padding trimmed."""
        idx = rows.nonzero().squeeze(1) if rows.dtype == torch.bool else rows
        T = int(self.completion_mask[idx].sum(dim=1).max().item()) if len(idx) else 0
        return Rollout(self.prompt_ids[idx], self.prompt_mask[idx], self.completion_ids[idx, :T],
                       self.completion_mask[idx, :T], self.sample_logps[idx, :T], self.truncated[idx],
                       [self.texts[i] for i in idx.tolist()], self.prompt_index[idx])


def concat(rollouts: list, pad_id: int) -> Rollout:
    """Stack rollouts row-wise (re-padding prompts on the left and completions on the right)."""
    P = max(r.prompt_ids.shape[1] for r in rollouts)
    T = max(r.completion_ids.shape[1] for r in rollouts)
    left = lambda x, v: torch.nn.functional.pad(x, (P - x.shape[1], 0), value=v)
    right = lambda x, v: torch.nn.functional.pad(x, (0, T - x.shape[1]), value=v)
    return Rollout(
        torch.cat([left(r.prompt_ids, pad_id) for r in rollouts]),
        torch.cat([left(r.prompt_mask, 0) for r in rollouts]),
        torch.cat([right(r.completion_ids, pad_id) for r in rollouts]),
        torch.cat([right(r.completion_mask, 0) for r in rollouts]),
        torch.cat([right(r.sample_logps, 0.0) for r in rollouts]),
        torch.cat([r.truncated for r in rollouts]),
        [t for r in rollouts for t in r.texts],
        torch.cat([r.prompt_index for r in rollouts]),
    )


class _SampledLogprobRecorder:
    """Logits processor that keeps log p(sampled token) per step without storing full-vocabulary scores.

    At step t it receives the scores of step t; the token sampled at step t-1 is input_ids[:, -1],
    so it gathers that token from the previous step's log-softmax and keeps only the new one.
    """

    def __init__(self, temperature: float, prompt_len: int):
        self.temperature = temperature
        self.prompt_len = prompt_len
        self.prev = None  # (B, V) log-softmax of the previous step
        self.logps = []  # list of (B,)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.prev is not None:
            self.logps.append(self.prev.gather(1, input_ids[:, -1:]).squeeze(1))
        self.prev = torch.log_softmax(scores.float() / self.temperature, dim=-1)  # (B, V)
        return scores

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """Gather the last sampled token and return (B, T) sampling log-probs."""
        T = sequences.shape[1] - self.prompt_len
        if self.prev is not None and len(self.logps) < T:
            self.logps.append(self.prev.gather(1, sequences[:, -1:]).squeeze(1))
        self.prev = None
        return torch.stack(self.logps, dim=1) if self.logps else torch.zeros(sequences.shape[0], 0)


def tokenize_prompts(tokenizer, prompts: list, device) -> tuple:
    """Left-padded prompt ids and mask, (n, P) each."""
    tokenizer.padding_side = "left"
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    return enc.input_ids.to(device), enc.attention_mask.to(device)


def completion_masks(completion_ids: torch.Tensor, eos_id: int) -> tuple:
    """Mask up to and including the first EOS, and truncation flags. (B, T) -> (B, T), (B,)."""
    is_eos = completion_ids == eos_id  # (B, T)
    seen_before = (is_eos.long().cumsum(dim=1) - is_eos.long()) > 0  # an EOS strictly earlier
    mask = (~seen_before).long()
    truncated = ~is_eos.any(dim=1)
    return mask, truncated


def _prompts(tokenizer, prompts: list, group_size: int, device) -> tuple:
    """Left-padded prompt ids and mask, each prompt repeated group_size times. (B, P) each."""
    p_ids, p_mask = tokenize_prompts(tokenizer, prompts, device)  # (n, P)
    return p_ids.repeat_interleave(group_size, dim=0), p_mask.repeat_interleave(group_size, dim=0)


@torch.inference_mode()
def hf_generate(model, tokenizer, prompts: list, group_size: int, max_new_tokens: int,
                temperature: float = 1.0, top_p: float = 1.0, greedy: bool = False) -> Rollout:
    """Sample `group_size` completions for each prompt with transformers `generate`."""
    p_ids, p_mask = _prompts(tokenizer, prompts, group_size, next(model.parameters()).device)  # (B, P)
    recorder = _SampledLogprobRecorder(1.0 if greedy else temperature, p_ids.shape[1])
    sampling = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
    with merged_lora(model):
        seqs = model.generate(input_ids=p_ids, attention_mask=p_mask, max_new_tokens=max_new_tokens,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                              logits_processor=[recorder], **sampling)  # (B, P + T)
    c_ids = seqs[:, p_ids.shape[1]:]  # (B, T)
    return to_rollout(tokenizer, prompts, group_size, p_ids, p_mask, c_ids, recorder.finish(seqs))


def hf_sample(model, tokenizer, prompts: list, group_size: int, max_new_tokens: int,
              temperature: float = 1.0, top_p: float = 1.0, greedy: bool = False, engine: str = "hf",
              weights: str | None = None) -> Rollout:
    """Sample `group_size` completions per prompt with the engine's compacting KV-cache loop (`gpolib.engine.sample`;
    engine 'hf': the transformers forward, LoRA merged; 'auto': the engine's decoder where supported; weights:
    the decoder's quantized weight format, `SampleSpec.weights`)."""
    from .engine import sample

    p_ids, p_mask = _prompts(tokenizer, prompts, group_size, next(model.parameters()).device)  # (B, P)
    spec = _spec(tokenizer, max_new_tokens, temperature, top_p, greedy, engine, weights)
    c_ids, logps = sample(model, p_ids, p_mask, spec)  # (B, T) each
    return to_rollout(tokenizer, prompts, group_size, p_ids, p_mask, c_ids, logps)


def _spec(tokenizer, max_new_tokens: int, temperature: float, top_p: float, greedy: bool, engine: str = "auto",
          weights: str | None = None):
    """The engine's `SampleSpec` of one rollout (EOS and padding from the tokenizer)."""
    from .engine import SampleSpec

    return SampleSpec(max_new_tokens=max_new_tokens, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                      temperature=temperature, top_p=top_p, greedy=greedy, engine=engine, weights=weights)


def to_rollout(tokenizer, prompts, group_size, p_ids, p_mask, c_ids, logps) -> Rollout:
    """A Rollout from prompt ids/mask (B, P) and sampled ids / log-probs (B, T): masks, truncation flags,
    texts; padding after EOS."""
    mask, truncated = completion_masks(c_ids, tokenizer.eos_token_id)
    c_ids = torch.where(mask.bool(), c_ids, torch.full_like(c_ids, tokenizer.pad_token_id))
    texts = tokenizer.batch_decode(c_ids, skip_special_tokens=True)
    index = torch.arange(len(prompts)).repeat_interleave(group_size)
    return Rollout(p_ids.cpu(), p_mask.cpu(), c_ids.cpu(), mask.cpu(), (logps * mask).cpu(),
                   truncated.cpu(), texts, index)


def autocast(dtype, device: str):
    """Sampling in reduced precision: torch.autocast(dtype) on `device`'s type ('cpu' or 'cuda'); None: unchanged.

    Matmuls then run in bf16/fp16 while the trainer recomputes in the policy's dtype, so the sampling
    log-probs (the engine's pi_old) genuinely differ from the trainer's, as with a separate engine."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type="cuda" if str(device).startswith("cuda") else "cpu", dtype=getattr(torch, dtype))


def generate(model, tokenizer, prompts: list, group_size: int, max_new_tokens: int, temperature: float = 1.0,
             top_p: float = 1.0, backend: str = "decoder", greedy: bool = False, engine=None,
             weights: str | None = None) -> Rollout:
    """Roll out with the chosen backend; `engine` is a prepared vLLM engine for backend='vllm'; `weights` a
    quantized weight format of the decoder (backend='decoder' only; the model must be one it supports)."""
    if weights is not None and backend != "decoder":
        raise ValueError(f"weights={weights!r} needs backend='decoder', got backend={backend!r}")
    if backend in ("hf", "decoder"):
        return hf_sample(model, tokenizer, prompts, group_size, max_new_tokens, temperature, top_p, greedy,
                         engine="hf" if backend == "hf" else "decoder" if weights else "auto", weights=weights)
    if backend == "hf_generate":
        return hf_generate(model, tokenizer, prompts, group_size, max_new_tokens, temperature, top_p, greedy)
    if backend == "vllm":
        from .engine import vllm_sample

        spec = _spec(tokenizer, max_new_tokens, temperature, top_p, greedy)
        c_ids, logps = vllm_sample(engine, prompts, group_size, spec)  # (B, T) each
        p_ids, p_mask = _prompts(tokenizer, prompts, group_size, "cpu")  # (B, P)
        return to_rollout(tokenizer, prompts, group_size, p_ids, p_mask, c_ids, logps)
    fail("backend", backend, " | ".join(map(repr, BACKENDS)))
