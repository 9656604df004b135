"""gpolib.engine.attention_kernel: the fused decode attention against float64 torch, inside the decoder, and its build."""
import copy

import pytest
import torch

from gpolib.engine import attention_kernel, native
from gpolib.engine.decoder import Decoder
from gpolib.engine.weights import read
from gpolib.models import load_policy

MODEL = "data/models/tiny-qwen3"


def reference(q, keys, vals, bias):
    """softmax(q K + bias on the first P columns) V in float64: (bn, r, d)."""
    s = torch.bmm(q.double(), keys.double())
    if bias is not None:
        s[:, :, :bias.shape[-1]] += bias.double()
    return torch.bmm(torch.softmax(s, -1), vals.double())


def cache_views(bn, r, d, S, end, P, seed=0):
    """q (bn, r, d), keys (bn, d, end) and vals (bn, end, d) as strided views of (bn, d, S) / (bn, S, d) caches,
    bias (bn, 1, P) with -inf on a third of the rows' first columns (None when P = 0)."""
    g = torch.Generator().manual_seed(seed)
    k, v = torch.randn(bn, d, S, generator=g), torch.randn(bn, S, d, generator=g)
    q = torch.randn(bn, r, d, generator=g) / d ** 0.5
    bias = None
    if P:
        bias = torch.zeros(bn, 1, P)
        bias[::3, :, :min(3, P)] = float("-inf")
    return q, k[..., :end], v[:, :end], bias


@pytest.mark.parametrize("r,d,end,P", [
    (2, 32, 40, 10),   # the embedded models' shape (compiled R = 2, D = 32), a tail of 8 positions
    (2, 32, 48, 0),    # whole 16-position blocks, no padding
    (4, 128, 77, 21),  # Qwen3's head dim with 4 query heads per KV head
    (1, 64, 5, 5),     # fewer positions than one block, all of them prompt
    (3, 24, 33, 7),    # sizes without a compiled product (the generic loop)
])
def test_attend_equals_float64_softmax_attention(r, d, end, P):
    q, keys, vals, bias = cache_views(12, r, d, end + 9, end, P)
    out = attention_kernel.attend(q, keys, vals, bias)
    ref = reference(q, keys, vals, bias)
    assert out.shape == (12, r, d) and out.dtype == torch.float32
    assert (out.double() - ref).abs().max() < 2e-6 * ref.abs().max()  # float32 rounding, summed over <= 77 terms
    # the products split over threads compute the same numbers
    assert torch.equal(attention_kernel.attend(q, keys, vals, bias, threads=3), out)


def test_padding_columns_get_no_weight_and_softmax_spans_87_nats():
    """Scores 0, -1, ..., -99 (exp down to ~1e-43, a float32 subnormal) and -inf on padding: the weights are
    softmax's, the padded column's weight exactly 0."""
    end, d = 100, 32
    keys = torch.zeros(1, d, end)
    keys[0, 0] = -torch.arange(end, dtype=torch.float32)  # score t = q_0 K[0][t] = -t
    vals = torch.eye(end, d).unsqueeze(0)  # out[c] = weight of position c (c < 32)
    q = torch.zeros(1, 1, d)
    q[0, 0, 0] = 1.0
    bias = torch.zeros(1, 1, 4)
    bias[0, 0, 1] = float("-inf")
    out = attention_kernel.attend(q, keys, vals, bias)[0, 0]
    s = -torch.arange(end, dtype=torch.float64)
    s[1] = float("-inf")
    want = torch.softmax(s, 0)[:d]
    assert out[1] == 0.0
    assert torch.allclose(out.double(), want, rtol=1e-6, atol=1e-12)


def test_invalid_input_is_refused():
    q, keys, vals, _ = cache_views(4, 2, 32, 20, 16, 0)
    with pytest.raises(ValueError, match="do not match"):
        attention_kernel.attend(q, keys, vals[:, :15], None)
    with pytest.raises(ValueError, match="float32"):
        attention_kernel.attend(q.double(), keys.double(), vals.double(), None)
    with pytest.raises(ValueError, match="refused"):
        attention_kernel.attend(q, keys, vals, torch.zeros(4, 1, 17))  # more padding columns than positions
    with pytest.raises(ValueError, match="unit stride"):
        attention_kernel.attend(q, keys.transpose(1, 2).contiguous().transpose(1, 2), vals, None)


@pytest.fixture(scope="module")
def policy():
    model, tok = load_policy(MODEL, lora_r=4)
    torch.manual_seed(0)
    for n, p in model.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.05)
    return model.eval(), tok


def _greedy_logits(weights, tok, fused: bool, steps: int = 12) -> torch.Tensor:
    """Logits (steps, 2, V) of a greedy decode of two prompts, one left-padded; tokens fed: the argmax."""
    ids = torch.tensor([[tok.pad_token_id] * 3 + [5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15]])
    mask = (ids != tok.pad_token_id).long()
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.inference_mode():  # the per-layer step (the whole-step kernel off), attention fused or not
        dec = Decoder(weights, 2, 64, kernels="attention" if fused else "none")
        assert dec.fused is (fused and weights["head"].dtype == torch.float32) and dec.fused_step is None
        logits = [dec.prefill(ids, mask, pos)]
        nxt, p = logits[0].argmax(-1), pos[:, -1] + 1
        for t in range(steps):
            logits.append(dec.step(nxt, p + t, ids.shape[1] + t))
            nxt = logits[-1].argmax(-1)
    return torch.stack(logits)


def test_the_decoder_uses_the_kernel_in_float32_as_accurate_as_its_torch_path(policy):
    """The kernel is built on this machine (a C++ compiler is part of the set-up) and serves float32 decoding;
    a greedy decode's logits leave the float64 decoder's by no more than the torch attention path's do (float32
    rounding), and pick the same tokens."""
    model, tok = policy
    assert attention_kernel.available()
    fused, plain = _greedy_logits(read(model, 64), tok, True), _greedy_logits(read(model, 64), tok, False)
    exact = _greedy_logits(read(copy.deepcopy(model).double(), 64), tok, False).float()
    err_fused, err_plain = (fused - exact).abs().max(), (plain - exact).abs().max()
    assert 0 < err_plain < 1e-4 and err_fused < 2 * err_plain
    assert torch.equal(fused.argmax(-1), exact.argmax(-1))


def test_float64_and_reduced_precision_decoders_keep_the_torch_path(policy):
    model, _ = policy
    assert not Decoder(read(model.double(), 32), 2, 32).fused
    model.float()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not Decoder(read(model, 32), 2, 32).fused


def test_the_library_is_built_once_per_source_and_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("GPOLIB_CACHE_DIR", str(tmp_path))
    first = native.build()
    assert first.parent == tmp_path / "kernels" and first.exists()
    mtime = first.stat().st_mtime_ns
    assert native.build() == first and first.stat().st_mtime_ns == mtime  # reused, not rebuilt
    monkeypatch.setattr(native, "_cpu_flags", lambda: "another cpu")
    assert native.library_path("g++") != first  # -march=native code for another CPU: its own build
