"""gpolib/qwen_ops.py: Qwen3's RMSNorm and RoPE with the backward written out equal transformers' formulas
(numerical gradient checks in float64, transformers' own code as the reference), act only inside `fused()` on the
calling thread, and are what the trainer's log-prob passes use."""
import threading

import pytest
import torch
from transformers.models.qwen3 import modeling_qwen3 as mq
from transformers.models.qwen3_moe import modeling_qwen3_moe as mqm

from gpolib import qwen_ops
from gpolib.models import EMBEDDED, load_policy

qwen_ops.install()  # the tests read transformers' own functions through the wrappers


def _rope(b=2, L=7, d=32, dtype=torch.float64):
    """cos, sin (b, L, d) of Qwen3's RoPE (theta 1e6) at positions 0..L-1, computed in float64: angle p * theta^(-2i/d)
    for i < d/2, the halves repeated (transformers' layout)."""
    inv = 1e6 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    ang = torch.arange(L, dtype=torch.float64)[:, None] * inv  # (L, d/2)
    emb = torch.cat([ang, ang], dim=-1).expand(b, L, d)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def test_rmsnorm_function_passes_a_numerical_gradient_check_and_equals_transformers():
    """float64: the Function against the numerical gradient and against RMSNorm's formula by autograd; float32:
    against transformers' own forward (which computes the norm in float32 for any input dtype)."""
    torch.manual_seed(0)
    x = torch.randn(3, 5, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: qwen_ops.RMSNormFn.apply(a, b, 1e-6), (x, w))
    ref = w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    ours = qwen_ops.RMSNormFn.apply(x, w, 1e-6)
    g = torch.randn_like(ref)
    assert torch.allclose(ref, ours, rtol=0, atol=1e-14)
    for a, b in zip(torch.autograd.grad(ref, (x, w), g), torch.autograd.grad(ours, (x, w), g)):
        assert torch.allclose(a, b, rtol=0, atol=1e-13)
    norm = mq.Qwen3RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(w)
    x32 = x.detach().float().requires_grad_(True)
    ref32 = norm.forward.gpolib_wrapped(norm, x32)  # transformers' own forward
    with qwen_ops.fused():
        ours32 = norm(x32)
    assert ours32.grad_fn.name().startswith("RMSNormFn") and torch.equal(ours32, ref32)
    g32 = g.float()
    for a, b in zip(torch.autograd.grad(ref32, (x32, norm.weight), g32),
                    torch.autograd.grad(ours32, (x32, norm.weight), g32)):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def test_rotary_function_passes_a_numerical_gradient_check_and_equals_transformers():
    torch.manual_seed(0)
    cos, sin = _rope()
    q = torch.randn(2, 4, 7, 32, dtype=torch.float64, requires_grad=True)  # (b, heads, L, d)
    k = torch.randn(2, 2, 7, 32, dtype=torch.float64, requires_grad=True)
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)
    assert torch.autograd.gradcheck(lambda a: qwen_ops.RotaryFn.apply(a, c, s), (q,))
    ref = mq.apply_rotary_pos_emb.gpolib_wrapped(q, k, cos, sin)
    with qwen_ops.fused():
        ours = mq.apply_rotary_pos_emb(q, k, cos, sin)
    for a, b in zip(ref, ours):
        assert torch.allclose(a, b, rtol=0, atol=1e-14)
    g = [torch.randn_like(t) for t in ref]
    for a, b in zip(torch.autograd.grad(ref, (q, k), g), torch.autograd.grad(ours, (q, k), g)):
        assert torch.allclose(a, b, rtol=0, atol=1e-14)
    # the rotation keeps each (x_i, x_{i+d/2}) pair's norm: |y|^2 = |x|^2 per position and head
    assert torch.allclose(ours[0].pow(2).sum(-1), q.pow(2).sum(-1), rtol=1e-12)


def test_outside_a_fused_block_and_on_other_threads_transformers_code_runs(monkeypatch):
    calls = []
    monkeypatch.setattr(qwen_ops.RMSNormFn, "apply", lambda *a: calls.append("norm") or a[0])
    monkeypatch.setattr(qwen_ops.RotaryFn, "apply", lambda *a: calls.append("rope") or a[0])
    norm, x = mq.Qwen3RMSNorm(8), torch.randn(2, 8)
    cos, sin = _rope(dtype=torch.float32)
    q = torch.randn(2, 4, 7, 32)
    norm(x), mq.apply_rotary_pos_emb(q, q, cos, sin)
    assert calls == []
    seen = []
    with qwen_ops.fused():
        t = threading.Thread(target=lambda: seen.append(qwen_ops.active()) or norm(x))
        t.start(), t.join()
        assert seen == [False] and calls == []  # the block is the calling thread's only
        norm(x), mq.apply_rotary_pos_emb(q, q, cos, sin), mqm.apply_rotary_pos_emb(q, q, cos, sin)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # a bf16 engine keeps transformers' path
            mq.apply_rotary_pos_emb(q, q, cos, sin)
    assert calls == ["norm", "rope", "rope", "rope", "rope"]
    assert not qwen_ops.active()


def test_trainer_log_probs_use_them_and_match_transformers_path():
    """The embedded policy (LoRA B drawn non-zero): log-probs and LoRA gradients of a padded batch with the
    written-out ops equal transformers' path to 1e-10 in float64 (RoPE's Function; the norms stay transformers',
    which compute in float32) and to float rounding in float32 (both)."""
    from gpolib.logprobs import completion_logps

    torch.manual_seed(0)
    model, tok = load_policy(EMBEDDED["dense"], lora_r=8, dtype="float64")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    params = [p for p in model.parameters() if p.requires_grad]
    p_ids = torch.randint(3, 90, (3, 6))
    p_mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1] * 6, [0, 1, 1, 1, 1, 1]])
    c_ids = torch.randint(3, 90, (3, 9))
    c_mask = torch.tensor([[1] * 9, [1] * 5 + [0] * 4, [1] * 7 + [0] * 2])

    def run(on, dtype):
        model.to(dtype)
        with qwen_ops.fused(on):
            lp = completion_logps(model, p_ids, p_mask, c_ids, c_mask, temperature=0.7)
        grads = torch.autograd.grad(lp.sum(), params)
        return lp.detach(), torch.cat([g.flatten() for g in grads])

    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 2e-5)):
        (lp0, g0), (lp1, g1) = run(False, dtype), run(True, dtype)
        assert (lp1 - lp0).abs().max() <= tol * max(1.0, lp0.abs().max())
        assert (g1 - g0).abs().max() <= tol * g0.abs().max()


def test_policy_logps_run_inside_a_fused_block(monkeypatch):
    from gpolib import policy as P

    seen = []
    monkeypatch.setattr(P, "completion_logps", lambda *a, **k: seen.append(qwen_ops.active()) or "lp")
    pol = P.Policy(model=None, params=[], opt=None, sched=None, device="cpu", temperature=1.0)

    class Ro:
        prompt_ids = prompt_mask = completion_ids = completion_mask = torch.zeros(2, 3)
    assert pol.logps(Ro()) == "lp" and seen == [True] and not qwen_ops.active()


@pytest.mark.parametrize("shape", [(4, 16), (2, 3, 4, 32)])
def test_rmsnorm_backward_without_input_grad_gives_the_weight_grad(shape):
    torch.manual_seed(1)
    x = torch.randn(*shape, dtype=torch.float64)
    w = torch.randn(shape[-1], dtype=torch.float64, requires_grad=True)
    ref = w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    g = torch.randn_like(ref)
    (dw_ref,) = torch.autograd.grad(ref, w, g)
    (dw,) = torch.autograd.grad(qwen_ops.RMSNormFn.apply(x, w, 1e-6), w, g)
    assert torch.allclose(dw, dw_ref, rtol=1e-12, atol=0)


def test_experts_forward_equals_the_formula_on_a_hand_built_router():
    """3 tokens, 3 experts, top-2, H = I = 4 (torch's grouped matmul wants rows of 16 bytes): out_n = sum_j w_nj
    down_e (silu(G_e x_n) * (U_e x_n)), each term written out; token 0 uses experts 1 and 0, tokens 1 and 2 both
    use experts 2 and 1, so expert 0 gets one slot, expert 1 three, expert 2 two."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-2, 3, (3, 4), generator=g).float()  # (N, H)
    idx = torch.tensor([[1, 0], [2, 1], [2, 1]])  # (N, k)
    w = torch.tensor([[0.75, 0.25], [0.5, 0.5], [0.9, 0.1]])  # (N, k)
    gate_up = torch.randint(-2, 3, (3, 8, 4), generator=g).float() / 4  # (E, 2I, H): rows 0-3 gate, 4-7 up
    down = torch.randint(-2, 3, (3, 4, 4), generator=g).float() / 4  # (E, H, I)
    silu = torch.nn.functional.silu
    want = torch.zeros(3, 4)
    for n in range(3):
        for j in range(2):
            e = idx[n, j]
            h = silu(gate_up[e, :4] @ x[n]) * (gate_up[e, 4:] @ x[n])  # (I,)
            want[n] += w[n, j] * (down[e] @ h)
    got = qwen_ops.experts_forward(x, idx, w, gate_up, down, silu)
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n_tokens", [1, 37, 400])
def test_experts_forward_equals_transformers_experts_with_gradients(n_tokens):
    """On a fine-grained block (64 experts, top-8, some experts with no token at small N): output and the gradients of
    input, routing weights and both expert weights equal transformers' Qwen3MoeExperts (eager loop) to float32
    rounding; the wrapped forward takes this path inside `fused()` only."""
    from transformers import Qwen3MoeConfig

    torch.manual_seed(n_tokens)
    cfg = Qwen3MoeConfig(hidden_size=32, moe_intermediate_size=8, num_experts=64, num_experts_per_tok=8)
    cfg._experts_implementation = "eager"
    experts = mqm.Qwen3MoeExperts(cfg)
    for p in experts.parameters():
        torch.nn.init.normal_(p, std=0.2)
    x = torch.randn(n_tokens, 32, requires_grad=True)
    logits = torch.randn(n_tokens, 64)
    top, idx = torch.softmax(logits, -1).topk(8, dim=-1)
    w = (top / top.sum(-1, keepdim=True)).requires_grad_()
    probe = torch.randn(n_tokens, 32)
    calls = []

    def run(on):
        with qwen_ops.fused(on):
            out = experts(x, idx, w)
        grads = torch.autograd.grad((out * probe).sum(), [x, w, experts.gate_up_proj, experts.down_proj])
        return out.detach(), grads

    real = qwen_ops.experts_forward
    try:
        qwen_ops.experts_forward = lambda *a: calls.append(1) or real(*a)
        (o0, g0), (o1, g1) = run(False), run(True)
    finally:
        qwen_ops.experts_forward = real
    assert calls == [1]
    assert (o1 - o0).abs().max() <= 1e-6 * o0.abs().max()
    for a, b in zip(g0, g1):
        assert (a - b).abs().max() <= 2e-6 * a.abs().max()
