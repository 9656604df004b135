"""A gpolib preset trained by TRL's GRPOTrainer: one GPU, several GPUs, or several nodes.

    accelerate launch --num_processes 8 scale/trl_grpo.py --preset dr_grpo \
        --model Qwen/Qwen2.5-0.5B-Instruct --out runs/trl-dr_grpo --set steps=200 --set prompts_per_step=64
    python scale/trl_grpo.py --preset grpo --out runs/trl-smoke --set steps=2 --cpu   # the embedded model

The objective, batch and optimiser come from `gpolib.export.to_trl` (TRL 1.16.0, pinned in the `trl`
extra); the prompts are the task's, rendered exactly as gpolib renders them (raw for the embedded
models, the chat template for hub instruct models); the rewards are gpolib's parser (+ DAPO Eq. 13
shaping when the preset has it); LoRA is gpolib's (`gpolib.models.lora_config`). Presets with features
TRL lacks (DAPO dynamic sampling, GFPO filtering, Routing Replay) stop with the list of them unless
`--no-strict` is given, which trains without them and warns.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing


def task_dataset(cfg, tokenizer, split: str = "task_train"):
    """A `datasets.Dataset` with the rendered `prompt` and the integer `answer` of every task row."""
    import datasets

    from gpolib.tasks import load_tasks, render_prompt

    rows = load_tasks(getattr(cfg, split))
    return datasets.Dataset.from_dict({"prompt": [render_prompt(tokenizer, r["prompt"], cfg.prompt_style) for r in rows],
                                       "answer": [r["answer"] for r in rows]})


def grpo_args(cfg, out_dir: str, strict: bool = True, cpu: bool = False, use_vllm: bool = False, **extra):
    """`trl.GRPOConfig` (the surrogate's own, e.g. GMPO's `GMPOConfig`) from the exported keywords plus run plumbing."""
    from gpolib.export import to_trl
    from gpolib.export_family import trl_classes

    config_class, _ = trl_classes(cfg)

    world = int(os.environ.get("WORLD_SIZE", "1"))  # set by accelerate launch / torchrun
    kwargs = to_trl(cfg, strict=strict, num_processes=world)
    bf16 = cfg.dtype == "bfloat16" and not cpu
    plumbing = dict(output_dir=out_dir, report_to="none", save_strategy="no", logging_steps=1, use_cpu=cpu,
                    bf16=bf16, fp16=False, gradient_checkpointing=not cpu, use_vllm=use_vllm,
                    dataloader_num_workers=0)
    if use_vllm:
        plumbing.update(vllm_mode="colocate", vllm_gpu_memory_utilization=0.3, vllm_enable_sleep_mode=True)
    return config_class(**{**kwargs, **plumbing, **extra})


def build_trainer(cfg, out_dir: str, strict: bool = True, cpu: bool = False, use_vllm: bool = False, **extra):
    """A `trl.GRPOTrainer` (the surrogate's own, e.g. TRL's experimental `GMPOTrainer`) for `cfg` (a gpolib TrainConfig):
    model + LoRA, task prompts, rewards, exported args."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gpolib.export import trl_reward_funcs
    from gpolib.export_family import trl_classes
    from gpolib.models import lora_config, resolve_path

    path = resolve_path(cfg.model)
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, "float32" if cpu else cfg.dtype))
    args = grpo_args(cfg, out_dir, strict=strict, cpu=cpu, use_vllm=use_vllm, **extra)
    peft = lora_config(model, cfg.lora_r, cfg.lora_alpha) if cfg.lora_r > 0 else None
    _, trainer_class = trl_classes(cfg)
    return trainer_class(model=model, reward_funcs=trl_reward_funcs(cfg), args=args,
                         train_dataset=task_dataset(cfg, tok), processing_class=tok, peft_config=peft)


def main(argv: list | None = None) -> int:
    from gpolib import presets

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", required=True, help=" | ".join(presets.RECIPES))
    p.add_argument("--model", default=None, help="hub name or local path (default: the preset's, the embedded model)")
    p.add_argument("--out", required=True, help="TRL output directory")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="TrainConfig override")
    p.add_argument("--no-strict", action="store_true", help="train without the features TRL lacks (warns)")
    p.add_argument("--cpu", action="store_true", help="CPU, fp32, no gradient checkpointing")
    p.add_argument("--vllm", action="store_true", help="TRL's colocated vLLM generation (needs vllm)")
    a = p.parse_args(argv)

    from gpolib.overrides import parse_overrides  # the CLI's --set rules

    overrides = parse_overrides(a.set)
    if a.model:
        overrides["model"] = a.model
    if not a.cpu and "dtype" not in overrides:
        overrides["dtype"] = "bfloat16"
    cfg = presets.get(a.preset, **overrides)
    trainer = build_trainer(cfg, a.out, strict=not a.no_strict, cpu=a.cpu, use_vllm=a.vllm)
    trainer.train()
    trainer.save_model(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
