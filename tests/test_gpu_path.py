"""The gpu profile's code path, run on CPU without a hub: a random-weight Qwen2 with a ChatML tokenizer
saved to a temp dir (scale/random_qwen.py), chat-template prompts, bf16 (CPU supports it in torch),
gradient checkpointing and LoRA, 2 RL steps. benchmarks/gpu_check.sh runs the same path on a GPU.
"""
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    return _load(ROOT / "scale" / "random_qwen.py", "random_qwen").save_random_qwen(tmp_path_factory.mktemp("qwen2"))


def test_random_qwen_is_a_qwen2_with_a_chat_template(qwen_dir):
    from transformers import AutoConfig, AutoTokenizer

    from gpolib.tasks import INSTRUCTION, render_prompt

    config = json.loads((Path(qwen_dir) / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["architectures"] == ["Qwen2ForCausalLM"]
    tok = AutoTokenizer.from_pretrained(qwen_dir)
    assert (tok.eos_token, tok.pad_token) == ("<|im_end|>", "<|endoftext|>")
    text = render_prompt(tok, "5+14=?\n", "auto")  # 'auto' picks the chat form: the tokenizer has a template
    assert text == f"<|im_start|>user\n{INSTRUCTION}5+14=?<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(text, add_special_tokens=False).input_ids
    assert tok.decode(ids) == text and AutoConfig.from_pretrained(qwen_dir).vocab_size == len(tok)


def test_gpu_path_two_steps_on_cpu(qwen_dir):
    """bf16 + gradient checkpointing + LoRA + chat prompts: 2 train steps move the adapters, metrics finite.

    A random model is never correct, so every advantage would be 0 and no update would run: the reward
    is replaced by the number of distinct characters of the response (varies across samples).
    """
    gpu_check = _load(ROOT / "benchmarks" / "gpu_check.py", "gpu_check")
    from gpolib.train import Trainer, train_step

    cfg = gpu_check.gpu_config(qwen_dir, "grpo", "cpu", dtype="bfloat16", prompts_per_step=2, group_size=4,
                               max_new_tokens=8, overlong_cache=4, steps=2)
    assert (cfg.prompt_style, cfg.gradient_checkpointing, cfg.lora_r, cfg.dtype) == ("chat", True, 16, "bfloat16")
    trainer = Trainer(cfg)
    model = trainer.model
    assert model.is_activation_checkpointing
    assert {p.dtype for n, p in model.named_parameters() if "lora_" not in n} == {torch.bfloat16}
    prompts = []
    rollout = trainer.rollout
    trainer.rollout = lambda tasks, *a, **k: (prompts.extend(t["prompt"] for t in tasks), rollout(tasks, *a, **k))[1]
    trainer.score = lambda ro, tasks: (torch.zeros(len(ro.texts)), torch.tensor([len(set(t)) / 8 for t in ro.texts]))
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    rows = [train_step(trainer, step) for step in range(2)]
    for row in rows:
        assert all(math.isfinite(v) for v in row.values() if isinstance(v, float) and v is not None)
    moved = [n for n, p in model.named_parameters() if p.requires_grad and not torch.equal(p, before[n])]
    assert moved, "no LoRA parameter moved in 2 steps"
    assert len(prompts) == 4  # 2 steps x 2 prompts went through the chat template (checked above)


def test_gradient_checkpointing_gives_the_same_gradient(qwen_dir):
    """Recomputation changes memory, not the result: LoRA gradients with and without it agree (fp32)."""
    from gpolib.models import load_policy

    grads, kept = [], []  # kept: activation elements saved for backward
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model, tok = load_policy(qwen_dir, lora_r=4, lora_alpha=8, gradient_checkpointing=checkpointing)
        for n, p in model.named_parameters():  # B = 0 at init: give it values so A gets gradients too
            if "lora_B" in n:
                torch.nn.init.normal_(p, std=0.02, generator=torch.Generator().manual_seed(1))
        model.train()
        saved = []  # activation elements kept for the backward pass
        ids = tok(["<|im_start|>user\n1+2=?<|im_end|>\n"], return_tensors="pt").input_ids
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        kept.append(sum(saved))
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad})
        assert model.is_activation_checkpointing == checkpointing
    assert kept[1] < 0.7 * kept[0], kept  # checkpointed layers keep only their inputs
    assert grads[0].keys() == grads[1].keys()
    assert max(float((grads[0][n] - grads[1][n]).abs().max()) for n in grads[0]) < 1e-6
