"""Policies: the embedded tiny Qwen3 / Qwen3-MoE, loading by HF name or path, LoRA, routing.

- `tiny_config(arch)`        the configs of the two embedded models (dense, moe).
- `load_policy(...)`         any causal LM by hub name or local path, with LoRA attached.
- `router_topk(...)`         the experts each MoE layer picks, per token.
Supervised pretraining of the embedded models lives in `gpolib.pretrain`.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, Qwen3Config, Qwen3MoeConfig
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

from gpolib import moe
from gpolib.errors import ConfigError, ModelFolderError
from gpolib.lora import use_lean_forward
from gpolib.paths import repo_root, resolve

EMBEDDED = {"dense": "data/models/tiny-qwen3", "moe": "data/models/tiny-qwen3-moe",
            "moe-fine": "data/models/tiny-qwen3-moe-fine", "moe-balanced": "data/models/tiny-qwen3-moe-balanced",
            "moe-floor": "data/models/tiny-qwen3-moe-floor"}
"""repository-relative directories of the shipped base policies, by architecture; `moe-balanced` is the fine MoE's
shape, its training continued from `moe-fine`'s weights with a load-balancing loss that revives its dead experts;
`moe-floor` continues `moe-balanced` with an underload hinge besides (`pretrain.underload_per_layer`) so that every
expert carries load (P3's premise); each recipe in its model card"""
ATTENTION_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
MLP_TARGETS = ["gate_proj", "up_proj", "down_proj"]
EXPERT_PARAMETERS = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
"""the fused 3-D expert weights of Qwen3-MoE, reached by peft's `target_parameters`"""
FINE_MOE = dict(num_experts=64, num_experts_per_tok=8, moe_intermediate_size=16, num_hidden_layers=8)
"""the fine-grained embedded MoE (`moe-fine`), shaped like Qwen3-30B-A3B's routing (1:8 of 64 experts active,
8 layers); 8 active experts of width 16 give 128 active MLP units per layer, so its ~0.8M active
parameters per token stay close to `moe`'s ~0.74M (twice the layers, each with half the active MLP)"""
ROUTER_MODULE = "mlp.gate"
"""the router of a Qwen3-MoE / Qwen2-MoE sparse block (`Qwen3MoeTopKRouter`: one (E, H) `weight`)"""


def tiny_config(arch: str, vocab_size: int, pad_id: int, eos_id: int):
    """Config of the embedded dense (~0.75M params) or MoE (8 experts, top-2, ~0.75M active) model."""
    common = dict(vocab_size=vocab_size, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, max_position_embeddings=512, tie_word_embeddings=True,
                  rope_theta=10000.0, pad_token_id=pad_id, eos_token_id=eos_id, bos_token_id=None)
    if arch == "dense":
        return Qwen3Config(intermediate_size=344, **common)
    if arch == "moe":
        # every layer sparse; 2 active experts of 172 match the dense MLP's 344
        return Qwen3MoeConfig(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=172,
                              intermediate_size=344, decoder_sparse_step=1, mlp_only_layers=[],
                              norm_topk_prob=True, router_aux_loss_coef=0.01, **common)
    if arch in ("moe-fine", "moe-balanced", "moe-floor"):
        return Qwen3MoeConfig(intermediate_size=344, decoder_sparse_step=1, mlp_only_layers=[],
                              norm_topk_prob=True, router_aux_loss_coef=0.01, **(common | FINE_MOE))
    raise ValueError(f"arch={arch!r} is invalid; allowed: {sorted(EMBEDDED)}")


def resolve_path(name_or_path: str) -> str:
    """Local paths are checked (and `data/...` resolved against the repo root); hub names pass through."""
    name_or_path = str(name_or_path)
    looks_local = name_or_path.startswith((".", "/", "data/", "~")) or os.path.exists(name_or_path)
    if not looks_local:
        return name_or_path
    path = resolve(name_or_path)
    if not path.exists():
        raise FileNotFoundError(f"model path not found: {name_or_path} (also tried {repo_root() / name_or_path})")
    return str(path)


MODEL_FOLDER_NEEDS = {"config.json": ("config.json",), "weights": ("*.safetensors", "*.bin"),
                      "tokenizer": ("tokenizer.json", "vocab*", "*.model", "merges.txt")}
"""what a local model folder must hold for `load_policy`: name -> any of these file patterns"""


def check_model_folder(path: str) -> None:
    """A local model folder holds the files the loader needs, and its safetensors headers read (else
    `ModelFolderError` naming the folder and the missing or broken file); hub names are not checked."""
    folder = Path(path)
    if not folder.is_dir():
        return
    missing = [what for what, patterns in MODEL_FOLDER_NEEDS.items()
               if not any(f.is_file() for pattern in patterns for f in folder.glob(pattern))]
    if "tokenizer_config.json" not in {f.name for f in folder.iterdir()} and "tokenizer" not in missing:
        missing.append("tokenizer_config.json")
    if missing:
        raise ModelFolderError(f"model folder {folder} lacks {', '.join(missing)}; a model folder holds config.json, "
                               "the weights (*.safetensors or *.bin), tokenizer.json and tokenizer_config.json")
    for f in sorted(folder.glob("*.safetensors")):
        _check_safetensors(f)


def _check_safetensors(f: Path) -> None:
    """The header of a safetensors file parses and its tensors fit in the file (a truncated copy does not)."""
    import json
    import struct

    size = f.stat().st_size
    with open(f, "rb") as fh:
        head = fh.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        try:
            header = json.loads(fh.read(n)) if 0 < n <= size - 8 else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            header = None
    ends = [t["data_offsets"][1] for k, t in (header or {}).items() if k != "__metadata__"]
    if header is None or 8 + n + max(ends, default=0) > size:
        raise ModelFolderError(f"weights file {f} is truncated or corrupt ({size} bytes); rebuild the model "
                               "(`make models` for the embedded ones) or copy it again")


def _check_causal_lm(path: str):
    try:
        config = AutoConfig.from_pretrained(path)
    except Exception as err:  # OSError, ValueError, KeyError, huggingface_hub's validation errors: a file it refuses
        raise ModelFolderError(f"{path} is not a loadable causal LM: {' '.join(str(err).split())[:300]}") from None
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        raise ModelFolderError(f"{path} is not a causal LM (model_type={config.model_type!r})")
    return config


def _load_matching(path: str, config, dtype: str):
    """The model of `config` with the folder's weights, refused (ModelFolderError) when the two do not match: a
    weight of the file the architecture has no place for (a Qwen3's q_norm under a config saying llama), a parameter
    the file lacks (it would start random), or a shape that differs (another vocabulary or width)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its load report would repeat, over many lines, the one line raised below
    try:
        model, info = AutoModelForCausalLM.from_pretrained(path, config=config, dtype=getattr(torch, dtype),
                                                           output_loading_info=True)
    except RuntimeError as err:  # torch's "size mismatch for ..." when a shape differs
        raise ModelFolderError(f"{path}: its weights do not fit its config.json "
                               f"({' '.join(str(err).split())[:300]})") from None
    finally:
        hf_logging.set_verbosity(level)
    problems = [f"{what}: {', '.join(sorted(keys)[:3])}{' ...' if len(keys) > 3 else ''}"
                for what, keys in (("weights the architecture has no place for", info.get("unexpected_keys")),
                                   ("parameters the weights lack", info.get("missing_keys")),
                                   ("shapes that differ", [k[0] if isinstance(k, tuple) else k
                                                           for k in info.get("mismatched_keys") or []]))
                if keys]
    if problems:
        raise ModelFolderError(f"{path}: its config.json (model_type={config.model_type!r}) does not match its "
                               f"weights ({'; '.join(problems)})")
    return model


def _ensure_pad(tokenizer, padding_side: str):
    tokenizer.padding_side = padding_side
    if tokenizer.pad_token is None:
        warnings.warn("tokenizer has no pad token; using its eos token for padding", stacklevel=3)
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def lora_config(model, lora_r: int, lora_alpha: int, train_router: bool = False):
    """LoRA on attention and MLP projections; on MoE the fused experts via `target_parameters`.

    Qwen3-MoE experts are 3-D parameters (`gate_up_proj` (E, 2I, H), `down_proj` (E, H, I)),
    not nn.Linear; peft 0.21's `target_parameters` adapts them (checked in tests/test_models.py).
    The router (`mlp.gate`) stays frozen unless `train_router`: then its whole (E, H) weight is trained,
    through peft's `modules_to_save` (a trainable copy per layer, saved with the adapter; the frozen
    original serves the reference policy when adapters are disabled). Full rather than LoRA because the
    router is tiny (E x H: 4k parameters per layer here, 0.26M in Qwen3-30B-A3B), a rank-r LoRA with
    r >= E (16 >= 8 here) would be full rank anyway, and GSPO Sec. 5.3 trains the whole model.
    """
    from peft import LoraConfig

    is_moe = getattr(model.config, "num_experts", 0) > 0 and any(
        n.endswith("mlp.experts.gate_up_proj") for n, _ in model.named_parameters())
    if train_router and not moe.is_moe(model):
        raise ConfigError("train_router=True is invalid; allowed: only for a model with MoE routers (`mlp.gate`)")
    router = dict(modules_to_save=[ROUTER_MODULE]) if train_router else {}
    if is_moe:
        return LoraConfig(r=lora_r, lora_alpha=lora_alpha, lora_dropout=0.0, task_type="CAUSAL_LM",
                          target_modules=ATTENTION_TARGETS, target_parameters=EXPERT_PARAMETERS, **router)
    return LoraConfig(r=lora_r, lora_alpha=lora_alpha, lora_dropout=0.0, task_type="CAUSAL_LM",
                      target_modules=ATTENTION_TARGETS + MLP_TARGETS, **router)


def load_policy(name_or_path: str, lora_r: int = 16, lora_alpha: int = 32, device: str = "cpu",
                dtype: str = "float32", padding_side: str = "left", gradient_checkpointing: bool = False,
                train_router: bool = False):
    """Load (model, tokenizer) from a hub name or a local directory, with LoRA when lora_r > 0.

    Steps: 1. resolve/check the path (raises before any hub call for missing local paths);
    2. check the config is a causal LM (ValueError otherwise); 3. load model and tokenizer;
    4. make sure a pad token exists; 5. wrap with peft LoRA (base weights frozen; the MoE router
    trained too if `train_router`, see `lora_config`);
    6. optionally recompute activations in the backward pass (training mode only; sampling, in eval
    mode, keeps its KV cache).
    """
    path = resolve_path(name_or_path)
    config = _check_causal_lm(path)
    check_model_folder(path)
    model = _load_matching(path, config, dtype)
    tokenizer = _ensure_pad(AutoTokenizer.from_pretrained(path), padding_side)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    model.to(device)
    if lora_r > 0:
        from peft import get_peft_model

        with warnings.catch_warnings():  # peft 0.21 reads `model.is_gradient_checkpointing`, deprecated in transformers 5
            warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
            model = get_peft_model(model, lora_config(model, lora_r, lora_alpha, train_router))
        use_lean_forward(model)
    elif train_router and not moe.is_moe(model):
        raise ConfigError("train_router=True is invalid; allowed: only for a model with MoE routers (`mlp.gate`)")
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    return model, tokenizer


def enable_gradient_checkpointing(model) -> None:
    """Activation checkpointing per decoder layer (non-reentrant, so frozen inputs under LoRA still
    carry gradients to the adapters); memory O(layers) activations instead of O(layers x ops)."""
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.x name
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


@torch.no_grad()
def router_topk(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Selected expert ids, (n_layers, B, T, top_k) long, recorded by hooks on each `mlp.gate`.

    Works on plain and peft-wrapped models; padded positions are included (mask them yourself).
    """
    if not moe.is_moe(model):
        raise ValueError("model has no MoE router (no `mlp.gate` with `top_k`)")
    picked: list[torch.Tensor] = []
    with moe.record_routing(model, picked):
        model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    B, T = input_ids.shape
    return torch.stack([p.reshape(B, T, -1) for p in picked]).long()  # (L, B, T, k)
