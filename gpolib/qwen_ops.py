"""Qwen3's RMSNorm and rotary position embedding with their backward written out, and Qwen3-MoE's experts with fewer
passes over memory, for the trainer's passes.

transformers computes both as chains of small tensor ops, and autograd keeps and walks one node per op: RMSNorm
(Zhang & Sennrich 2019, Eq. 4: y = w * x / sqrt(mean(x^2) + eps)) is 4 passes over memory forward and ~8 back;
RoPE (Su et al. 2021, Eq. 34: y = x cos + rotate_half(x) sin) is 5 forward (a negation and a concatenation among
them) and as many back. `RMSNormFn` and `RotaryFn` compute the same formulas as autograd Functions whose backward
is written by hand: RMSNorm's dx = r (g w) - x r^3 mean(g w x) with r = 1 / sqrt(mean(x^2) + eps); RoPE's
backward is the rotation by -theta. Equal to transformers' within float rounding (float64: 4e-16; tests in
tests/test_qwen_ops.py); on the embedded policy the trainer's forward + backward of a rollout takes 0.91-0.92x the
time at 2 threads (benchmarks/train_pass.py --fused).

Qwen3-MoE's experts (`experts_forward`): transformers' grouped path multiplies each (token, slot) expert output of
width H by its routing weight, gathers the slots back to token order and sums them, three passes over an (N k, H)
tensor forward and as many back; here the routing weight multiplies the expert's SwiGLU product of width I (a linear
map commutes with the scalar) and one `index_add` sums the slots into their tokens. Same grouped matmuls
(`torch.nn.functional.grouped_mm`); equal to transformers' within float rounding (tests/test_qwen_ops.py).

Qwen3-MoE's router: inside a `fused()` block given a `top_k` function (`gpolib.engine.topk_kernel`), its top-k
indices come from that function and its values from `gather` (topk's values and gradient); the logits, softmax and
normalisation as transformers' own, so the same outputs and gradients bit for bit (tests/test_topk_kernel.py).

They act only where asked: `install()` (idempotent, done by the first `fused()` block) wraps Qwen3's and Qwen3-MoE's
`RMSNorm.forward`, `apply_rotary_pos_emb`, `Qwen3MoeExperts.forward` and `Qwen3MoeTopKRouter.forward` once; the
wrappers take the written-out path inside a `fused()` block on the calling thread, for float32 tensors (RoPE: also
float64) without autocast, and transformers' own code otherwise (a TRL model in the side-by-side benchmark, bf16
engines, the pre-training, anything outside the trainer's passes).
"""
from __future__ import annotations

import contextlib
import threading

import torch

_STATE = threading.local()
EXPERTS = True
"""Qwen3-MoE's experts by `experts_forward` inside a `fused()` block; False: transformers' own (for comparisons)"""


def active() -> bool:
    """Whether the calling thread is inside a `fused()` block."""
    return getattr(_STATE, "on", False)


@contextlib.contextmanager
def fused(on: bool = True, experts=None, train_experts=None, top_k=None):
    """Within the block (this thread only), Qwen3 / Qwen3-MoE RMSNorm and RoPE take the written-out path.

    experts: where no gradient is recorded, a function computing Qwen3-MoE's routed experts as `experts_forward`
    (hidden, top_k_index, top_k_weights, gate_up_proj, down_proj) -> (N, H), or None where it cannot serve (e.g.
    `gpolib.engine.grouped_swiglu`, the C++ kernel); None: `experts_forward` throughout. train_experts: the same where
    a gradient is recorded, its result differentiable (e.g. `gpolib.engine.trained_swiglu`). top_k: the indices of
    Qwen3-MoE's router choice, (probs (N, E), k) -> (N, k) as `torch.topk(probs, k).indices`, or None where it cannot
    serve (e.g. `gpolib.engine.topk_kernel.top_k_indices`); None: the router as transformers computes it."""
    if on:
        install()  # here, not at import: importing gpolib loads no transformers model code
    names = ("on", "experts", "train_experts", "top_k")
    before = {n: getattr(_STATE, n, None) for n in names}
    for n, v in zip(names, (on, experts, train_experts, top_k)):
        setattr(_STATE, n, v)
    try:
        yield
    finally:
        for n, v in before.items():
            setattr(_STATE, n, v)


class RMSNormFn(torch.autograd.Function):
    """y = w * (x * r), r = rsqrt(mean(x^2, -1) + eps); x (..., n), w (n,) -> y (..., n)."""

    @staticmethod
    def forward(ctx, x, w, eps: float):
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)  # (..., 1)
        ctx.save_for_backward(x, w, r)
        return w * (x * r)

    @staticmethod
    def backward(ctx, g):
        x, w, r = ctx.saved_tensors
        gw = g * w  # (..., n)
        coef = r.pow(3).mul_((gw * x).sum(-1, keepdim=True)).div_(x.shape[-1])  # (..., 1): r^3 mean(g w x)
        dx = gw.mul_(r).addcmul_(x, coef, value=-1.0) if ctx.needs_input_grad[0] else None
        dw = None
        if ctx.needs_input_grad[1]:  # a trained norm (full fine-tuning): sum over positions of g * x r
            dw = (g * (x * r)).reshape(-1, x.shape[-1]).sum(0)
        return dx, dw, None


class RotaryFn(torch.autograd.Function):
    """y = x cos + rotate_half(x) sin, rotate_half(x) = (-x2, x1) over the halves of the last dim; x (..., d),
    cos / sin broadcastable to x, constant (no gradient)."""

    @staticmethod
    def forward(ctx, x, cos, sin):
        h = x.shape[-1] // 2
        y = x * cos
        y[..., :h].addcmul_(x[..., h:], sin[..., :h], value=-1.0)  # y1 = x1 cos - x2 sin
        y[..., h:].addcmul_(x[..., :h], sin[..., h:])  # y2 = x2 cos + x1 sin
        ctx.save_for_backward(cos, sin)
        return y

    @staticmethod
    def backward(ctx, g):
        cos, sin = ctx.saved_tensors
        h = g.shape[-1] // 2
        dx = g * cos
        dx[..., :h].addcmul_(g[..., h:], sin[..., h:])  # dx1 = g1 cos + g2 sin
        dx[..., h:].addcmul_(g[..., :h], sin[..., :h], value=-1.0)  # dx2 = g2 cos - g1 sin
        return dx, None, None


def _plain(*tensors) -> bool:
    """One float32 or float64 dtype for all, and no autocast (a bf16 engine keeps transformers' path)."""
    dtypes = {t.dtype for t in tensors}
    return (len(dtypes) == 1 and dtypes <= {torch.float32, torch.float64}
            and not torch.is_autocast_enabled(tensors[0].device.type))


def _wrap_norm(cls) -> None:
    own = cls.forward

    def forward(self, hidden_states):
        # float32 only: transformers computes the norm of other dtypes in float32, and so does its path here
        if active() and _plain(hidden_states, self.weight) and hidden_states.dtype == torch.float32:
            return RMSNormFn.apply(hidden_states, self.weight, self.variance_epsilon)
        return own(self, hidden_states)

    forward.gpolib_wrapped = own
    cls.forward = forward


def _wrap_rotary(module) -> None:
    own = module.apply_rotary_pos_emb

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim: int = 1):
        if active() and _plain(q, k, cos, sin) and not (cos.requires_grad or sin.requires_grad):
            cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
            return RotaryFn.apply(q, cos, sin), RotaryFn.apply(k, cos, sin)
        return own(q, k, cos, sin, unsqueeze_dim)

    apply_rotary_pos_emb.gpolib_wrapped = own
    module.apply_rotary_pos_emb = apply_rotary_pos_emb


def experts_forward(hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
                    gate_up_proj: torch.Tensor, down_proj: torch.Tensor, act_fn) -> torch.Tensor:
    """Qwen3-MoE's routed experts: out_n = sum_j w_nj down_e(silu(gate_e x_n) * up_e x_n), e = top_k_index[n, j].

    hidden_states (N, H), top_k_index (N, k) long, top_k_weights (N, k), gate_up_proj (E, 2I, H) [gate | up rows],
    down_proj (E, H, I) -> (N, H). The N k (token, slot) pairs are grouped by expert (a stable sort), each expert's
    rows go through the grouped matmuls, the routing weight scales the (S, I) SwiGLU product rather than the (S, H)
    output, and `index_add` sums each token's slots."""
    N, k = top_k_index.shape
    flat = top_k_index.reshape(-1)  # (S,), S = N k
    order = torch.argsort(flat, stable=True)  # (S,): slots grouped by expert
    token = order // k  # (S,): the token of each grouped slot
    offs = torch.bincount(flat, minlength=gate_up_proj.shape[0]).cumsum(0).to(torch.int32)  # (E,) group ends
    x = hidden_states.index_select(0, token)  # (S, H)
    gate_up = torch.nn.functional.grouped_mm(x, gate_up_proj.transpose(-2, -1), offs=offs)  # (S, 2I)
    gate, up = gate_up.chunk(2, dim=-1)  # (S, I) each
    w = top_k_weights.reshape(-1).index_select(0, order).unsqueeze(-1)  # (S, 1)
    act = act_fn(gate) * up * w  # (S, I)
    down = torch.nn.functional.grouped_mm(act, down_proj.transpose(-2, -1), offs=offs)  # (S, H)
    return torch.zeros_like(hidden_states).index_add(0, token, down)  # (N, H)


def grouped_mm_fits(*weights) -> bool:
    """Whether `torch.nn.functional.grouped_mm` exists and takes these stacked weights (E, a, b): its CPU kernel
    wants every row stride a multiple of 16 bytes, so a and b times the element size (4 float32 columns, 8 bf16)."""
    return hasattr(torch.nn.functional, "grouped_mm") and all(
        d * w.element_size() % 16 == 0 for w in weights for d in w.shape[-2:])


def _is_silu(act_fn) -> bool:
    """torch's SiLU module or transformers' (`ACT2FN['silu']`, `SiLUActivation`)."""
    return isinstance(act_fn, torch.nn.SiLU) or type(act_fn).__name__ == "SiLUActivation"


def _kernel_experts(hidden, index, weights, gate_up, down, act_fn) -> torch.Tensor:
    """`experts_forward`, or the `fused()` block's function where it serves (SiLU experts only, the function's
    activation): `experts` where no gradient is recorded, `train_experts` where one is."""
    fn = getattr(_STATE, "train_experts" if torch.is_grad_enabled() else "experts", None)
    if fn is not None and _is_silu(act_fn):
        out = fn(hidden, index, weights, gate_up, down)
        if out is not None:
            return out
    return experts_forward(hidden, index, weights, gate_up, down, act_fn)


def _wrap_experts(cls) -> None:
    own = cls.forward

    def forward(self, hidden_states, top_k_index, top_k_weights):
        if EXPERTS and active() and hidden_states.dtype == torch.float32:
            gate_up, down = self.gate_up_proj, self.down_proj  # under peft's LoRA: the adapted weights, read once
            if _plain(hidden_states, gate_up, down, top_k_weights) and grouped_mm_fits(gate_up, down):
                return _kernel_experts(hidden_states, top_k_index, top_k_weights, gate_up, down, self.act_fn)
        return own(self, hidden_states, top_k_index, top_k_weights)

    forward.gpolib_wrapped = own
    cls.forward = forward


def _wrap_router(cls) -> None:
    own = cls.forward

    def forward(self, hidden_states):
        fn = getattr(_STATE, "top_k", None)
        if fn is None or not active() or hidden_states.dtype != torch.float32 or not _plain(hidden_states, self.weight):
            return own(self, hidden_states)
        logits = torch.nn.functional.linear(hidden_states.reshape(-1, self.hidden_dim), self.weight)  # (N, E)
        probs = torch.nn.functional.softmax(logits, dtype=torch.float, dim=-1)  # (N, E)
        index = fn(probs, self.top_k)  # (N, k), as torch.topk's (the function follows no gradient)
        if index is None:
            return own(self, hidden_states)
        values = probs.gather(1, index)  # (N, k): topk's values; the gradient of gather is topk's
        if self.norm_topk_prob:
            values /= values.sum(dim=-1, keepdim=True)
        return logits, values.to(logits.dtype), index

    forward.gpolib_wrapped = own
    cls.forward = forward


def install() -> None:
    """Wrap Qwen3's and Qwen3-MoE's RMSNorm.forward and apply_rotary_pos_emb, and Qwen3-MoE's experts' and router's
    forward (once per process)."""
    from transformers.models.qwen3 import modeling_qwen3 as dense
    from transformers.models.qwen3_moe import modeling_qwen3_moe as moe

    for module, norm in ((dense, dense.Qwen3RMSNorm), (moe, moe.Qwen3MoeRMSNorm)):
        if not hasattr(norm.forward, "gpolib_wrapped"):
            _wrap_norm(norm)
        if not hasattr(module.apply_rotary_pos_emb, "gpolib_wrapped"):
            _wrap_rotary(module)
    if not hasattr(moe.Qwen3MoeExperts.forward, "gpolib_wrapped"):
        _wrap_experts(moe.Qwen3MoeExperts)
    if not hasattr(moe.Qwen3MoeTopKRouter.forward, "gpolib_wrapped"):
        _wrap_router(moe.Qwen3MoeTopKRouter)

