"""LoRA at speed: while sampling, fold the adapters into the base weights for the block, then restore them exactly
(`merged_lora`); while training, a forward without output-sized elementwise work (`lean_forward`) and an MoE's
stacked experts with their LoRA folded by one batched matmul per parameter, without peft's per-call parametrization
(`lean_experts_forward`)."""
from __future__ import annotations

import contextlib
import functools

import torch


@contextlib.contextmanager
def merged_lora(model):
    """Fold LoRA deltas into the base Linear weights while sampling (one matmul per projection instead of
    three), then restore the exact base weights. Models with other adapter kinds are left unchanged."""
    try:
        from peft.tuners.lora import LoraLayer
        from peft.tuners.lora.layer import Linear as LoraLinear
    except ImportError:  # peft absent: nothing to merge
        yield
        return
    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    if not layers or any(type(m) is not LoraLinear or m.merged for m in layers):
        yield
        return
    saved = [m.get_base_layer().weight.detach().clone() for m in layers]
    with torch.no_grad():
        for m in layers:
            m.merge()
    try:
        yield
    finally:
        with torch.no_grad():
            for m, w in zip(layers, saved):
                m.unmerge()
                m.get_base_layer().weight.copy_(w)  # exact, no floating-point drift


def lean_forward(layer, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """peft's LoRA Linear forward, y = x W^T + b + s * (x A^T) B^T (LoRA, Hu et al. 2021, Eq. 3), computed as
    (x W^T + b).addmm_(s * (x A^T), B^T): the scaling s acts on the rank-r activations (b, r) instead of the
    output (b, out), and the sum happens inside the second matmul, so no output-sized multiply or add runs
    forward or backward. Equal to peft's result up to float rounding (tested). Anything but one active
    vanilla adapter on an `nn.Linear` with identity dropout (merged, disabled, several or mixed adapters,
    DoRA, extra arguments, mixed dtypes, autocast) goes through peft's own forward. x (..., in) -> (..., out)."""
    name = layer.active_adapters[0] if len(layer.active_adapters) == 1 else None
    base = layer.base_layer
    if (args or kwargs or name is None or layer.disable_adapters or layer.merged or name in layer.lora_variant
            or name not in layer.lora_A or type(base) is not torch.nn.Linear
            or not isinstance(layer.lora_dropout[name], torch.nn.Identity)
            or len({x.dtype, base.weight.dtype, layer.lora_A[name].weight.dtype, layer.lora_B[name].weight.dtype}) > 1
            or torch.is_autocast_enabled(x.device.type)):  # autocast: in-place addmm_ would meet cast outputs
        return type(layer).forward(layer, x, *args, **kwargs)
    a, b = layer.lora_A[name].weight, layer.lora_B[name].weight  # (r, in), (out, r)
    x2 = x.reshape(-1, x.shape[-1])  # (n, in)
    h = torch.nn.functional.linear(x2, a) * layer.scaling[name]  # (n, r)
    y = torch.nn.functional.linear(x2, base.weight, base.bias)  # (n, out); its backward does not need y
    y.addmm_(h, b.t())  # in place on a tensor that is no view: no copy forward or backward
    return y.view(*x.shape[:-1], y.shape[-1])


def _lora_linears(model) -> list:
    """peft's LoRA Linear layers of `model` ([] without peft)."""
    try:
        from peft.tuners.lora.layer import Linear as LoraLinear
    except ImportError:
        return []
    return [m for m in model.modules() if type(m) is LoraLinear]


def use_lean_forward(model) -> int:
    """Give every peft LoRA Linear of `model` `lean_forward`, and every outermost LoRA wrapper of stacked experts
    `lean_experts_forward` (instance attributes; parameters, state dict and saved adapters are unchanged).
    -> number of LoRA Linear layers changed (0 without peft or LoRA Linear layers)."""
    layers = _lora_linears(model)
    for m in layers:
        m.forward = functools.partial(lean_forward, m)
    for m in _outer_expert_wrappers(model):
        m.forward = functools.partial(lean_experts_forward, m)
    return len(layers)


def use_peft_forward(model) -> int:
    """Undo `use_lean_forward`: every peft LoRA Linear and experts wrapper of `model` back on peft's own forward (for
    comparisons). -> number of LoRA Linear layers."""
    layers = _lora_linears(model)
    for m in layers + _outer_expert_wrappers(model):
        m.__dict__.pop("forward", None)
    return len(layers)


def _expert_wrappers(model) -> list:
    """peft's LoRA wrappers of 3-D parameters (`target_parameters`: an MoE's stacked experts) of `model`."""
    try:
        from peft.tuners.lora.layer import ParamWrapper
    except ImportError:
        return []
    return [m for m in model.modules() if isinstance(m, ParamWrapper)]


def _foldable(m) -> bool:
    """One active adapter, not merged, not disabled, stacked experts in float32 / float64: peft then computes the
    parameter as W + s * lhs @ rhs with one `baddbmm` (its `_LoraFactorsProxy`) at every forward call."""
    names = m.active_adapters
    return (len(names) == 1 and names[0] in m.lora_A and not m.merged and not m.disable_adapters
            and m.num_experts > 1 and m.get_param().dtype in (torch.float32, torch.float64))


def _outer_expert_wrappers(model) -> list:
    """The experts wrappers that no other wraps: one per MoE layer, around the wrappers of its other parameters."""
    wrappers = _expert_wrappers(model)
    inner = {id(m.base_layer) for m in wrappers}
    return [m for m in wrappers if id(m) not in inner]


def folded(m, contiguous: bool = True) -> torch.Tensor:
    """The stacked experts parameter of a `_foldable` wrapper with its LoRA, W' = W + s * lhs @ rhs (E, out, in), as
    peft's `_LoraFactorsProxy` computes it, by one `baddbmm`. peft's factors are strided views of lora_A / lora_B
    (rhs's rows are E apart), which torch's CPU `baddbmm` multiplies one expert at a time, a copy and a matmul call
    each; `contiguous` (the default) copies them first, so the batch goes to one batched matmul: the same products and
    sums, equal to peft's W' within float rounding (bit for bit on the CPUs measured; tests/test_lora.py), its
    gradient flowing to lora_A and lora_B through the copies. contiguous=False: peft's own call, bit for bit."""
    lhs, rhs, s = m.get_delta_factors(m.active_adapters[0])
    if contiguous:
        lhs, rhs = lhs.contiguous(), rhs.contiguous()
    w = m.get_param()
    with torch.autocast(device_type=w.device.type, enabled=False):
        return torch.baddbmm(w, lhs, rhs, alpha=s)


def lean_experts_forward(wrapper, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """peft's forward of an MoE layer's stacked experts under LoRA (`ParamWrapper`s nested, one per targeted
    parameter), without its per-call parametrization: peft registers a parametrization on the experts module at every
    call (torch evaluates it once to check it, so the fold W' = W + s * lhs @ rhs runs twice), reads it, and removes
    it. Here each wrapped parameter is `folded` once and the experts module runs with the folded tensors in the
    parameters' places (`torch.func.functional_call`): W' as peft's, so the same output and gradients within float
    rounding (tests/test_lora.py). Anything not `_foldable` (disabled, merged or several adapters, other dtypes), extra
    arguments or autocast goes through peft's own forward. x (N, H) and the experts' arguments -> (N, H)."""
    chain = [wrapper]
    while isinstance(chain[-1].base_layer, type(wrapper)):
        chain.append(chain[-1].base_layer)
    if kwargs or torch.is_autocast_enabled(x.device.type) or not all(_foldable(m) for m in chain):
        return type(wrapper).forward(wrapper, x, *args, **kwargs)
    weights = {m.parameter_name: folded(m) for m in chain}
    return torch.func.functional_call(chain[-1].base_layer, weights, (x, *args))


@contextlib.contextmanager
def folded_experts(model):
    """No-grad passes only: the LoRA of an MoE's stacked experts folded into their weights once for the block, by
    peft's own arithmetic, instead of at every forward call.

    peft's `ParamWrapper` recomputes W' = baddbmm(W, lhs, rhs, alpha=s) (E, out, in) on each call (and
    `lean_experts_forward` once per call); a pass over a rollout in chunks of 16 rows calls it once per chunk and
    layer. Here W' is computed by peft's call once (`folded(contiguous=False)`), put in W's place, and the wrappers
    marked merged so that peft reads it as it is; on exit the original tensors come back (no subtraction: exact).
    Same W' bit for bit, so the same pass (tests/test_lora.py). Inside the block the experts' LoRA gets no gradient:
    use it under no_grad / inference_mode only; wrappers that are not `_foldable` (disabled adapters: the reference
    policy) are left alone."""
    layers = [m for m in _expert_wrappers(model) if _foldable(m)]
    saved = []
    try:
        with torch.no_grad():
            for m in layers:
                w = m.get_param()
                saved.append((m, w, w.data))
                w.data = folded(m, contiguous=False)  # (E, out, in), by peft's `_LoraFactorsProxy` call
                m.merged_adapters = list(m.active_adapters)  # peft's forward then calls the base layer as it is
        yield
    finally:
        for m, w, data in saved:
            w.data = data
            m.merged_adapters = []
