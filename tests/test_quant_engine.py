"""The 8-bit rollout engine (`TrainConfig.rollout_weights='int8'`, gpolib/engine/quant.py): per-channel symmetric
int8 as torch's quantizer computes it, the decoder's log-probs those of the quantized model, the trainer and held-out
evaluation on the float32 policy, clear errors, run identity and export."""
import copy

import pytest
import torch

from gpolib import presets
from gpolib.engine import SampleSpec, sample
from gpolib.engine.quant import int8_per_channel, int8_per_token, stacked, torch_int8_per_channel
from gpolib.engine.weights import for_engine
from gpolib.eval_cache import EVAL_FIELDS
from gpolib.export import UnsupportedFeature, to_trl, to_verl
from gpolib.logprobs import completion_logps
from gpolib.rollout import completion_masks
from gpolib.train import Trainer
from test_sampler import _prompt_batch, _spec, random_model, tok  # noqa: F401  (tok: the fixture)

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def test_int8_per_channel_hand_values():
    """Row 0: s = 1/127, 0.25 -> round(31.75) = 32 -> 32/127; row 1: s = 0.03/127, 0.01 -> round(42.33) = 42."""
    w = torch.tensor([[1.0, -0.5, 0.25], [0.01, 0.02, -0.03]])
    want = torch.tensor([[1.0, -64 / 127, 32 / 127], [42 * 0.03 / 127, 85 * 0.03 / 127, -0.03]])
    assert torch.allclose(int8_per_channel(w), want, atol=1e-7, rtol=0)


def test_int8_per_channel_bit_equal_to_torchs_quantizer():
    """`int8_per_channel` (plain tensor ops) against torch's own per-channel qint8 quantizer and dequantizer, bit for
    bit (`quant.torch_int8_per_channel`): rows of magnitudes 1e-6 to 1e3, exact halves of a step (round half to
    even), zero rows, bf16 weights."""
    torch.manual_seed(0)
    for i in range(120):
        w = torch.randn(32, 96) * torch.logspace(-6, 3, 32).unsqueeze(1)
        if i % 3 == 0:  # halves: with a row max of 127 the step is 1, so k + 0.5 lies exactly between two steps
            w[:4] = torch.randint(-254, 254, (4, 96)).float() / 2
            w[:4, 0] = 127.0
        w[5] = 0.0
        for x in (w, w.bfloat16()):
            assert torch.equal(int8_per_channel(x), torch_int8_per_channel(x))


def test_int8_error_within_half_a_step_of_each_row():
    """|W~ - W| <= max|w_row| / 254 per row, W~ on the row's grid s_o k (k integer in [-127, 127]), and not W."""
    torch.manual_seed(0)
    w = torch.randn(64, 48) * torch.logspace(-3, 1, 64).unsqueeze(1)  # rows of very different scales
    wq = int8_per_channel(w)
    amax = w.abs().amax(dim=1, keepdim=True)  # (64, 1)
    assert ((wq - w).abs() <= amax / 254 * (1 + 1e-5)).all()
    k = wq / (amax / 127)
    assert torch.allclose(k, k.round(), atol=1e-3) and k.abs().max() <= 127 + 1e-3
    assert (wq != w).float().mean() > 0.9
    e = torch.randn(3, 8, 5)
    assert torch.equal(stacked(int8_per_channel, e)[1], int8_per_channel(e[1]))  # each expert's rows on their own


def _quantized_copy(model):
    """The transformers model with every layer projection's effective weight (LoRA merged) quantized."""
    q = copy.deepcopy(model).merge_and_unload()
    with torch.no_grad():
        for name, mod in q.named_modules():
            if name.rsplit(".", 1)[-1] in PROJECTIONS and isinstance(mod, torch.nn.Linear):
                mod.weight.copy_(int8_per_channel(mod.weight))
            if type(mod).__name__ == "Qwen3MoeExperts":
                mod.gate_up_proj.copy_(stacked(int8_per_channel, mod.gate_up_proj))
                mod.down_proj.copy_(stacked(int8_per_channel, mod.down_proj))
    return q


@pytest.mark.parametrize("arch", ["dense", "moe"])
def test_decoder_logps_are_the_quantized_models(arch, tok):  # noqa: F811
    """int8 sampling log-probs leave the float32 model's (a real mismatch) and equal the transformers forward of
    the same dequantized weights to 1e-5."""
    model = random_model(arch, tok)
    ids, mask = _prompt_batch(tok, group=4)
    torch.manual_seed(3)
    c, lp = sample(model, ids, mask, _spec(tok, 40, engine="decoder", weights="int8", plan=(1, 1)))
    cm = completion_masks(c, tok.eos_token_id)[0]
    with torch.inference_mode():
        fp32 = completion_logps(model, ids, mask, c, cm)
        int8 = completion_logps(_quantized_copy(model), ids, mask, c, cm)
    on = cm.bool()
    assert (lp - int8)[on].abs().max().item() <= 1e-5
    assert (lp - fp32)[on].abs().mean().item() > 1e-4  # far above float32 noise (~1e-6)
    w = for_engine(model, 32, "decoder", "int8")
    assert w["embed"].dtype == w["layers"][0]["w_qkv"].dtype == torch.float32  # W8A32: float32 arithmetic


def test_unsupported_combinations_fail_clearly(tiny_cfg):
    with pytest.raises(ValueError, match="engine='decoder'"):
        SampleSpec(max_new_tokens=4, eos_id=0, pad_id=0, engine="auto", weights="int8")
    for bad in (dict(backend="hf"), dict(backend="vllm"), dict(rollout_autocast="bfloat16"), dict(rollout_weights="int4")):
        with pytest.raises(ValueError, match="rollout_weights"):
            tiny_cfg("grpo", **{"rollout_weights": "int8", **bad})


def test_identity_export_and_evaluation(tiny_cfg):
    """rollout_weights is part of the run identity, not of the evaluation's: held-out evaluation samples the
    float32 policy (equal numbers with and without the int8 engine), training rollouts the quantized one."""
    assert presets.get("grpo", rollout_weights="int8").identity()["rollout_weights"] == "int8"
    assert "rollout_weights" not in presets.get("grpo").identity() and "rollout_weights" not in EVAL_FIELDS
    for export in (to_trl, to_verl):
        with pytest.raises(UnsupportedFeature, match="rollout_weights"):
            export(presets.get("grpo", rollout_weights="int8"))
    small = dict(steps=1, prompts_per_step=2, max_new_tokens=32, eval_prompts=4)
    fp, q = Trainer(tiny_cfg("grpo", **small)), Trainer(tiny_cfg("grpo", **small, rollout_weights="int8"))
    assert fp.evaluate(0) == q.evaluate(0)
    ro = q.collect(0).rollout
    on = ro.completion_mask.bool()
    trainer = q.policy_logps(ro)  # (B, T) float32 policy
    assert (ro.sample_logps - trainer)[on].abs().mean() > 1e-4


# ---------------------------------------------------------------- W8A8: int8 activations per token as well

def test_int8_per_token_hand_values_and_rows():
    """One scale per row of the last dim, any leading shape: row [1, -0.5, 0.25] -> [1, -64/127, 32/127]."""
    x = torch.tensor([[[1.0, -0.5, 0.25], [0.01, 0.02, -0.03]]])  # (1, 2, 3)
    want = torch.tensor([[[1.0, -64 / 127, 32 / 127], [42 * 0.03 / 127, 85 * 0.03 / 127, -0.03]]])
    got = int8_per_token(x)
    assert got.shape == x.shape and torch.allclose(got, want, atol=1e-7, rtol=0)
    assert torch.equal(int8_per_token(got), got)  # a quantized row is on its own grid


def _w8a8_reference(model):
    """The transformers model as the 'w8a8' decoder computes: projection weights int8 per output row, then each
    RMSNorm's weight folded into the columns of the projections it feeds (norm weight 1), and every projection's
    input quantized per token by a forward pre-hook. Dense models only (the experts' inner product has no hook)."""
    q = _quantized_copy(model)
    hooks = []
    with torch.no_grad():
        for layer in q.model.layers:
            for norm, projs in ((layer.input_layernorm, (layer.self_attn.q_proj, layer.self_attn.k_proj,
                                                         layer.self_attn.v_proj)),
                                (layer.post_attention_layernorm, (layer.mlp.gate_proj, layer.mlp.up_proj))):
                for p in projs:
                    p.weight.mul_(norm.weight.unsqueeze(0))
                norm.weight.fill_(1.0)
    for name, mod in q.named_modules():
        if name.rsplit(".", 1)[-1] in PROJECTIONS:
            hooks.append(mod.register_forward_pre_hook(lambda m, args: (int8_per_token(args[0]),)))
    return q


def test_w8a8_decoder_equals_the_quantized_forward_with_quantized_inputs(tok):  # noqa: F811
    """Dense, in float64 (where no input sits within rounding noise of a quantization boundary; in float32 about 1%
    of tokens flip one step and carry it along their row): 'w8a8' sampling log-probs equal the transformers forward
    of `_w8a8_reference` to 1e-5, and sit further from the unquantized model than the weight-only engine's."""
    model = random_model("dense", tok, torch.float64)
    ids, mask = _prompt_batch(tok, group=4)
    torch.manual_seed(3)
    c, lp = sample(model, ids, mask, _spec(tok, 40, engine="decoder", weights="w8a8", plan=(1, 1)))
    cm = completion_masks(c, tok.eos_token_id)[0]
    on = cm.bool()
    with torch.inference_mode():
        ref = completion_logps(_w8a8_reference(model), ids, mask, c, cm)
        fp32 = completion_logps(model, ids, mask, c, cm)
        w8 = completion_logps(_quantized_copy(model), ids, mask, c, cm)
    assert (lp - ref)[on].abs().max().item() <= 1e-5
    assert (lp - fp32)[on].abs().mean() > 1.5 * (w8 - fp32)[on].abs().mean()  # activations add error


def test_w8a8_moe_paths_agree(tok, monkeypatch):  # noqa: F811
    """MoE 'w8a8': the all-experts path (few tokens) and the grouped path give the same log-probs (each expert's
    SwiGLU product quantized per (token, expert) row in both), and differ from the weight-only engine's."""
    from gpolib.engine import decoder

    model = random_model("moe", tok, torch.float64)  # float64: no rounding-noise flips (see above)
    ids, mask = _prompt_batch(tok, group=4)
    out = {}
    for name, below in (("dense", 10 ** 9), ("grouped", 0)):
        monkeypatch.setattr(decoder, "MOE_DENSE_BELOW", below)
        torch.manual_seed(3)
        out[name] = sample(model, ids, mask, _spec(tok, 24, engine="decoder", weights="w8a8", plan=(1, 1),
                                                   kernels="none"))
    assert torch.equal(out["dense"][0], out["grouped"][0])
    cm = completion_masks(out["dense"][0], tok.eos_token_id)[0].bool()
    assert (out["dense"][1] - out["grouped"][1])[cm].abs().max() <= 1e-5
    with torch.inference_mode():
        w8 = completion_logps(_quantized_copy(model), ids, mask, out["dense"][0], cm.float())
    assert (out["dense"][1] - w8)[cm].abs().mean() > 1e-4
