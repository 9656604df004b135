"""A decoder written directly against the Qwen3 / Qwen3-MoE / Qwen2 layers, for sampling.

The transformers forward spends most of a small model's decode step outside the arithmetic: a
`DynamicCache` that grows by concatenation (O(T^2) copies), one kernel per projection, masks and
position tensors rebuilt every step. `Decoder` computes with the weights of `weights.read`
(LoRA folded in, fused projections, norm weights folded into matmuls) and keeps
  - a preallocated KV cache: keys (n_layers, B, n_kv, d, S), stored transposed so that the score
    product reads rows of length S, and values (n_layers, B, n_kv, S, d), written in place;
  - the additive padding mask of the prompt columns per KV head, (B n_kv, 1, P), added to those
    columns of the scores only (left padding never reaches the generated columns);
  - a RoPE table for positions 0..S-1 from the model's own rotary module;
  - finished rows leave the batch through `keep` (one copy of the used columns).
A float32 decode step on the CPU of a dense or MoE model is one call of the C++ kernel of `step_kernel` (every layer,
an MoE layer's routing and experts included, all rows); with kernels='attention' (or `step_kernel.MOE` off for an
MoE model), the attention is one call per layer of `attention_kernel`'s (scores, padding bias, softmax and values in
one pass over the cache), the rest torch but for an MoE layer's routed experts, one call of `experts_kernel`'s with
kernels='all' (float32; the prefill's MoE layers too). Where the kernels are not
built, with kernels='none', and in other dtypes or on other devices, the step is torch throughout (attention as
bmm, softmax, bmm).
Every equation is the model's own: RMSNorm x / sqrt(mean(x^2) + eps) in fp32 (weight in the next
matmul); q/k head norms (Qwen3); RoPE x cos + rotate_half(x) sin; softmax(q k^T / sqrt(d) + mask) v
with grouped KV heads; SwiGLU down(silu(gate x) * up x); MoE top-k of softmax(router x) (fp32),
renormalised if the config says so. In float64 the logits equal the transformers forward's bit for bit
on the embedded models (tests/test_sampler.py).

Reduced precision (a bf16 / fp16 rollout engine, `TrainConfig.rollout_autocast`): `weights.read` under
torch.autocast gives the matrices in the autocast dtype; every matmul then casts its input to that dtype and
its output back to the residual stream's (`_mm`), the KV cache is kept in that dtype, and everything else
(norms, RoPE, softmax, SiLU, the residual stream, the draw) stays in float32, the split of autocast's own op
lists. bf16 experts on the CPU multiply their bf16 values held in float32 (`_gmm`): the same rounding, without the
CPU bf16 matmul's fixed cost per expert group. The casts are explicit, so the sampling threads of `plan` (autocast
is thread-local) compute the same.

8-bit engines (`TrainConfig.rollout_weights`, `quant`): 'int8' quantizes the projections' weights only; 'w8a8'
quantizes their input rows too, per token (`_qin`, the layer's `act_q`), before every projection but the router and
the LM head.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..qwen_ops import grouped_mm_fits
from . import attention_kernel, experts_kernel, native, step_kernel
from .weights import read

MOE_DENSE_BELOW = 32
"""MoE with fewer tokens than this: every expert on every token as two matmuls (routing weights 0 off the
top-k), cheaper than grouping tokens by expert when the batch is small"""


def _mm(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """a @ w in w's dtype, the result in a's: (m, k) @ (k, n) -> (m, n). No cast when the dtypes agree."""
    return a @ w if a.dtype == w.dtype else (a.to(w.dtype) @ w).to(a.dtype)


def _add_mm_(out: torch.Tensor, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """out += a @ w in place (one addmm_ when the dtypes agree)."""
    return out.addmm_(a, w) if a.dtype == w.dtype == out.dtype else out.add_(_mm(a, w))


def _qin(a: torch.Tensor, lw: dict) -> torch.Tensor:
    """A projection's input as the layer's engine sees it: quantized per row under 'w8a8' (`quant.int8_per_token`)."""
    q = lw.get("act_q")
    return a if q is None else q(a)


def _normed(x: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) over the last dim, in fp32 (as the model's RMSNorm). `eps` a 0-dim tensor:
    sum(x*x) * (1/n) + eps in one `add` (no Python scalars, each of which costs a conversion on CPU)."""
    xf = x if x.dtype == torch.float32 else x.float()
    r = torch.add(eps, (xf * xf).sum(-1, keepdim=True), alpha=1.0 / x.shape[-1]).rsqrt_()
    return xf * r if x.dtype == torch.float32 else (xf * r).to(x.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """x cos + rotate_half(x) sin, with rotate_half(x) sin = roll(x, d/2) * [-sin_1, sin_2]."""
    return torch.addcmul(x * cos, torch.roll(x, x.shape[-1] // 2, dims=-1), sin_signed)


def _softmax(s: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim, in fp32 at least (as the model's attention)."""
    if s.dtype in (torch.float32, torch.float64):
        return torch.softmax(s, dim=-1)
    return torch.softmax(s, dim=-1, dtype=torch.float32).to(s.dtype)


def _swiglu(x: torch.Tensor, w_gu: torch.Tensor, w_down: torch.Tensor, out: torch.Tensor | None = None, lw=None):
    """[out +] down(silu(gate x) * up x); x (m, H), w_gu (H, 2I), w_down (I, H) -> (m, H); inputs by `_qin(., lw)`."""
    h = _mm(x if lw is None else _qin(x, lw), w_gu)  # (m, 2I)
    n = h.shape[-1] // 2
    a = F.silu(h[:, :n]).mul_(h[:, n:])  # (m, I)
    a = a if lw is None else _qin(a, lw)
    return _mm(a, w_down) if out is None else _add_mm_(out, a, w_down)  # out: the residual stream, in place


def _moe(x: torch.Tensor, lw: dict, out: torch.Tensor) -> torch.Tensor:
    """out + top-k routed experts; x, out (m, H) -> (m, H)."""
    probs = torch.softmax(_mm(x, lw["router"]), dim=-1, dtype=torch.float)  # (m, E), fp32 as the model's router
    w, experts = probs.topk(lw["top_k"], dim=-1)  # (m, k) each
    if lw["norm_topk"]:
        w = w / w.sum(dim=-1, keepdim=True)
    w = w.to(x.dtype)
    if "experts_packed" in lw:  # float32 experts on the CPU, the kernel in use: one call (`experts_kernel`)
        return experts_kernel.packed_swiglu(x, experts, w, lw["experts_packed"], out=out)
    m, (E, I) = x.shape[0], lw["e_down"].shape[:2]
    if m < MOE_DENSE_BELOW:  # all experts, weight 0 off the top-k: two matmuls
        x = _qin(x, lw)  # the experts' input (the router read it unquantized)
        gate = torch.zeros(m, E, 1, dtype=x.dtype, device=x.device).scatter_(1, experts.unsqueeze(2), w.unsqueeze(2))
        h = _mm(x, lw["all_gu"]).view(m, E, 2 * I)
        a = F.silu(h[..., :I]).mul_(h[..., I:])  # (m, E, I)
        a = _qin(a, lw).mul_(gate)  # each expert's SwiGLU product quantized per (token, expert) row, as when grouped
        return _add_mm_(out, a.view(m, E * I), lw["all_down"])
    flat = experts.reshape(-1)  # (m k,)
    order = flat.argsort()
    token = order // lw["top_k"]  # token of each (token, expert) pair, grouped by expert
    counts = torch.bincount(flat, minlength=E)  # (E,)
    if _grouped(x, lw):
        y = _grouped_swiglu(x[token], lw["e_gu"], lw["e_down"], counts, lw)  # (m k, H)
    else:
        xs, parts, s = x[token], [], 0
        for e, c in enumerate(counts.tolist()):
            if c:
                parts.append(_swiglu(xs[s:s + c], lw["e_gu"][e], lw["e_down"][e], lw=lw))
                s += c
        y = torch.cat(parts)
    return out.index_add_(0, token, y * w.reshape(-1)[order].unsqueeze(1))


def _grouped(x: torch.Tensor, lw: dict) -> bool:
    """Whether the experts can run as two grouped matmuls (`torch.nn.functional.grouped_mm`): float32 or bf16
    weights whose rows fit its CPU kernel (`qwen_ops.grouped_mm_fits`); other weights (int8 engines) keep the loop."""
    w_gu, w_down = lw["e_gu"], lw["e_down"]
    return (x.dtype == torch.float32 and w_gu.dtype == w_down.dtype and w_gu.dtype in (torch.float32, torch.bfloat16)
            and grouped_mm_fits(w_gu, w_down))


def _grouped_swiglu(xs: torch.Tensor, w_gu: torch.Tensor, w_down: torch.Tensor, counts: torch.Tensor, lw: dict):
    """`_swiglu` of every expert at once: xs (S, H) grouped by expert (counts (E,) rows each), w_gu (E, H, 2I),
    w_down (E, I, H) -> (S, H); matmul inputs cast to the weights' dtype and outputs back, as `_mm` does."""
    offs = counts.cumsum(0).to(torch.int32)  # (E,) group ends
    h = _gmm(_qin(xs, lw), w_gu, offs, lw.get("e_gu_wide"))  # (S, 2I)
    n = h.shape[-1] // 2
    a = _qin(F.silu(h[:, :n]).mul_(h[:, n:]), lw)  # (S, I)
    return _gmm(a, w_down, offs, lw.get("e_down_wide"))  # (S, H)


def _gmm(a: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, wide: torch.Tensor | None) -> torch.Tensor:
    """`F.grouped_mm(a, w, offs)` in w's dtype, the result in a's: a (S, K) grouped by offs, w (E, K, N) -> (S, N).

    wide: w's values held in float32 (bf16 experts on the CPU, `weights.widen_experts`): the same bf16 operands, whose
    products are exact in float32, summed in float32 and rounded to bf16 once, as the bf16 kernel computes them up to
    the order of the sums. On the CPU a bf16 matmul has a large fixed cost per call, and a grouped matmul is one
    call per expert of a few rows (benchmarks/README.md, "The bf16 experts held in float32")."""
    if wide is None:
        return F.grouped_mm(a.to(w.dtype), w, offs=offs).to(a.dtype)
    return F.grouped_mm(a.to(w.dtype).to(wide.dtype), wide, offs=offs).to(w.dtype).to(a.dtype)


def _pack_experts(w: dict) -> None:
    """Each MoE layer's float32 experts (no quantized activations) packed for `experts_kernel` into its weights, once
    per read (row shards share the dict); other layers are left alone."""
    for lw in w["layers"]:
        if ("e_gu" in lw and "experts_packed" not in lw and lw.get("act_q") is None
                and lw["e_gu"].dtype == lw["e_down"].dtype == torch.float32 and lw["e_gu"].device.type == "cpu"):
            lw["experts_packed"] = experts_kernel.pack_right(lw["e_gu"], lw["e_down"])


def _mlp(h: torch.Tensor, x: torch.Tensor, lw: dict) -> torch.Tensor:
    return _swiglu(h, lw["w_gu"], lw["w_down"], out=x, lw=lw) if "w_gu" in lw else _moe(h, lw, x)


class Decoder:
    """A supported causal LM's weights and a KV cache for `batch` rows of `width` positions (prompt + new tokens).

    Rows live in the first `b` slots of the cache; `keep` moves the rows that go on to the front.
    Column c of the cache holds position c of the left-padded sequence (prompt columns 0..P-1, then
    one column per new token), so every row writes the same column at each step.
    """

    def __init__(self, source, batch: int, width: int, threads: int = 0, kernels: str | None = None):
        """source: a model, or its weights read by `weights.read(model, width)` (shared by shards).
        threads: the kernels' threads per step (0: torch's setting at each step).
        kernels: which C++ kernels may serve the steps, one of `native.KERNELS` (None: `native.kernels_setting()`)."""
        w = source if isinstance(source, dict) else read(source, width)
        kernels = native.resolve(kernels)
        self.embed, self.head, self.layers = w["embed"], w["head"], w["layers"]
        self.cos, self.sin, self.d, self.n_q, self.n_kv = w["cos"], w["sin"], w["d"], w["n_q"], w["n_kv"]
        dev, dtype = self.embed.device, self.embed.dtype  # the residual stream's dtype
        self.kv_dtype = w["head"].dtype  # the matmuls' (the autocast dtype under torch.autocast)
        self.eps = torch.tensor(w["eps"], dtype=torch.promote_types(dtype, torch.float32), device=dev)
        self.qk_eps = [None if lw["qk_eps"] is None else torch.tensor(lw["qk_eps"], dtype=self.eps.dtype, device=dev)
                       for lw in self.layers]
        shape = (len(self.layers), batch, self.n_kv)
        key_cols = -(-width // 16) * 16  # key rows padded to 16 columns: the kernels read the last positions whole
        self.k = torch.zeros(*shape, self.d, key_cols, dtype=self.kv_dtype, device=dev)  # keys stored transposed
        self.v = torch.zeros(*shape, width, self.d, dtype=self.kv_dtype, device=dev)
        self.bias = None  # (B nkv, 1, P): -inf on left padding, set by prefill; None: no padding
        self.fused = kernels != "none" and attention_kernel.usable(self.k)  # a step's attention in one call per layer
        whole = self.fused and kernels == "all" and step_kernel.supports(w)  # or all of it
        self.fused_step = step_kernel.for_weights(w) if whole else None
        if self.fused and kernels == "all":  # an MoE's float32 experts: one C++ call per layer
            _pack_experts(w)
        self.threads = threads

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Left-padded prompts (b, P) -> next-token logits (b, V); fills cache columns 0..P-1."""
        b, P = ids.shape
        pad = torch.zeros(b, P, dtype=self.embed.dtype, device=ids.device).masked_fill_(mask == 0, float("-inf"))
        self.bias = pad.repeat_interleave(self.n_kv, dim=0).unsqueeze(1) if bool((mask == 0).any()) else None
        causal = torch.ones(P, P, dtype=torch.bool, device=ids.device).triu(1)  # key j > query i
        m = pad.unsqueeze(1).masked_fill(causal, float("-inf"))  # (b, P, P)
        m.diagonal(dim1=1, dim2=2).zero_()  # a padding query sees itself: no all -inf row
        cos, sin = self.cos[pos].unsqueeze(2), self.sin[pos].unsqueeze(2)  # (b, P, 1, d)
        x = F.embedding(ids.reshape(-1), self.embed)  # (b P, H), the residual stream
        for i, lw in enumerate(self.layers):
            x = self._prefill_attention(_normed(x, self.eps), x, i, lw, (cos, sin), m)
            x = _mlp(_normed(x, self.eps), x, lw)
        return _mm(_normed(x.view(b, P, -1)[:, -1], self.eps), self.head)  # (b, V)

    def _prefill_attention(self, h, x, i: int, lw: dict, rope, mask) -> torch.Tensor:
        """x + attention(h) over the prompt; h, x (b P, H), mask (b, P, P) additive."""
        b, P = mask.shape[:2]
        nq, nkv, d, r = self.n_q, self.n_kv, self.d, self.n_q // self.n_kv
        q, k, v = self._qkv(h, i, lw, rope[0], rope[1], (b, P))
        self.k[i, :b, :, :, :P] = k.permute(0, 2, 3, 1)  # (b, nkv, d, P)
        self.v[i, :b, :, :P] = v.transpose(1, 2)  # (b, nkv, P, d)
        q = q.reshape(b, P, nkv, r, d).permute(0, 2, 3, 1, 4).reshape(b, nkv, r * P, d)  # heads of a KV head together
        s = _mm(q, self.k[i, :b, :, :, :P]).view(b, nkv, r, P, P) + mask.view(b, 1, 1, P, P)  # scale folded into q
        o = _mm(_softmax(s).view(b, nkv, r * P, P), self.v[i, :b, :, :P])  # (b, nkv, r P, d)
        o = o.view(b, nkv, r, P, d).permute(0, 3, 1, 2, 4).reshape(b * P, nq * d)
        return self._out(x, o, lw)

    def _qkv(self, h, i: int, lw: dict, cos, sin, bn: tuple) -> tuple:
        """Projections, head norms and RoPE: h (b n, H) -> q (b, n, nq, d), k, v (b, n, nkv, d)."""
        nq, nkv, d = self.n_q, self.n_kv, self.d
        w, bias, h = lw["w_qkv"], lw["b_qkv"], _qin(h, lw)
        qkv = _mm(h, w) if bias is None else torch.addmm(bias, h, w) if h.dtype == w.dtype else _mm(h, w) + bias
        qkv = qkv.view(*bn, nq + 2 * nkv, d)
        qk = qkv[..., :nq + nkv, :]  # (b, n, nq + nkv, d)
        if lw["qk_norm"] is not None:
            qk = _normed(qk, self.qk_eps[i]) * lw["qk_norm"]
        qk = _rope(qk, cos, sin)
        return qk[..., :nq, :], qk[..., nq:, :], qkv[..., nq + nkv:, :]

    def _out(self, x, o, lw: dict) -> torch.Tensor:
        _add_mm_(x, _qin(o, lw), lw["w_o"])  # residual + o_proj, in place
        return x if lw["b_o"] is None else x.add_(lw["b_o"])

    def step(self, tok: torch.Tensor, pos: torch.Tensor, col: int) -> torch.Tensor:
        """Tokens (b,) at positions pos (b,), written to cache column col -> next-token logits (b, V)."""
        b, end = tok.shape[0], col + 1
        threads = (self.threads or torch.get_num_threads()) if self.fused else 1
        if self.fused_step is not None:
            return self.fused_step(tok, pos, col, self.k, self.v, self.bias, threads)
        nq, nkv, d, r = self.n_q, self.n_kv, self.d, self.n_q // self.n_kv
        cos, sin = F.embedding(pos, self.cos).unsqueeze(1), F.embedding(pos, self.sin).unsqueeze(1)  # (b, 1, d)
        P = None if self.bias is None else self.bias.shape[-1]
        bias = None if self.bias is None else self.bias[:b * nkv]  # (b nkv, 1, P)
        x = F.embedding(tok, self.embed)  # (b, H)
        for i, lw in enumerate(self.layers):
            q, k, v = self._qkv(_normed(x, self.eps), i, lw, cos, sin, (b,))  # (b, heads, d)
            self.k[i, :b, :, :, col] = k
            self.v[i, :b, :, col] = v
            q = q.reshape(b * nkv, r, d)  # scale folded in
            keys = self.k[i, :b, :, :, :end].view(b * nkv, d, end)
            vals = self.v[i, :b, :, :end].view(b * nkv, end, d)
            if self.fused:
                o = attention_kernel.attend(q, keys, vals, bias, threads)
            else:
                s = _mm(q, keys)  # (b nkv, r, end)
                if bias is not None:
                    s[:, :, :P] += bias  # left padding: prompt columns only
                o = _mm(_softmax(s), vals)  # (b nkv, r, d)
            x = self._out(x, o.view(b, nq * d), lw)
            x = _mlp(_normed(x, self.eps), x, lw)
        return _mm(_normed(x, self.eps), self.head)  # (b, V)

    def keep(self, rows: torch.Tensor, cols: int) -> None:
        """Keep cache rows `rows` (index tensor) as the new first len(rows) rows; only columns < cols are used.
        Only the rows that change place are copied."""
        moved = (rows != torch.arange(len(rows), device=rows.device)).nonzero().squeeze(1)
        src = rows[moved]
        self.k[:, moved, :, :, :cols] = self.k[:, src, :, :, :cols]
        self.v[:, moved, :, :cols] = self.v[:, src, :, :cols]
        if self.bias is not None:
            bias = self.bias.view(-1, self.n_kv, *self.bias.shape[1:])  # (B, nkv, 1, P)
            bias[moved] = bias[src]
