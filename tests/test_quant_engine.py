"""The 8-bit rollout engine (`TrainConfig.rollout_weights='int8'`, gpolib/engine/quant.py): per-channel symmetric
int8 by torch's quantizer, the decoder's log-probs those of the quantized model, the trainer and held-out
evaluation on the float32 policy, clear errors, run identity and export."""
import copy

import pytest
import torch

from gpolib import presets
from gpolib.engine import SampleSpec, sample
from gpolib.engine.quant import int8_per_channel, stacked
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
