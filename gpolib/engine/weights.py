"""The weights `decoder.Decoder` computes with, read once from a Qwen3 / Qwen3-MoE / Qwen2 model.

Read, not shared: LoRA deltas are added to copies (the peft model is untouched, merged or not), and the
matrices are laid out for `x @ W` on a batch of rows:
  - [W_q; W_k; W_v] as one (H, Nq + 2 Nkv) matrix, [W_gate; W_up] as one (H, 2I);
  - each RMSNorm's weight w folded into the rows of the matrices that read its output
    (w * x_hat @ W = x_hat @ (diag(w) W)); q/k head norms keep their weight (RoPE follows them);
  - the attention scale 1/sqrt(d) folded into q_norm's weight (or W_q where there is no head norm);
  - MoE experts both as (E, H, 2I) / (E, I, H) stacks and as one (H, E 2I) / (E I, H) pair.
"""
from __future__ import annotations

import torch

from .quant import activation_quantizer, quantizer, stacked

SUPPORTED = ("qwen3", "qwen3_moe", "qwen2")
"""`config.model_type`s that `Decoder` implements; others use the transformers forward."""


class Unsupported(Exception):
    """The model (or its adapters) is outside what `Decoder` implements."""


def _lora_delta(mod):
    """Sum of the active LoRA deltas of a peft LoRA layer (shaped like its base parameter), or None."""
    try:
        from peft.tuners.lora.layer import Linear as LoraLinear, LoraLayer, ParamWrapper
    except ImportError:
        return None
    if not isinstance(mod, LoraLayer):
        return None
    if type(mod) not in (LoraLinear, ParamWrapper) or (mod.merged and mod.disable_adapters):
        raise Unsupported(f"adapter layer {type(mod).__name__}")
    if mod.merged or mod.disable_adapters:
        return None  # merged: already in the base weight; disabled: the base weight alone
    delta = None
    for name in [a for a in mod.active_adapters if a in mod.lora_A]:
        if mod.use_dora.get(name) or mod.lora_bias.get(name) or name in getattr(mod, "lora_variant", {}):
            raise Unsupported("LoRA variants (DoRA, lora_bias) are not folded")
        d = mod.get_delta_weight(name)
        delta = d if delta is None else delta + d
    return delta


def _linear(mod, q=None) -> tuple:
    """Effective (W (out, in), b (out,) or None) of an nn.Linear, LoRA included; `q` applied to W (`quant`)."""
    delta = _lora_delta(mod)
    base = mod.get_base_layer() if hasattr(mod, "get_base_layer") else mod
    if type(base) is not torch.nn.Linear:
        raise Unsupported(f"projection {type(base).__name__}")
    w = base.weight.detach()  # LoRA factors may be kept in fp32 beside a bf16 base: the sum takes the base's dtype
    w = w if delta is None else (w + delta).to(w.dtype)
    return (w if q is None else q(w)), (None if base.bias is None else base.bias.detach())


def _experts(mod, q=None) -> tuple:
    """Effective (gate_up (E, 2I, H), down (E, H, I)) of a Qwen3-MoE experts block, LoRA included, `q` applied."""
    deltas = {}
    while type(mod).__name__ == "ParamWrapper":
        d = _lora_delta(mod)
        if d is not None:
            deltas[mod.parameter_name] = d + deltas.get(mod.parameter_name, 0)
        mod = mod.base_layer
    if type(mod).__name__ != "Qwen3MoeExperts" or getattr(mod, "is_transposed", False):
        raise Unsupported(f"experts {type(mod).__name__}")
    gate_up, down = mod.gate_up_proj.detach(), mod.down_proj.detach()
    gate_up, down = (gate_up + deltas.get("gate_up_proj", 0)).to(gate_up.dtype), (down + deltas.get("down_proj", 0)).to(down.dtype)
    return (gate_up, down) if q is None else (stacked(q, gate_up), stacked(q, down))


def _cat_bias(biases: list, sizes: list, like: torch.Tensor):
    if all(b is None for b in biases):
        return None
    return torch.cat([torch.zeros(n, dtype=like.dtype, device=like.device) if b is None else b
                      for b, n in zip(biases, sizes)])


def attention_weights(attn, head_dim: int, ln: torch.Tensor, q=None) -> dict:
    """w_qkv (H, Nq + 2 Nkv) with the input norm's weight `ln` folded in, b_qkv, w_o (Nq, H), b_o, and the
    q/k head-norm weight (n_heads + n_kv, d) (None without head norms; 1/sqrt(d) on its query rows).
    `q`: quantizer of the projections, applied before anything is folded in."""
    (wq, bq), (wk, bk), (wv, bv) = (_linear(attn.q_proj, q), _linear(attn.k_proj, q), _linear(attn.v_proj, q))
    wo, bo = _linear(attn.o_proj, q)
    scale = head_dim ** -0.5
    has_norm = hasattr(attn, "q_norm")
    if not has_norm:  # q k^T / sqrt(d) = (q / sqrt(d)) k^T
        wq, bq = wq * scale, (None if bq is None else bq * scale)
    out = dict(w_qkv=(torch.cat([wq, wk, wv]).t() * ln.unsqueeze(1)).contiguous(),
               b_qkv=_cat_bias([bq, bk, bv], [wq.shape[0], wk.shape[0], wv.shape[0]], wq),
               w_o=wo.t().contiguous(), b_o=bo, qk_norm=None, qk_eps=None)
    if has_norm:  # one weight for q and k heads side by side
        n_q, n_kv = wq.shape[0] // head_dim, wk.shape[0] // head_dim
        qw = attn.q_norm.weight.detach() * scale
        out["qk_norm"] = torch.cat([qw.expand(n_q, -1), attn.k_norm.weight.detach().expand(n_kv, -1)])
        out["qk_eps"] = attn.q_norm.variance_epsilon
        if attn.k_norm.variance_epsilon != out["qk_eps"]:
            raise Unsupported("q_norm and k_norm with different eps")
    return out


def _router(gate):
    """The router module a forward pass uses: a router trained in full (`train_router`) sits in peft's
    ModulesToSaveWrapper, whose forward runs the first active adapter's copy, or the original when adapters are off."""
    if type(gate).__name__ != "ModulesToSaveWrapper":
        return gate
    if gate.disable_adapters or not gate.active_adapters:
        return gate.original_module
    return gate.modules_to_save[gate.active_adapters[0]]


def mlp_weights(mlp, ln: torch.Tensor, q=None) -> dict:
    """Dense SwiGLU: w_gu (H, 2I) [gate | up], w_down (I, H). MoE: router (H, E), experts (E, H, 2I) and
    (E, I, H), and the same experts side by side, (H, E 2I) and (E I, H). `ln` folded into the input rows after the
    quantizer `q` (None: none) was applied to the projections (not the router)."""
    col = ln.unsqueeze(1)  # (H, 1)
    if hasattr(mlp, "gate_proj"):
        (wg, _), (wu, _), (wd, _) = _linear(mlp.gate_proj, q), _linear(mlp.up_proj, q), _linear(mlp.down_proj, q)
        return dict(w_gu=(torch.cat([wg, wu]).t() * col).contiguous(), w_down=wd.t().contiguous())
    gate = _router(mlp.gate)
    if type(gate).__name__ != "Qwen3MoeTopKRouter" or _lora_delta(gate) is not None:
        raise Unsupported(f"router {type(gate).__name__}")
    gate_up, down = _experts(mlp.experts, q)
    e_gu = (gate_up.transpose(1, 2) * col).contiguous()  # (E, H, 2I)
    e_down = down.transpose(1, 2).contiguous()  # (E, I, H)
    E, H, I2 = e_gu.shape
    return dict(router=(gate.weight.detach().t() * col).contiguous(), top_k=gate.top_k, norm_topk=gate.norm_topk_prob,
                e_gu=e_gu, e_down=e_down, all_gu=e_gu.transpose(0, 1).reshape(H, E * I2).contiguous(),
                all_down=e_down.reshape(E * I2 // 2, H))


MATRICES = ("w_qkv", "w_o", "w_gu", "w_down", "router", "e_gu", "e_down", "all_gu", "all_down")
"""the per-layer weights that only ever enter a matmul (cast to the autocast dtype under torch.autocast)"""


def autocast_dtype(device: torch.device):
    """The dtype torch.autocast computes matmuls in on `device`'s type, here (autocast is thread-local); None off."""
    kind = device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None


def _cast_matrices(w: dict, dtype) -> dict:
    """The weights with every matrix (MATRICES per layer, the LM head) in `dtype`; the rest unchanged."""
    layers = [widen_experts({k: (v.to(dtype) if k in MATRICES else v) for k, v in lw.items()}) for lw in w["layers"]]
    return {**w, "head": w["head"].to(dtype), "layers": layers}


def widen_experts(lw: dict) -> dict:
    """A layer's weights with, for bf16 experts on the CPU, their values also held in float32 ('e_gu_wide',
    'e_down_wide'), which the decoder's grouped experts multiply with bf16-rounded inputs (`decoder._gmm`: the bf16
    engine's arithmetic, without the CPU bf16 matmul's fixed cost per expert); other layers unchanged."""
    e_gu = lw.get("e_gu")
    if e_gu is None or e_gu.dtype != torch.bfloat16 or e_gu.device.type != "cpu":
        return lw
    return {**lw, "e_gu_wide": e_gu.float(), "e_down_wide": lw["e_down"].float()}


def for_engine(model, width: int, engine: str, quantized: str | None = None):
    """`read(model, width, quantized)` where `engine` ('auto' | 'decoder' | 'hf', `spec.ENGINES`) allows the decoder
    and it supports the model; else None (the transformers forward). engine='decoder' raises Unsupported instead."""
    if engine == "hf":
        return None
    try:
        return read(model, width, quantized)
    except Unsupported:
        if engine == "decoder":
            raise
        return None


def read(model, width: int, quantized: str | None = None) -> dict:
    """Everything `Decoder` needs from `model` (plain or peft-wrapped); raises Unsupported otherwise.
    quantized: a weight format of `quant.WEIGHT_FORMATS` for the projections (None: the model's own weights).
    Under torch.autocast the matrices come in the autocast dtype (a reduced-precision engine), read and folded in
    the model's own dtype first (autocast off: the LoRA products B A are not rounded before they are added)."""
    device = next(model.parameters()).device
    low = autocast_dtype(device)
    with torch.autocast(device.type, enabled=False):
        w = _read(model, width, quantizer(quantized))
    aq = activation_quantizer(quantized)
    for lw in w["layers"]:
        lw["act_q"] = aq  # the projections' input quantizer (`quant`, 'w8a8'), None: float inputs
    return w if low is None or low == w["embed"].dtype else _cast_matrices(w, low)


def _read(model, width: int, q=None) -> dict:
    """`read` in the model's own dtype; width: the positions of the RoPE table (prompt + new tokens); q: the
    projections' quantizer or None."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg, inner = base.config, getattr(base, "model", None)
    if cfg.model_type not in SUPPORTED or inner is None or type(inner.embed_tokens) is not torch.nn.Embedding:
        raise Unsupported(f"model_type={cfg.model_type!r}")
    if getattr(cfg, "use_sliding_window", False) or any(t != "full_attention" for t in getattr(cfg, "layer_types", None) or []):
        raise Unsupported("sliding-window attention")
    if getattr(inner.rotary_emb, "rope_type", "default") == "dynamic":
        raise Unsupported("dynamic RoPE")
    eps = inner.norm.variance_epsilon
    if any(m.variance_epsilon != eps for l in inner.layers for m in (l.input_layernorm, l.post_attention_layernorm)):
        raise Unsupported("RMSNorms with different eps")
    w_head, b_head = _linear(base.lm_head)
    if b_head is not None:
        raise Unsupported("lm_head bias")
    embed = inner.embed_tokens.weight.detach()  # (V, H)
    d = inner.layers[0].self_attn.head_dim
    layers = [dict(**attention_weights(l.self_attn, d, l.input_layernorm.weight.detach(), q),
                   **mlp_weights(l.mlp, l.post_attention_layernorm.weight.detach(), q)) for l in inner.layers]
    cos, sin = inner.rotary_emb(embed[:1].unsqueeze(0), torch.arange(width, device=embed.device).unsqueeze(0))
    half = d // 2
    return dict(embed=embed, head=(w_head.t() * inner.norm.weight.detach().unsqueeze(1)).contiguous(),  # (H, V)
                eps=eps, d=d, n_q=cfg.num_attention_heads, n_kv=cfg.num_key_value_heads, layers=layers,
                cos=cos[0], sin=torch.cat([-sin[0, :, :half], sin[0, :, half:]], dim=-1))  # (S, d); sin signed
