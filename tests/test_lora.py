"""gpolib.lora.lean_forward: the same LoRA layer as peft's forward, without output-sized elementwise work."""
import pytest
import torch
from peft.tuners.lora.layer import Linear as LoraLinear
from torch.utils._python_dispatch import TorchDispatchMode

from gpolib.lora import merged_lora, use_lean_forward, use_peft_forward
from gpolib.models import EMBEDDED, load_policy


def _trained_adapter(model, seed: int = 0) -> None:
    """LoRA B ~ N(0, 0.02): at B = 0 (a fresh adapter) the LoRA term is 0 and any forward agrees."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)


def _logits_and_grads(model, ids) -> tuple:
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids, use_cache=False).logits  # (B, L, V)
    (logits.square().mean()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return logits.detach(), grads


@pytest.fixture(scope="module", params=["dense", "moe"])
def policy(request):
    model, tok = load_policy(EMBEDDED[request.param], lora_r=16, lora_alpha=32)
    _trained_adapter(model)
    ids = tok(["3*47+5=", "12-4*9+100="], return_tensors="pt", padding=True)["input_ids"]  # (2, L)
    return request.param, model, ids


def test_load_policy_gives_every_lora_linear_the_lean_forward(policy):
    arch, model, _ = policy
    layers = [m for m in model.modules() if type(m) is LoraLinear]
    # dense: q, k, v, o, gate, up, down in 4 layers; the MoE's experts are LoRA parameters, not Linear layers
    assert len(layers) == {"dense": 28, "moe": 16}[arch]
    assert all(m.forward.func.__name__ == "lean_forward" for m in layers)


def test_lean_forward_equals_peft_value_and_gradient(policy):
    _, model, ids = policy
    lean = _logits_and_grads(model, ids)
    assert use_peft_forward(model) == len([m for m in model.modules() if type(m) is LoraLinear])
    try:
        peft = _logits_and_grads(model, ids)
    finally:
        use_lean_forward(model)
    assert (lean[0] - peft[0]).abs().max() <= 1e-5
    for name, g in peft[1].items():
        assert torch.allclose(lean[1][name], g, rtol=1e-4, atol=1e-6 * g.abs().max()), name
    assert max(g.abs().max() for n, g in peft[1].items() if "lora_A" in n) > 0  # the adapter was exercised


def test_disabled_and_merged_adapters_go_through_peft(policy):
    arch, model, ids = policy
    base, _ = load_policy(EMBEDDED[arch], lora_r=0)
    with torch.no_grad():
        with model.disable_adapter():
            off = model(input_ids=ids, use_cache=False).logits
        want_off = base(input_ids=ids, use_cache=False).logits
        on = model(input_ids=ids, use_cache=False).logits
        with merged_lora(model):
            merged = model(input_ids=ids, use_cache=False).logits
    assert torch.equal(off, want_off)  # the base alone, bit for bit
    # LoRA folded in (float rounding of W + s B A only), not added twice
    assert (merged - on).abs().max() <= 1e-5 * on.abs().max() and (on - off).abs().max() > 1e-3


class _Shapes(TorchDispatchMode):
    """Records (op, output shape) of every aten op run under it."""

    def __init__(self):
        super().__init__()
        self.ops: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor):
            self.ops.append((func.overloadpacket.__name__, tuple(out.shape)))
        return out


def _elementwise_at_output_size(layer, x) -> list:
    """mul/add ops (forward and backward) whose result has the layer's output size (n, out)."""
    out_numel = x.shape[0] * x.shape[1] * layer.base_layer.out_features
    with _Shapes() as rec:
        layer(x).sum().backward()
    return [op for op, shape in rec.ops if op in ("mul", "add", "mul_", "add_") and torch.Size(shape).numel() == out_numel]


def test_lean_forward_does_no_output_sized_multiply_or_add():
    model, _ = load_policy(EMBEDDED["dense"], lora_r=16, lora_alpha=32)
    layer = model.base_model.model.model.layers[0].mlp.up_proj  # 128 -> 344
    x = torch.randn(3, 5, 128, requires_grad=True)
    assert _elementwise_at_output_size(layer, x) == []
    use_peft_forward(model)  # peft's forward: result + lora_B(lora_A(x)) * scaling
    assert len(_elementwise_at_output_size(layer, x)) >= 2


def _routed_logps(model, ids, fold: bool) -> tuple:
    """No-grad logits (B, L, V) and each MoE layer's experts, with the experts' LoRA folded for the pass or not."""
    from gpolib import moe
    from gpolib.lora import folded_experts

    store: list = []
    with torch.inference_mode(), moe.record_routing(model, store), (folded_experts(model) if fold else _null()):
        logits = model(input_ids=ids, use_cache=False).logits
    return logits, store


def _null():
    import contextlib
    return contextlib.nullcontext()


def test_folded_experts_give_peft_pass_bit_for_bit_and_restore_weights():
    """The fine MoE's stacked experts with a trained LoRA: a no-grad pass with the LoRA folded once (`folded_experts`)
    gives peft's logits and routing bit for bit; the weights and peft's state come back; disabled adapters (the
    reference policy) are not folded."""
    from peft.tuners.lora.layer import ParamWrapper

    model, tok = load_policy(EMBEDDED["moe-fine"], lora_r=16, lora_alpha=32, train_router=True)
    _trained_adapter(model, seed=3)
    ids = tok(["3*47+5=", "12-4*9+100="], return_tensors="pt", padding=True)["input_ids"]  # (2, L)
    wrappers = [m for m in model.modules() if isinstance(m, ParamWrapper)]
    assert len(wrappers) == 16  # 8 layers x (gate_up, down)
    before = [(m.get_param(), m.get_param().data.clone()) for m in wrappers]
    ref_logits, ref_routes = _routed_logps(model, ids, fold=False)
    logits, routes = _routed_logps(model, ids, fold=True)
    assert torch.equal(logits, ref_logits)
    assert len(routes) == 8 and all(torch.equal(a, b) for a, b in zip(routes, ref_routes))
    assert all(m.get_param() is p and torch.equal(p.data, d) and not m.merged for m, (p, d) in zip(wrappers, before))
    plain = model(input_ids=ids, use_cache=False).logits.detach()  # adapters on again, peft's own path
    assert torch.equal(plain, ref_logits)
    with model.disable_adapter():
        from gpolib.lora import folded_experts
        with torch.no_grad(), folded_experts(model):
            assert not any(m.merged for m in wrappers)
            base = model(input_ids=ids, use_cache=False).logits
    assert (base - ref_logits).abs().max() > 1e-3  # the adapter matters here, so the equalities above say something


def test_moe_experts_get_the_lean_experts_forward_equal_to_peft_value_and_gradient():
    """The fine MoE with trained expert LoRA and router: one `lean_experts_forward` per layer (on the outer wrapper,
    around the other parameter's); logits and every gradient as through peft's parametrized forward, within float
    rounding; the fold itself as peft's `_LoraFactorsProxy`."""
    from peft.tuners.lora.layer import ParamWrapper, _LoraFactorsProxy

    from gpolib.lora import folded

    model, tok = load_policy(EMBEDDED["moe-fine"], lora_r=16, lora_alpha=32, train_router=True)
    _trained_adapter(model, seed=5)
    ids = tok(["3*47+5=", "12-4*9+100="], return_tensors="pt", padding=True)["input_ids"]  # (2, L)
    wrappers = [m for m in model.modules() if isinstance(m, ParamWrapper)]
    lean = [m for m in wrappers if "forward" in m.__dict__]
    assert len(wrappers) == 16 and len(lean) == 8
    assert all(m.forward.func.__name__ == "lean_experts_forward" and isinstance(m.base_layer, ParamWrapper)
               for m in lean)
    for m in wrappers:
        want = _LoraFactorsProxy(*m.get_delta_factors("default"))(m.get_param())
        assert (folded(m) - want).abs().max() <= 1e-6 * want.abs().max()
    ours = _logits_and_grads(model, ids)
    use_peft_forward(model)
    try:
        peft = _logits_and_grads(model, ids)
    finally:
        use_lean_forward(model)
    assert (ours[0] - peft[0]).abs().max() <= 1e-6 * peft[0].abs().max()
    assert ours[1].keys() == peft[1].keys()
    for name, g in peft[1].items():
        assert (ours[1][name] - g).abs().max() <= 1e-5 * g.abs().max(), name
    expert_grads = [g for n, g in peft[1].items() if "experts" in n and "lora_A" in n]
    assert len(expert_grads) == 16 and min(g.abs().max() for g in expert_grads) > 0  # the experts' LoRA trained


def test_lean_experts_forward_leaves_disabled_adapters_to_peft():
    """Adapters disabled (the reference policy): the experts run on their base weights, as the model without LoRA."""
    model, tok = load_policy(EMBEDDED["moe-fine"], lora_r=16, lora_alpha=32)
    _trained_adapter(model, seed=6)
    base, _ = load_policy(EMBEDDED["moe-fine"], lora_r=0)
    ids = tok(["7*8-3="], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        with model.disable_adapter():
            off = model(input_ids=ids, use_cache=False).logits
        on = model(input_ids=ids, use_cache=False).logits
        want = base(input_ids=ids, use_cache=False).logits
    assert torch.equal(off, want) and (on - off).abs().max() > 1e-3
