"""gpolib.engine.step_kernel: a whole decode step (dense or MoE) in one C++ call, against the decoder's torch path and
float64."""
import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen3Config, Qwen3MoeConfig

from gpolib.engine import native, step_kernel
from gpolib.engine.decoder import Decoder
from gpolib.engine.weights import read
from gpolib.runtime import cpu_threads

VOCAB = 99


def _model(kind: str):
    """A random dense model, float32, peaky enough for distinct greedy choices:
    'qwen3': the embedded shape (H 128, 4 heads over 2 KV heads of 32, I 344);
    'odd': sizes off every compiled path (H 72, I 100, 3 heads over 1 KV head of 24, vocab 99: padded widths,
           the generic attention product);
    'qwen2': biases on q, k, v, no head norms;
    'moe': a Qwen3-MoE (16 experts of width 24, top-4, renormalised), its second layer dense (mlp_only_layers);
    'moe_odd': a Qwen3-MoE off the panels (H 72, 6 experts of width 20, top-2, not renormalised)."""
    torch.manual_seed(0)
    common = dict(vocab_size=VOCAB, num_hidden_layers=2, max_position_embeddings=128, tie_word_embeddings=True,
                  pad_token_id=0, eos_token_id=1, bos_token_id=None, initializer_range=0.1)
    if kind == "qwen3":
        cfg = Qwen3Config(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                          intermediate_size=344, **common)
    elif kind == "moe":
        cfg = Qwen3MoeConfig(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                             intermediate_size=64, moe_intermediate_size=24, num_experts=16, num_experts_per_tok=4,
                             norm_topk_prob=True, mlp_only_layers=[1], **common)
    elif kind == "moe_odd":
        cfg = Qwen3MoeConfig(hidden_size=72, num_attention_heads=3, num_key_value_heads=1, head_dim=24,
                             moe_intermediate_size=20, num_experts=6, num_experts_per_tok=2, norm_topk_prob=False,
                             **common)
    elif kind == "odd":
        cfg = Qwen3Config(hidden_size=72, num_attention_heads=3, num_key_value_heads=1, head_dim=24,
                          intermediate_size=100, **common)
    else:
        cfg = Qwen2Config(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, intermediate_size=256,
                          **common)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    if kind == "qwen2":
        for layer in model.model.layers:  # non-zero q/k/v biases
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                torch.nn.init.normal_(proj.bias, std=0.1)
    return model


PROMPTS = torch.tensor([[0, 0, 0, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15], [0, 0, 0, 0, 0, 0, 21]])  # left-padded


def _greedy(weights, steps: int = 20, fused: bool = True, threads: int = 1):
    """Logits (steps + 1, 3, V) of a greedy decode of PROMPTS (the argmax fed back), and the decoder."""
    mask = (PROMPTS != 0).long()
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.inference_mode():
        dec = Decoder(weights, 3, PROMPTS.shape[1] + steps, kernels="all" if fused else "none")
        logits = [dec.prefill(PROMPTS, mask, pos)]
        nxt, p = logits[0].argmax(-1), pos[:, -1] + 1
        for t in range(steps):
            with cpu_threads(threads):  # the steps' threads (the prefill's matmuls stay as they are)
                logits.append(dec.step(nxt, p + t, PROMPTS.shape[1] + t))
            nxt = logits[-1].argmax(-1)
    return torch.stack(logits), dec


@pytest.mark.parametrize("kind", ["qwen3", "odd", "qwen2", "moe", "moe_odd"])
def test_fused_step_is_as_close_to_float64_as_the_torch_path(kind):
    """The fused step serves float32 dense and MoE models; over 20 greedy steps (left padding included) its logits
    leave the float64 decoder's (equal to the transformers forward, tests/test_sampler.py) by no more than twice the
    torch path's float32 error, pick the same tokens, and leave the same keys and values in the cache (MoE: a
    routing that differed would move the logits by far more)."""
    model = _model(kind)
    fused, dec_f = _greedy(read(model, 64))
    plain, dec_p = _greedy(read(model, 64), fused=False)
    exact, _ = _greedy(read(copy.deepcopy(model).double(), 64), fused=False)
    assert dec_f.fused_step is not None and dec_p.fused_step is None
    err_fused, err_plain = (fused - exact.float()).abs().max(), (plain - exact.float()).abs().max()
    assert 0 < err_plain < 1e-4 and err_fused < 2 * err_plain, (err_fused, err_plain)
    assert torch.equal(fused.argmax(-1), exact.argmax(-1))
    end = PROMPTS.shape[1] + 20 - 1  # the last step's token is fed, not written
    assert torch.allclose(dec_f.k[..., :end], dec_p.k[..., :end], atol=1e-5)
    assert torch.allclose(dec_f.v[:, :, :, :end], dec_p.v[:, :, :, :end], atol=1e-5)


@pytest.mark.parametrize("kind", ["qwen3", "moe"])
def test_threads_split_rows_without_changing_a_bit(kind):
    """Each row runs on one thread through every layer: the split changes no arithmetic."""
    one, _ = _greedy(read(_model(kind), 64), threads=1)
    three, _ = _greedy(read(_model(kind), 64), threads=3)
    assert torch.equal(one, three)


def test_pack_lays_columns_out_in_zero_padded_panels():
    """pack: (k, n) -> (n_p / 32, k, 32), panel j holding columns 32 j .. 32 j + 31, zeros past n."""
    w = torch.arange(3 * 40, dtype=torch.float32).view(3, 40)
    p = step_kernel.pack(w)
    assert p.shape == (2, 3, 32) and p.is_contiguous()
    assert p[0, 2, 5] == w[2, 5] and p[1, 1, 7] == w[1, 39] and p[1, 1, 8:].abs().sum() == 0
    assert step_kernel.padded(32) == 32 and step_kernel.padded(33) == 64 and step_kernel.padded(1) == 32


def test_gate_and_up_are_padded_separately():
    """[gate | up] with I = 3: gate in packed columns 0..2, up in 32..34, zeros elsewhere (silu(0) 0 = 0)."""
    w = torch.arange(2 * 6, dtype=torch.float32).view(2, 6) + 1
    p = step_kernel._pack_gate_up(w)  # (2 panels, 2, 32)
    flat = p.transpose(0, 1).reshape(2, 64)
    assert torch.equal(flat[:, :3], w[:, :3]) and torch.equal(flat[:, 32:35], w[:, 3:])
    assert flat[:, 3:32].abs().sum() == 0 and flat[:, 35:].abs().sum() == 0


def test_only_float32_cpu_weights_are_served(monkeypatch):
    model = _model("qwen3")
    assert step_kernel.supports(read(model, 32))
    assert not step_kernel.supports(read(copy.deepcopy(model).double(), 32))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not step_kernel.supports(read(model, 32))
    w = read(model, 32)
    no_mlp = {**w, "layers": [{k: v for k, v in lw.items() if k != "w_gu"} for lw in w["layers"]]}
    assert not step_kernel.supports(no_mlp)
    moe = read(_model("moe"), 32)
    assert step_kernel.supports(moe) and Decoder(moe, 2, 32, kernels="all").fused_step is not None
    monkeypatch.setattr(step_kernel, "MOE", False)  # MoE layers per layer (for comparisons)
    assert not step_kernel.supports(moe) and step_kernel.supports(w)
    assert Decoder(w, 2, 32, kernels="all").fused_step is not None
    per_layer, torch_only = Decoder(w, 2, 32, kernels="attention"), Decoder(w, 2, 32, kernels="none")
    assert per_layer.fused and per_layer.fused_step is None and not torch_only.fused and torch_only.fused_step is None
    with pytest.raises(ValueError, match="kernels='step' is invalid"):
        Decoder(w, 2, 32, kernels="step")
    with pytest.raises(ValueError, match="supported model's float32"):
        step_kernel.FusedStep(read(copy.deepcopy(model).double(), 32))


def test_packed_once_per_read_and_shared():
    w = read(_model("qwen3"), 32)
    assert Decoder(w, 2, 32).fused_step is Decoder(w, 3, 32).fused_step


def test_invalid_tokens_positions_and_columns_are_refused():
    w = read(_model("qwen3"), 32)
    dec = Decoder(w, 2, 32)
    with torch.inference_mode():
        dec.prefill(PROMPTS[:2], (PROMPTS[:2] != 0).long(), torch.zeros(2, 7, dtype=torch.long))
        ok = dict(pos=torch.tensor([7, 7]), col=7)
        assert dec.step(torch.tensor([3, 4]), **ok).shape == (2, VOCAB)
        with pytest.raises(ValueError, match="outside the vocabulary"):
            dec.step(torch.tensor([3, VOCAB]), **ok)
        with pytest.raises(ValueError, match="RoPE table"):
            dec.step(torch.tensor([3, 4]), torch.tensor([7, 32]), 7)
        with pytest.raises(ValueError, match="outside the cache"):
            dec.step(torch.tensor([3, 4]), torch.tensor([7, 7]), dec.k.shape[-1])
        with pytest.raises(ValueError, match="outside the cache"):
            dec.fused_step(torch.tensor([3, 4, 5]), torch.tensor([7, 7, 7]), 7, dec.k, dec.v, None)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 24, 33), (8, 128, 256), (9, 344, 99), (130, 72, 100)])
def test_gemm_equals_the_float64_product(m, k, n):
    """The step's matmul on packed weights: every MR-row remainder (1..8), padded columns, a k of 1; within float32
    rounding of the float64 product, zeros in the padded columns; accumulate adds to what is there."""
    g = torch.Generator().manual_seed(m * 1000 + k)
    a, w = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    out = step_kernel.gemm(a, step_kernel.pack(w))
    exact = a.double() @ w.double()
    assert out.shape == (m, step_kernel.padded(n))
    assert torch.allclose(out[:, :n].double(), exact, atol=1e-5 * k ** 0.5, rtol=1e-5)
    assert out[:, n:].abs().sum() == 0
    start = torch.randn(m, step_kernel.padded(n), generator=g)
    acc = step_kernel.gemm(a, step_kernel.pack(w), out=start.clone())
    assert torch.allclose(acc[:, :n].double(), start[:, :n].double() + exact, atol=1e-5 * k ** 0.5, rtol=1e-5)


def test_gemm_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="does not match"):
        step_kernel.gemm(torch.randn(3, 5), step_kernel.pack(torch.randn(4, 8)))
    with pytest.raises(ValueError, match="out must be"):
        step_kernel.gemm(torch.randn(3, 4), step_kernel.pack(torch.randn(4, 8)), out=torch.zeros(3, 8))


def test_the_matmul_without_avx512_is_the_same_product():
    """Built for a CPU without AVX-512 (-march=haswell: AVX2, 16 vector registers), the matmul takes 2-row
    micro-kernels instead of 8-row ones; on a CPU that runs AVX2 code (its /proc/cpuinfo flags name avx2) it gives
    the float64 product too. On one that does not, what is checked is that the AVX2 build compiles, as its own
    library beside this CPU's."""
    import ctypes

    haswell = native.build(march="haswell")
    assert haswell.exists() and haswell != native.build()
    if "avx2" not in native._cpu_flags().split():
        return  # this CPU cannot load AVX2 code: the build above is the check
    fn = native.function("gpolib_gemm_f32", step_kernel.GEMM_ARGTYPES, lib=ctypes.CDLL(str(haswell)))
    g = torch.Generator().manual_seed(5)
    for m, k, n in [(9, 344, 99), (1, 128, 256), (130, 72, 100)]:
        a, w = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
        packed = step_kernel.pack(w)
        out = torch.zeros(m, packed.shape[0] * 32)
        assert fn(a.data_ptr(), k, m, k, packed.data_ptr(), out.shape[1], out.data_ptr(), out.shape[1], 0) == 0
        assert torch.allclose(out[:, :n].double(), a.double() @ w.double(), atol=1e-5 * k ** 0.5, rtol=1e-5)
        assert torch.equal(out, step_kernel.gemm(a, packed))  # same order of sums as the AVX-512 build



def _exp_check(lib, lo: float, hi: float, stride: int) -> list:
    import ctypes

    fn = native.function("gpolib_exp_check", [ctypes.c_float, ctypes.c_float, ctypes.c_int64, ctypes.c_void_p], lib=lib)
    counts = torch.zeros(3, dtype=torch.int64)
    assert fn(lo, hi, stride, counts.data_ptr()) == 0
    return counts.tolist()


@pytest.mark.parametrize("march", ["native", "haswell"])
def test_router_softmax_exp_is_std_exp_rounded_to_float(march):
    """The MoE router's exp in the decode step (kernels/exp_float.h: 8 at a time in double, Ziv's test deciding the
    few near a float rounding boundary by std::exp) gives static_cast<float>(std::exp(double(x))) bit for bit: every
    61st float in [-110, 0] (18 million), every 4099th below -110 and -inf itself, -0 and +0 (benchmarks/exp_check.py
    sweeps all 1.1 billion; none differ). The AVX2 build (-march=haswell) too, on a CPU that runs it."""
    import ctypes

    if march == "haswell" and "avx2" not in native._cpu_flags().split():
        assert native.build(march=march).exists()  # this CPU cannot run AVX2 code: the build is the check
        return
    lib = native.library() if march == "native" else ctypes.CDLL(str(native.build(march=march)))
    checked, differ, _ = _exp_check(lib, -110.0, 0.0, 61)
    assert checked > 18_000_000 and differ == 0
    for lo, hi, stride, least in ((-float("inf"), -110.0, 4099, 200_000), (-float("inf"), -float("inf"), 1, 1),
                                  (-0.0, 0.0, 1, 1)):
        checked, differ, _ = _exp_check(lib, lo, hi, stride)
        assert checked >= least and differ == 0, (lo, hi)


@pytest.fixture
def fresh_setting():
    """The kernel setting read again after the test (after monkeypatch has restored the environment)."""
    native.kernels_setting.cache_clear()
    yield
    native.kernels_setting.cache_clear()


def _setting(monkeypatch, decode: str | None, step: str | None) -> str:
    for env, value in ((native.DECODE_ENV, decode), (native.STEP_ENV, step)):
        if value is None:
            monkeypatch.delenv(env, raising=False)
        else:
            monkeypatch.setenv(env, value)
    native.kernels_setting.cache_clear()
    return native.kernels_setting()


def test_the_kernel_setting_is_read_once_from_the_environment(fresh_setting, monkeypatch):
    """GPOLIB_DECODE_KERNEL=0 -> 'none', GPOLIB_STEP_KERNEL=0 -> 'attention', neither -> 'all'; read on the first
    call only (the environment is never written), and the default of a decoder built without `kernels`."""
    cases = [(None, None), ("0", None), ("1", "off"), (None, "0"), ("no", "0")]
    assert [_setting(monkeypatch, d, s) for d, s in cases] == ["all", "none", "attention", "attention", "none"]
    monkeypatch.delenv(native.DECODE_ENV)
    monkeypatch.delenv(native.STEP_ENV)
    assert native.kernels_setting() == "none"  # read once: the change after the first call is not seen
    assert not Decoder(read(_model("qwen3"), 32), 2, 32).fused
