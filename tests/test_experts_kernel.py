"""gpolib.engine.experts_kernel: an MoE layer's routed experts in one C++ call, forward only (issue 50)."""
import pytest
import torch
import torch.nn.functional as F

from gpolib.engine import experts_kernel as K
from gpolib.qwen_ops import experts_forward


def _experts(N: int, H: int, E: int, I: int, k: int, seed: int = 0) -> tuple:
    """float64 tokens, top-k routing (renormalised weights), stacked experts in transformers' layout."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, H, generator=g, dtype=torch.float64)
    w, idx = torch.randn(N, E, generator=g).softmax(-1).topk(k, dim=-1)  # (N, k) each
    w = (w / w.sum(-1, keepdim=True)).double()
    gate_up = torch.randn(E, 2 * I, H, generator=g, dtype=torch.float64) * 0.1  # (E, 2I, H)
    down = torch.randn(E, H, I, generator=g, dtype=torch.float64) * 0.1  # (E, H, I)
    return x, idx, w, gate_up, down


def _by_hand(x, idx, w, gate_up, down) -> torch.Tensor:
    """out_n = sum_j w_nj down_e(silu(gate_e x_n) * up_e x_n), e = idx[n, j], one token and slot at a time."""
    out, I = torch.zeros_like(x), gate_up.shape[1] // 2
    for n in range(x.shape[0]):
        for j in range(idx.shape[1]):
            h = gate_up[idx[n, j]] @ x[n]  # (2I,)
            out[n] += w[n, j] * (down[idx[n, j]] @ (F.silu(h[:I]) * h[I:]))
    return out


@pytest.mark.parametrize("N,H,E,I,k", [(300, 128, 64, 16, 8), (37, 72, 8, 100, 2), (5, 64, 4, 8, 4)])
def test_kernel_is_the_experts_equation_to_float32_rounding(N, H, E, I, k):
    """Against the equation in float64, token by token: the kernel's float32 error is that of torch's float32 path
    (`qwen_ops.experts_forward`, grouped matmuls), for the fine MoE's shape, widths off the kernel's panels (H = 72,
    2I = 200) and few rows."""
    x, idx, w, gu, dn = _experts(N, H, E, I, k)
    exact = _by_hand(x, idx, w, gu, dn)
    f32 = [t.float() for t in (x, w, gu, dn)]
    got = K.packed_swiglu(f32[0], idx, f32[1], K.pack(f32[2], f32[3]))
    torch_err = (experts_forward(f32[0], idx, f32[1], f32[2], f32[3], F.silu).double() - exact).abs().max()
    err = (got.double() - exact).abs().max()
    assert got.dtype == torch.float32 and got.shape == (N, H)
    assert err <= 2 * torch_err + 1e-7 and err < 1e-5 * exact.abs().max()


def test_kernel_adds_into_out_and_refuses_bad_input():
    x, idx, w, gu, dn = (t.float() if t.is_floating_point() else t for t in _experts(20, 128, 8, 16, 2))
    packed = K.pack(gu, dn)
    fresh = K.packed_swiglu(x, idx, w, packed)
    base = torch.randn(20, 128)
    added = K.packed_swiglu(x, idx, w, packed, out=base.clone())
    assert torch.allclose(added, base + fresh, atol=1e-6)
    with pytest.raises(ValueError, match="outside"):
        K.packed_swiglu(x, torch.where(idx == 0, 8, idx), w, packed)
    with pytest.raises(ValueError, match="do not match"):
        K.packed_swiglu(x[:, :64], idx, w, packed)


def test_no_kernel_where_a_gradient_is_asked_for():
    x, idx, w, gu, dn = (t.float() if t.is_floating_point() else t for t in _experts(6, 64, 4, 8, 2))
    assert K.grouped_swiglu(x.requires_grad_(), idx, w, gu, dn) is None
    assert K.grouped_swiglu(x.double(), idx, w.double(), gu.double(), dn.double()) is None  # float32 only


def test_policy_uses_the_no_grad_kernel_in_no_grad_passes_only(monkeypatch):
    """`Policy.logps` hands the forward kernel to the fine MoE's experts in a no-grad pass (pi_old, the routing passes)
    and not in the training forward (which has its own, `train_experts`, off here); the two passes' log-probs agree
    to float32 rounding."""
    from gpolib import policy as P
    from gpolib.models import EMBEDDED, load_policy
    from gpolib.rollout import Rollout

    model, _ = load_policy(EMBEDDED["moe-fine"], lora_r=16, lora_alpha=32, train_router=True)
    calls = []
    # the kernel whatever this machine's measured choice
    monkeypatch.setattr(P, "no_grad_experts", lambda: lambda *a: calls.append(1) or K.grouped_swiglu(*a))
    pol = P.Policy(model=model, params=[], opt=None, sched=None, device="cpu", temperature=1.0,
                   train_experts_kernel=False)
    g = torch.Generator().manual_seed(0)
    ro = Rollout.__new__(Rollout)
    ro.prompt_ids, ro.prompt_mask = torch.randint(3, 90, (4, 6), generator=g), torch.ones(4, 6, dtype=torch.long)
    ro.completion_ids, ro.completion_mask = torch.randint(3, 90, (4, 9), generator=g), torch.ones(4, 9, dtype=torch.long)
    with torch.inference_mode():
        fast = pol.logps(ro)
    assert len(calls) == 8  # one per MoE layer
    slow = pol.logps(ro)
    assert len(calls) == 8 and slow.requires_grad
    assert (fast - slow.detach()).abs().max() < 1e-5


def _by_slot(x, idx, w, gate_up, down) -> torch.Tensor:
    """The experts' equation (`_by_hand`) one slot at a time over all tokens, differentiable in any dtype."""
    out, I = torch.zeros_like(x), gate_up.shape[1] // 2
    for j in range(idx.shape[1]):
        h = torch.bmm(gate_up[idx[:, j]], x[:, :, None])[..., 0]  # (N, 2I)
        a = F.silu(h[:, :I]) * h[:, I:] * w[:, j:j + 1]  # (N, I)
        out = out + torch.bmm(down[idx[:, j]], a[:, :, None])[..., 0]
    return out


def _grads(fn, ts: list, idx, dy) -> list:
    """fn's output and its gradients w.r.t. x, w, gate_up, down for the output gradient dy."""
    ts = [t.detach().clone().requires_grad_() for t in ts]
    y = fn(ts[0], idx, ts[1], ts[2], ts[3])
    y.backward(dy.to(y.dtype))
    return [y.detach()] + [t.grad for t in ts]


@pytest.mark.parametrize("N,H,E,I,k", [(300, 128, 64, 16, 8), (37, 64, 8, 100, 2), (5, 32, 4, 8, 4),
                                       (40, 64, 4, 48, 2)])  # I = 16, 48: down read as it lies; 100, 8: packed
def test_backward_kernel_is_the_equations_gradient_to_float32_rounding(N, H, E, I, k):
    """`trained_swiglu` (forward and backward kernels) against autograd of the equation in float64: the output and
    the gradients of the tokens, the routing weights and both stacked weights are within twice the float32 error of
    torch's path (`qwen_ops.experts_forward`, grouped matmuls) and 1e-5 of their scale; experts without a token get
    zero gradients (E = 64, N k = 2400: some, at N = 5: most)."""
    x, idx, w, gu, dn = _experts(N, H, E, I, k)
    dy = torch.randn(N, H, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    exact = _grads(_by_slot, [x, w, gu, dn], idx, dy)
    f32 = [t.float() for t in (x, w, gu, dn)]
    torch_path = _grads(lambda *a: experts_forward(*a, F.silu), f32, idx, dy)
    kernel = _grads(K.trained_swiglu, f32, idx, dy)
    for name, want, ref, got in zip(("out", "dx", "dw", "dgate_up", "ddown"), exact, torch_path, kernel):
        err, torch_err = (got.double() - want).abs().max(), (ref.double() - want).abs().max()
        assert got.dtype == torch.float32 and got.shape == want.shape, name
        assert err <= 2 * torch_err + 1e-7 and err < 1e-5 * want.abs().max(), name
    unused = torch.ones(E, dtype=torch.bool)
    unused[idx.unique()] = False
    assert torch.equal(kernel[3][unused], torch.zeros_like(kernel[3][unused]))
    assert torch.equal(kernel[4][unused], torch.zeros_like(kernel[4][unused]))


@pytest.mark.parametrize("N,H,E,I,k", [(300, 128, 64, 16, 8), (37, 64, 8, 100, 2)])
def test_saved_gate_up_product_is_the_products_and_gives_the_same_backward_bit_for_bit(N, H, E, I, k):
    """The forward's g_save holds [gate_e x_n | up_e x_n] of every (token, slot) pair in slot order (against a
    float64 product by hand, to float32 rounding), its output is the one without saving, bit for bit, and the
    backward reading it gives every gradient bit for bit as the backward that multiplies again."""
    x, idx, w, gu, dn = (t.float() if t.is_floating_point() else t for t in _experts(N, H, E, I, k))
    packed = K.pack(gu, dn)
    g = torch.full((N * k, 2 * I), float("nan"))
    out = K.packed_swiglu(x, idx, w, packed, g_save=g)
    assert torch.equal(out, K.packed_swiglu(x, idx, w, packed))
    by_hand = torch.einsum("nkoh,nh->nko", gu.double()[idx], x.double()).reshape(N * k, 2 * I)  # (N k, 2I)
    assert (g.double() - by_hand).abs().max() <= 1e-5 * by_hand.abs().max()
    dy = torch.randn(N, H, generator=torch.Generator().manual_seed(2))
    again = K.swiglu_backward(x, dy, idx, w, gu, dn, packed)
    saved = K.swiglu_backward(x, dy, idx, w, gu, dn, packed, g_saved=g)
    assert all(torch.equal(a, b) for a, b in zip(again, saved))
    with pytest.raises(ValueError, match="saved gate / up"):
        K.swiglu_backward(x, dy, idx, w, gu, dn, packed, g_saved=g[1:])


@pytest.mark.parametrize("shape", [(64, 128, 32), (64, 16, 128), (64, 128, 16), (3, 5, 40)])
@pytest.mark.parametrize("strided", [False, True])
def test_panels_hold_each_block_of_columns_zero_padded(shape, strided):
    """`panels`: panel p of expert e is columns [p NR, (p + 1) NR) of b[e] (K, NR), zero past n; widths that fill
    their panels (32, 128) and that do not (16, 40), contiguous and transposed inputs."""
    from gpolib.engine.panels import NR, padded

    E, K_, n = shape
    b = torch.randn(E, n, K_).transpose(1, 2) if strided else torch.randn(E, K_, n)
    got = K.panels(b)
    assert got.shape == (E, padded(n) // NR, K_, NR) and got.is_contiguous()
    for p in range(padded(n) // NR):
        cols = b[:, :, p * NR:(p + 1) * NR]
        assert torch.equal(got[:, p, :, :cols.shape[2]], cols)
        assert not got[:, p, :, cols.shape[2]:].any()


def test_trained_kernel_serves_float32_panels_only_and_refuses_bad_input():
    x, idx, w, gu, dn = _experts(6, 48, 4, 8, 2)  # H = 48: not a multiple of the panel width
    assert K.trained_swiglu(x.float(), idx, w.float(), gu.float(), dn.float()) is None
    x, idx, w, gu, dn = _experts(6, 64, 4, 8, 2)
    assert K.trained_swiglu(x, idx, w, gu, dn) is None  # float64
    f = [t.float() for t in (x, w, gu, dn)]
    with pytest.raises(ValueError, match="outside"):
        K.swiglu_backward(f[0], f[0], torch.where(idx == 0, 4, idx), f[1], f[2], f[3])
    with pytest.raises(ValueError, match="do not match"):
        K.swiglu_backward(f[0], f[0][:5], idx, f[1], f[2], f[3])


def test_training_forward_by_the_kernels_equals_transformers_experts_with_lora_and_router_gradients(monkeypatch):
    """The fine MoE (64 experts, top-8) with LoRA on its experts (peft's ParamWrapper) and a trained router: the
    training forward's log-probs and the gradients of every trainable parameter (the experts' and attention's LoRA
    factors, the router weights) with the kernels (`train_experts`, called once per MoE layer) equal those of
    transformers' own experts (qwen_ops.EXPERTS off) to float32 rounding."""
    from gpolib import policy as P
    from gpolib import qwen_ops
    from gpolib.models import EMBEDDED, load_policy
    from gpolib.rollout import Rollout

    model, _ = load_policy(EMBEDDED["moe-fine"], lora_r=16, lora_alpha=32, train_router=True)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:  # peft starts B at 0: give every LoRA factor a gradient
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert any("experts" in n and "lora" in n for n, _ in named) and any("gate" in n for n, _ in named)
    calls = []
    monkeypatch.setattr(P, "train_experts", lambda: lambda *a: calls.append(1) or K.trained_swiglu(*a))
    pol = P.Policy(model=model, params=[p for _, p in named], opt=None, sched=None, device="cpu", temperature=0.7)
    ro = Rollout.__new__(Rollout)
    ro.prompt_ids = torch.randint(3, 90, (4, 6), generator=g)
    ro.prompt_mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1] * 6, [0, 1, 1, 1, 1, 1], [1] * 6])
    ro.completion_ids = torch.randint(3, 90, (4, 9), generator=g)
    ro.completion_mask = torch.tensor([[1] * 9, [1] * 5 + [0] * 4, [1] * 7 + [0] * 2, [1] * 3 + [0] * 6])
    probe = torch.randn(4, 9, generator=g)

    def run(kernel: bool):
        monkeypatch.setattr(qwen_ops, "EXPERTS", kernel)  # off: transformers' Qwen3MoeExperts.forward
        lp = pol.logps(ro)
        return lp.detach(), torch.autograd.grad((lp * probe).sum(), pol.params)

    (lp0, g0), (lp1, g1) = run(False), run(True)
    assert len(calls) == 8  # one per MoE layer, in the kernel run only
    assert (lp1 - lp0).abs().max() < 2e-5 * max(1.0, lp0.abs().max())
    for (name, _), a, b in zip(named, g0, g1):
        assert a.abs().max() > 0, name
        assert (b - a).abs().max() <= 1e-4 * a.abs().max(), name
