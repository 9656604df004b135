"""The decoder sampler (`gpolib.engine.decoder.Decoder` behind `gpolib.engine.sample`) against the model's own forward.

- float64: the decoder's logits at every step equal the transformers forward's on the same tokens
  (dense, MoE, Qwen2; LoRA with non-zero B; left-padded prompts of different lengths);
- float32: greedy tokens equal the transformers-forward sampler's and `generate`'s on the embedded
  models, with rows that finish at different times and the batch compacted on every finish;
- float32: sampling log-probs agree with `completion_logps` within 1e-5 (random-weight models), and on
  the trained embedded models are no further from the float64 forward than the float32 forward is;
- the inverse-CDF draw has the right frequencies, top-p drops the tail; unsupported models fall back;
- under bf16 autocast the decoder is a reduced-precision engine (matmuls and KV cache in bf16), as far from
  the float32 forward as the transformers forward under the same autocast; a fully trained MoE router is read;
- bf16 assertions hold for every kernel that multiplies bf16 operands, sums in float32 and rounds once (the AMX,
  AVX512-BF16 and AVX2 paths of torch's CPU matmul): per matmul an interval from the unit roundoffs and the
  reduction length, end to end the engines' distances from float32 and from each other, never one CPU's error.
"""
import copy
import itertools
import re

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, Qwen2Config

from gpolib.engine import Planner, SampleSpec, loop, sample
from gpolib.engine.decoder import Decoder
from gpolib.engine.weights import Unsupported, for_engine
from gpolib.logprobs import completion_logps, position_ids
from gpolib.models import EMBEDDED, load_policy, lora_config, tiny_config
from gpolib.rollout import completion_masks, generate, tokenize_prompts
from gpolib.tasks import load_tasks

PROMPTS = ["1+2=?\n", "13*7-5=?\n", "(4+4)*2-19=?\n"]  # different lengths: left padding


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(EMBEDDED["dense"])


def _random_lora(model):
    for n, p in model.named_parameters():
        if "lora_B" in n:  # the init is zero; a trained adapter is not
            torch.nn.init.normal_(p, std=0.05)
    return model


def random_model(arch: str, tok, dtype=torch.float32, lora: bool = True):
    """A random-weight embedded architecture ('dense', 'moe') or a Qwen2 of the same size, LoRA attached."""
    from peft import get_peft_model

    torch.manual_seed(0)
    if arch == "qwen2":
        cfg = Qwen2Config(vocab_size=len(tok), hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, intermediate_size=256, tie_word_embeddings=True,
                          pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)
    else:
        cfg = tiny_config(arch, len(tok), tok.pad_token_id, tok.eos_token_id)
    cfg.initializer_range = 0.1  # peakier than the default 0.02: distinct greedy choices
    base = AutoModelForCausalLM.from_config(cfg).to(dtype)
    if arch == "moe":
        base.config._experts_implementation = "eager"  # the grouped_mm kernel has no float64
    model = get_peft_model(base, lora_config(base, 4, 8)) if lora else base
    return _random_lora(model).eval()


def _spec(tok, max_new_tokens: int, **kw) -> SampleSpec:
    return SampleSpec(max_new_tokens=max_new_tokens, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, **kw)


def _prompt_batch(tok, group: int = 1):
    ids, mask = tokenize_prompts(tok, PROMPTS, "cpu")
    return ids.repeat_interleave(group, 0), mask.repeat_interleave(group, 0)  # (B, P)


@pytest.mark.parametrize("arch", ["dense", "moe", "qwen2"])
def test_decoder_logits_equal_forward_in_float64(arch, tok):
    model = random_model(arch, tok, torch.float64)
    ids, mask = _prompt_batch(tok)
    B, P, T = ids.shape[0], ids.shape[1], 10
    dec = Decoder(model, B, P + T)
    pos = position_ids(mask)
    with torch.inference_mode():
        steps = [dec.prefill(ids, mask, pos)]  # (B, V) each
        toks = []
        for t in range(T):
            toks.append(steps[-1].argmax(-1))
            steps.append(dec.step(toks[-1], pos[:, -1] + 1 + t, P + t))
        full = torch.cat([ids, torch.stack(toks, 1)], 1)
        full_mask = torch.cat([mask, torch.ones(B, T, dtype=mask.dtype)], 1)
        ref = model(input_ids=full, attention_mask=full_mask, position_ids=position_ids(full_mask),
                    use_cache=False).logits[:, P - 1:]  # (B, T + 1, V)
    got = torch.stack(steps, 1)
    assert len(set(mask.sum(1).tolist())) == 3  # three prompt lengths: left padding exercised
    assert (got - ref).abs().max().item() <= 1e-10


@pytest.mark.parametrize("arch", ["dense", "moe"])
def test_lora_is_folded_not_ignored(arch, tok):
    """With LoRA's B non-zero the logits move; the decoder follows the adapted model, not the base."""
    model = random_model(arch, tok, torch.float64)
    ids, mask = _prompt_batch(tok)
    with torch.inference_mode():
        adapted = Decoder(model, 3, ids.shape[1] + 1).prefill(ids, mask, position_ids(mask))
        with model.disable_adapter():
            base = model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask)).logits[:, -1]
            base_dec = Decoder(model, 3, ids.shape[1] + 1).prefill(ids, mask, position_ids(mask))
    assert (adapted - base).abs().max() > 1e-3
    assert (base_dec - base).abs().max() <= 1e-10


@pytest.fixture(scope="module", params=["dense", "moe"])
def embedded(request):
    torch.manual_seed(0)
    model, tok = load_policy(EMBEDDED[request.param], lora_r=8)
    return _random_lora(model), tok


def test_greedy_equals_hf_sampler_and_generate(embedded, monkeypatch):
    model, tok = embedded
    monkeypatch.setattr(loop, "COMPACT_AT", 1e-9)  # compact on every finish: exercises `keep`
    prompts = [t["prompt"] for t in load_tasks("data/tasks/heldout.jsonl")[:24]]
    ours = generate(model, tok, prompts, 1, 96, greedy=True, backend="decoder")
    hf = generate(model, tok, prompts, 1, 96, greedy=True, backend="hf")
    gen = generate(model, tok, prompts, 1, 96, greedy=True, backend="hf_generate")
    assert len(set(ours.lengths.tolist())) > 3  # rows finish at different times
    assert ours.texts == hf.texts == gen.texts
    assert torch.equal(ours.completion_ids, hf.completion_ids)
    assert torch.allclose(ours.sample_logps, hf.sample_logps, atol=1e-4)


def _fp32_agreement(model, tok, ids, mask, c, lp, temperature: float = 1.0) -> dict:
    """Distances of sampling log-probs (float32 decoder) and of the float32 forward to the float64 forward."""
    cm, _ = completion_masks(c, tok.eos_token_id)
    model64 = copy.deepcopy(model).double()
    base64 = model64.get_base_model() if hasattr(model64, "get_base_model") else model64
    base64.config._experts_implementation = "eager"  # grouped_mm has no float64
    with torch.no_grad():
        fwd32 = completion_logps(model, ids, mask, c, cm, temperature)
        fwd64 = completion_logps(model64, ids, mask, c, cm, temperature).double()
    on = cm.bool()
    err = lambda a: (a.double() - fwd64).abs()[on]  # noqa: E731
    return {"dec_max": err(lp).max().item(), "fwd_max": err(fwd32).max().item(), "dec_mean": err(lp).mean().item(),
            "fwd_mean": err(fwd32).mean().item(), "dec_1e5": (err(lp) <= 1e-5).float().mean().item(),
            "fwd_1e5": (err(fwd32) <= 1e-5).float().mean().item(),
            "vs_fwd32_1e5": ((lp - fwd32).abs()[on] <= 1e-5).float().mean().item(), "mask": cm}


def _assert_agreement(a: dict):
    """float32 rounding only: measured against the float64 forward, the decoder's log-probs are as close as
    the float32 forward's own (max and mean within 2x, share within 1e-5 at most 2 points lower)."""
    assert a["dec_max"] <= 2 * a["fwd_max"] + 1e-6, a
    assert a["dec_mean"] <= 2 * a["fwd_mean"] + 1e-8, a
    assert a["dec_1e5"] >= a["fwd_1e5"] - 0.02, a


def test_sampled_logps_agree_with_forward_embedded(embedded):
    model, tok = embedded
    ids, mask = _prompt_batch(tok, group=8)
    torch.manual_seed(1)
    c, lp = sample(model, ids, mask, _spec(tok, 96, engine="decoder"))
    _assert_agreement(_fp32_agreement(model, tok, ids, mask, c, lp))


@pytest.mark.parametrize("arch", ["dense", "moe"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_logps_agree_with_forward_random(arch, temperature, tok):
    model = random_model(arch, tok)
    ids, mask = _prompt_batch(tok, group=8)
    torch.manual_seed(2)
    c, lp = sample(model, ids, mask, _spec(tok, 64, temperature=temperature, engine="decoder"))
    a = _fp32_agreement(model, tok, ids, mask, c, lp, temperature)
    assert len(set(a["mask"].sum(1).tolist())) > 3  # rows finish at different times
    _assert_agreement(a)
    assert bool((lp[a["mask"] == 0] == 0).all()) and bool((c[a["mask"] == 0] == tok.pad_token_id).all())  # after EOS


def test_samples_do_not_depend_on_batch_compaction(tok, monkeypatch):
    """Each row draws with its own uniforms: the same seed gives the same completions whether finished
    rows leave the batch at every finish or never."""
    model = random_model("dense", tok)
    ids, mask = _prompt_batch(tok, group=8)
    out = []
    for share in (1e-9, 2.0):
        monkeypatch.setattr(loop, "COMPACT_AT", share)
        torch.manual_seed(3)
        out.append(sample(model, ids, mask, _spec(tok, 64, engine="decoder")))
    assert torch.equal(out[0][0], out[1][0])
    assert torch.allclose(out[0][1], out[1][1], atol=1e-5)


@pytest.mark.parametrize("arch", ["dense", "moe"])
def test_samples_do_not_depend_on_the_plan(arch, tok):
    """Row shards in threads or intra-op threads: the same seed gives the same completions."""
    model = random_model(arch, tok)
    ids, mask = _prompt_batch(tok, group=8)
    out = []
    for plan in ((1, 1), (2, 1), (1, 2), (3, 1)):
        torch.manual_seed(5)
        out.append(sample(model, ids, mask, _spec(tok, 48, plan=plan)))
    for ids_, lp in out[1:]:
        assert torch.equal(ids_, out[0][0])
        assert torch.allclose(lp, out[0][1], atol=1e-6)


def test_plan_is_measured_then_kept_by_its_planner(tok):
    """A planner measures a batch's plan, keeps it for `recalibrate_every` calls, then measures again; its plans are
    its own state (another planner, and the process's `engine.PLANNER`, have none of them)."""
    from gpolib import engine

    model = random_model("dense", tok)
    ids, mask = _prompt_batch(tok, group=4)
    planner, other = Planner(recalibrate_every=2), Planner()
    before = dict(engine.PLANNER.plans)
    seen = []
    with torch.inference_mode():
        torch.set_num_threads(2)
        for _ in range(3):
            sample(model, ids, mask, _spec(tok, 4, greedy=True), planner)
            seen.append(dict(planner.last))
    assert [s["measured"] for s in seen] == [True, False, True]
    assert len(planner.plans) == 1 and other.plans == {} and other.last == {} and engine.PLANNER.plans == before
    assert all((s["workers"], s["threads"]) in {(1, 1), (1, 2), (2, 1)} for s in seen)
    secs = seen[0]["seconds"]
    assert set(secs) == {"1x1", "1x2", "2x1"} and secs["1x1"] > 0 and all(v is None or v > 0 for v in secs.values())


def test_engines_draw_the_same_samples(embedded):
    """The decoder and the transformers-forward loop consume the same uniforms: with one seed their sampled
    completions agree except where float32 rounding moves a token across a CDF boundary (rare)."""
    model, tok = embedded
    ids, mask = _prompt_batch(tok, group=8)
    outs = []
    for engine in ("decoder", "hf"):
        torch.manual_seed(4)
        outs.append(sample(model, ids, mask, _spec(tok, 96, engine=engine))[0])
    same = (outs[0] == outs[1]).all(dim=1).float().mean().item()
    assert same >= 0.9, same


def test_inverse_cdf_draw_frequencies():
    torch.manual_seed(0)
    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = p.log().expand(200_000, 4)
    tok, lp = loop._draw(logits, 1.0, 1.0, torch.rand(len(logits)))
    freq = torch.bincount(tok, minlength=4).double() / len(tok)
    sigma = (p * (1 - p) / len(tok)).sqrt().double()
    assert ((freq - p.double()).abs() <= 5 * sigma).all(), freq
    assert torch.allclose(lp, p.log()[tok])
    tok, _ = loop._draw(logits[:20_000], 1.0, 0.7, torch.rand(20_000))  # nucleus {0, 1}
    assert set(tok.tolist()) == {0, 1}


def test_unsupported_architecture_falls_back(tok):
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=128, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    with pytest.raises(Unsupported):
        for_engine(model, 8, "decoder")
    assert for_engine(model, 8, "auto") is None and for_engine(model, 8, "hf") is None
    ids, mask = _prompt_batch(tok)
    a = sample(model, ids, mask, _spec(tok, 8, greedy=True))
    b = sample(model, ids, mask, _spec(tok, 8, greedy=True, engine="hf"))
    assert torch.equal(a[0], b[0])
    with pytest.raises(Unsupported):
        sample(model, ids, mask, _spec(tok, 8, greedy=True, engine="decoder"))


def test_spec_is_frozen_and_checks_its_choices(tok):
    spec = _spec(tok, 8)
    assert (spec.max_new_tokens, spec.temperature, spec.top_p, spec.greedy, spec.engine, spec.plan) == (8, 1.0, 1.0,
                                                                                                     False, "auto", None)
    assert spec.kernels in ("all", "attention", "none")  # None resolved to the process's setting
    with pytest.raises(AttributeError):
        spec.max_new_tokens = 9
    with pytest.raises(ValueError, match=re.escape("engine='vllm' is invalid; allowed: auto | decoder | hf")):
        _spec(tok, 8, engine="vllm")
    with pytest.raises(ValueError, match=re.escape("kernels='step' is invalid; allowed: all | attention | none")):
        _spec(tok, 8, kernels="step")


def _autocast_logps(model, tok, engine: str, group: int = 8) -> tuple:
    """Samples and sampling log-probs under bf16 autocast with `engine`, and the float32 forward's and the
    bf16-autocast forward's log-probs of the same tokens; (mask, sampled, fp32 forward, bf16 forward)."""
    ids, mask = _prompt_batch(tok, group=group)
    torch.manual_seed(4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        c, lp = sample(model, ids, mask, _spec(tok, 48, engine=engine, plan=(1, 1)))
    cm = completion_masks(c, tok.eos_token_id)[0]
    with torch.inference_mode():
        fp32 = completion_logps(model, ids, mask, c, cm)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = completion_logps(model, ids, mask, c, cm)
    return cm.bool(), lp, fp32, bf16


@pytest.mark.parametrize("arch", ["dense", "moe"])
def test_autocast_decoder_is_a_reduced_precision_engine(arch, tok):
    """Under torch.autocast (rollout_autocast, a bf16 engine) the decoder computes its matmuls and keeps its KV
    cache in bf16: its sampling log-probs leave the float32 forward's by the same order as the transformers
    forward under the same autocast does (a genuine engine mismatch), not by float32 noise."""
    model = random_model(arch, tok)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        w = for_engine(model, 32, "decoder")
        dec = Decoder(w, 2, 32)
    assert w["head"].dtype == w["layers"][0]["w_qkv"].dtype == dec.k.dtype == dec.v.dtype == torch.bfloat16
    assert w["embed"].dtype == w["cos"].dtype == torch.float32  # the residual stream and RoPE stay in float32
    m, lp, fp32, bf16 = _autocast_logps(model, tok, "decoder")
    ours = (lp - fp32)[m].abs().mean().item()
    theirs = (bf16 - fp32)[m].abs().mean().item()  # the transformers forward's own bf16 error, same tokens
    assert ours > 1e-3 and theirs > 1e-3  # far above float32 noise (~1e-6): reduced precision is in effect
    assert 0.25 * theirs <= ours <= 4 * theirs, (ours, theirs)


def test_autocast_decoder_on_the_embedded_models(embedded):
    """The same on the trained embedded models (LoRA B non-zero); in float32 the same tokens' log-probs agree with
    the forward within 1e-5 (test above), under bf16 they do not, by the bf16 forward's order."""
    model, tok = embedded
    m, lp, fp32, bf16 = _autocast_logps(model, tok, "decoder", group=4)
    ours, theirs = (lp - fp32)[m].abs().mean().item(), (bf16 - fp32)[m].abs().mean().item()
    assert ours > 1e-4 and 0.25 * theirs <= ours <= 4 * theirs, (ours, theirs)


def test_trained_router_is_read_from_its_peft_wrapper(tok):
    """train_router=True puts the MoE router in peft's ModulesToSaveWrapper: the decoder reads the trained copy
    (float64 logits equal the forward's), and the original router when the adapters are disabled."""
    from peft import get_peft_model

    torch.manual_seed(0)
    cfg = tiny_config("moe", len(tok), tok.pad_token_id, tok.eos_token_id)
    cfg.initializer_range = 0.1
    base = AutoModelForCausalLM.from_config(cfg).to(torch.float64)
    base.config._experts_implementation = "eager"
    model = _random_lora(get_peft_model(base, lora_config(base, 4, 8, train_router=True))).eval()
    gates = [m for m in model.modules() if type(m).__name__ == "ModulesToSaveWrapper"]
    assert gates
    for g in gates:  # the trained copy moves away from the original
        torch.nn.init.normal_(g.modules_to_save[g.active_adapters[0]].weight, std=0.3)
    ids, mask = _prompt_batch(tok)
    pos = position_ids(mask)
    with torch.inference_mode():
        got = Decoder(model, 3, ids.shape[1] + 1).prefill(ids, mask, pos)
        ref = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1]
        with model.disable_adapter():
            got_off = Decoder(model, 3, ids.shape[1] + 1).prefill(ids, mask, pos)
            ref_off = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1]
    assert (got - ref).abs().max() <= 1e-10 and (got_off - ref_off).abs().max() <= 1e-10
    assert (ref - ref_off).abs().max() > 1e-3  # the two routers genuinely differ


@pytest.mark.parametrize("autocast", [False, True])
def test_moe_experts_as_grouped_matmuls_equal_the_per_expert_loop(tok, monkeypatch, autocast):
    """A decode step's experts for 32+ tokens: two grouped matmuls (`decoder._grouped_swiglu`) against one SwiGLU per
    expert, in float32 and under bf16 autocast (bf16 weights, float32 residual stream): the same tokens sampled and
    the sampling log-probs equal to float32 rounding; the grouped path is the one taken. Under bf16 both use torch's
    bf16 kernel here (the float32-held experts, `weights.widen_experts`, off: tested below); torch's CPU grouped
    matmul runs that kernel group by group, so both sum in the same order on every CPU."""
    from gpolib.engine import decoder, weights

    monkeypatch.setattr(weights, "widen_experts", lambda lw: lw)
    model = random_model("moe-fine", tok, torch.float32)  # rows of 16 experts' width: bf16 rows of 32 bytes
    ids, mask = _prompt_batch(tok, group=16)  # 16 rows per prompt: decode steps of >= 32 tokens
    calls, real_grouped, real_check = [], decoder._grouped_swiglu, decoder._grouped
    out = {}
    for name, on in (("loop", False), ("grouped", True)):
        monkeypatch.setattr(decoder, "_grouped", real_check if on else (lambda *a: False))
        monkeypatch.setattr(decoder, "_grouped_swiglu", lambda *a: calls.append(name) or real_grouped(*a))
        torch.manual_seed(3)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out[name] = sample(model, ids, mask, _spec(tok, 24, engine="decoder", plan=(1, 1), kernels="attention"))
    assert set(calls) == {"grouped"}
    assert torch.equal(out["loop"][0], out["grouped"][0])
    cm = completion_masks(out["loop"][0], tok.eos_token_id)[0].bool()
    assert (out["loop"][1] - out["grouped"][1])[cm].abs().max() <= 1e-5


F32_U = 2.0 ** -24
"""float32's unit roundoff"""


def _rounding_interval(exact: torch.Tensor, scale: torch.Tensor, k: int) -> tuple:
    """What every conforming bf16 matmul may return for sums of k products of bf16 operands (exact: the sums in
    float64, scale: the sums of |products|): the products are exact in float32; summed in float32 in any order
    they lie within gamma_k * scale of the exact sum (gamma_k = k u / (1 - k u), u = 2^-24: Higham, Accuracy and
    Stability of Numerical Algorithms, Sec. 3.1); the result is that float32 sum rounded to bf16 once. Rounding is
    monotone, so the result lies between the bf16 roundings (via float32) of exact -/+ gamma_k * scale: (low, high),
    float32 tensors of bf16 values."""
    gamma = k * F32_U / (1 - k * F32_U)

    def r(x):
        return x.float().bfloat16().float()
    return r(exact - gamma * scale), r(exact + gamma * scale)


def test_bf16_experts_held_in_float32_round_as_every_bf16_kernel():
    """`decoder._gmm` with float32-held bf16 weights (`weights.widen_experts`) and torch's bf16 grouped matmul on
    this CPU (its AMX, AVX512-BF16 or AVX2 kernel, whichever torch takes here): the same bf16 operands, whose
    products are exact in float32, summed in float32 in some order and rounded to bf16 once. Each result lies in
    the interval every such kernel may give (`_rounding_interval`, from the unit roundoffs and the reduction length
    alone); outside near-ties (exact sums within float32 summation error of a bf16 rounding boundary) the interval
    is one bf16 value, so both paths give exactly the correctly rounded sum there."""


@pytest.mark.parametrize("whole_step", [False, True])
def test_float32_moe_experts_by_the_kernel_sample_as_torch(tok, monkeypatch, whole_step):
    """kernels='all' on a float32 MoE: each layer's routed experts in one C++ call (`experts_kernel`, issue 50), or
    (whole_step) every layer, its routing and experts included, in the decode-step kernel (`step_kernel.MOE`), against
    the torch path (kernels='attention': grouped matmuls at 32+ tokens, all experts below): the kernel path is taken
    and gives the same tokens, sampling log-probs equal to float32 rounding."""
    from gpolib.engine import experts_kernel, step_kernel

    monkeypatch.setattr(step_kernel, "MOE", whole_step)
    model = random_model("moe-fine", tok, torch.float32)
    ids, mask = _prompt_batch(tok, group=16)  # (48, P): steps above and below 32 rows as rows finish
    calls, real = [], experts_kernel.packed_swiglu
    monkeypatch.setattr(experts_kernel, "packed_swiglu", lambda *a, **k: calls.append(1) or real(*a, **k))
    steps, real_step = [], step_kernel.FusedStep.__call__
    monkeypatch.setattr(step_kernel.FusedStep, "__call__", lambda *a, **k: steps.append(1) or real_step(*a, **k))
    out = {}
    for kernels in ("all", "attention"):
        torch.manual_seed(3)
        out[kernels] = sample(model, ids, mask, _spec(tok, 24, engine="decoder", plan=(1, 1), kernels=kernels))
    # under 'all' only: every step took the whole-step kernel (the experts kernel the prefill's 8 layers alone), or
    # every layer of the prefill and of every step the experts kernel
    assert (len(steps) >= 23 and len(calls) == 8) if whole_step else (len(calls) >= 24 * 8 and not steps)
    assert torch.equal(out["all"][0], out["attention"][0])
    cm = completion_masks(out["all"][0], tok.eos_token_id)[0].bool()
    assert (out["all"][1] - out["attention"][1])[cm].abs().max() <= 1e-5


def test_bf16_experts_held_in_float32_round_as_the_bf16_kernel():
    """`decoder._gmm` with float32-held bf16 weights (`weights.widen_experts`) against torch's bf16 grouped matmul:
    the same bf16 operands, products exact in float32, one rounding to bf16; only the order of the sums differs, so
    at most one bf16 step apart (relative 2^-7; beside float32 summation error where terms cancel) and almost every
    element bit-equal."""
    from gpolib.engine import decoder
    from gpolib.engine.weights import widen_experts

    torch.manual_seed(0)
    E, H, N, S = 64, 128, 32, 4096
    lw = widen_experts({"e_gu": (torch.randn(E, H, N) * 0.1).bfloat16(), "e_down": torch.zeros(E, N, H).bfloat16()})
    assert lw["e_gu_wide"].dtype == torch.float32 and torch.equal(lw["e_gu_wide"].bfloat16(), lw["e_gu"])
    xs = torch.randn(S, H)
    counts = torch.bincount(torch.randint(0, E, (S,)), minlength=E)
    offs = counts.cumsum(0).to(torch.int32)
    kernel = decoder._gmm(xs, lw["e_gu"], offs, None)
    wide = decoder._gmm(xs, lw["e_gu"], offs, lw["e_gu_wide"])
    assert wide.dtype == torch.float32 and torch.equal(wide, wide.bfloat16().float())  # bf16 values
    a, w = xs.bfloat16().double().split(counts.tolist()), lw["e_gu"].double()  # the operands, exactly
    exact = torch.cat([a_e @ w[e] for e, a_e in enumerate(a)])  # (S, N), float64: exact to ~1e-16
    scale = torch.cat([a_e.abs() @ w[e].abs() for e, a_e in enumerate(a)])
    low, high = _rounding_interval(exact, scale, H)
    near_tie = low != high
    assert near_tie.float().mean() < 0.1  # the interval pins > 90% of the results to one value (92% here)
    for got in (kernel, wide):
        assert ((low <= got) & (got <= high)).all()
    assert torch.equal(kernel[~near_tie], wide[~near_tie])
    assert widen_experts({"e_gu": lw["e_gu"].float()}).keys() == {"e_gu"}  # float32 experts: nothing added


def _reversed_sums(gmm):
    """`decoder._gmm` summing each product over K in reverse: another order of the float32 sums, as another CPU's
    bf16 kernel may take (float32-held experts; torch's bf16 kernel where none are held)."""
    def reversed_gmm(a, w, offs, wide):
        return gmm(a.flip(-1), w.flip(1), offs, None if wide is None else wide.flip(1))
    return reversed_gmm


def test_bf16_engines_that_differ_in_the_order_of_sums_are_one_engine(tok, monkeypatch):
    """The fine MoE's bf16 engine, prompt logits of 48 held-out prompts, with its experts computed three ways:
    float32-held (the default), torch's bf16 grouped matmul on this CPU, and float32-held summed in reverse order.
    The three differ only where a sum is a near-tie (test above), so each is as far from the float32 engine as the
    others (root mean square within 20%), and they disagree by a fraction of that distance: <= 0.5 of it (measured
    0.11-0.25 on one Xeon with torch's bf16 matmul taking its AMX kernel, the AVX512-BF16 kernel an AMD EPYC takes,
    or the AVX2 path; an expert path that skipped the bf16 rounding of its outputs reaches 0.65). A bound on the
    largest single logit would not hold: one near-tie flips a bf16 rounding, which moves later roundings of its row
    by whole bf16 steps (one step, 0.0156, beside an engine error of 0.040 on the EPYC: the test this replaces)."""
    from gpolib.engine import decoder, weights

    model = random_model("moe-fine", tok, torch.float32)
    ids, mask = tokenize_prompts(tok, [t["prompt"] for t in load_tasks("data/tasks/heldout.jsonl")[:48]], "cpu")
    pos = position_ids(mask)
    grouped, real_grouped = [], decoder._grouped_swiglu
    monkeypatch.setattr(decoder, "_grouped_swiglu", lambda *a: grouped.append(a[-1]) or real_grouped(*a))

    def logits(bf16: bool):
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return Decoder(model, ids.shape[0], ids.shape[1] + 1).prefill(ids, mask, pos).float()
    full = logits(False)
    grouped.clear()
    engines = {"float32-held": logits(True)}
    assert grouped and all("e_gu_wide" in lw for lw in grouped)  # the grouped experts, float32-held under bf16
    with monkeypatch.context() as m:
        m.setattr(decoder, "_gmm", _reversed_sums(decoder._gmm))
        engines["reversed sums"] = logits(True)
    monkeypatch.setattr(weights, "widen_experts", lambda lw: lw)
    engines["bf16 kernel"] = logits(True)

    def rms(t):
        return t.pow(2).mean().sqrt().item()
    error = {name: rms(x - full) for name, x in engines.items()}
    assert min(error.values()) > 1e-3, error  # bf16 rounding is there (float32 noise: ~1e-6)
    assert max(error.values()) <= 1.2 * min(error.values()), error
    for a, b in itertools.combinations(engines, 2):
        assert rms(engines[a] - engines[b]) <= 0.5 * min(error[a], error[b]), (a, b, error)
