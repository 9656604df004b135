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


def test_policy_uses_the_kernel_in_no_grad_passes_only(monkeypatch):
    """`Policy.logps` hands the kernel to the fine MoE's experts in a no-grad pass (pi_old, the routing passes) and
    not in the training forward; the two passes' log-probs agree to float32 rounding."""
    from gpolib import policy as P
    from gpolib.models import EMBEDDED, load_policy
    from gpolib.rollout import Rollout

    model, _ = load_policy(EMBEDDED["moe-fine"], lora_r=16, lora_alpha=32, train_router=True)
    calls = []
    # the kernel whatever this machine's measured choice
    monkeypatch.setattr(P, "no_grad_experts", lambda: lambda *a: calls.append(1) or K.grouped_swiglu(*a))
    pol = P.Policy(model=model, params=[], opt=None, sched=None, device="cpu", temperature=1.0)
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
