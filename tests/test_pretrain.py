"""Supervised pretraining in length-sorted micro-batches (`pretrain.batch_step`): the padded batch's loss and
gradient, with less padding; the load-balancing term counted once per batch."""
import random

import pytest
import torch
from transformers import AutoModelForCausalLM

from gpolib.models import tiny_config
from gpolib.pretrain import PretrainConfig, batch_step, reserved_prompts, sft_batch
from gpolib.tokenizer import build_tokenizer


def _model(arch: str, **overrides):
    tok = build_tokenizer(padding_side="right")
    cfg = tiny_config(arch, len(tok), tok.pad_token_id, tok.eos_token_id)
    for k, v in overrides.items():
        setattr(cfg, k, v)
    torch.manual_seed(0)
    kw = {"experts_implementation": "eager"} if arch != "dense" else {}  # float64: the grouped path takes <= fp32
    return AutoModelForCausalLM.from_config(cfg, **kw).double()


def _batch(n: int = 12):
    tok = build_tokenizer(padding_side="right")
    return sft_batch(reserved_prompts(), tok, random.Random(3), PretrainConfig(arch="dense", batch_size=n))


def _grads(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def test_micro_batches_give_the_padded_loss_and_gradient():
    batch = _batch()
    lengths = batch[1].sum(dim=1)
    assert lengths.min() < lengths.max()  # rows of different lengths: the micro-batches are trimmed differently
    padded, micro = _model("dense"), _model("dense")
    loss_padded = batch_step(padded, batch, 1, is_moe=False)
    loss_micro = batch_step(micro, batch, 3, is_moe=False)
    assert loss_micro == pytest.approx(loss_padded, rel=1e-6)  # transformers computes the loss in float32
    torch.testing.assert_close(_grads(micro), _grads(padded), rtol=1e-5, atol=1e-8)


def test_moe_balancing_loss_is_the_mean_of_the_micro_batches():
    batch = _batch(8)
    ce = _model("moe", router_aux_loss_coef=0.0)
    plain = batch_step(ce, batch, 2, is_moe=True)  # no balancing term: the padded cross-entropy
    assert plain == pytest.approx(batch_step(_model("moe", router_aux_loss_coef=0.0), batch, 1, is_moe=True), rel=1e-6)
    coef = 0.5
    model = _model("moe", router_aux_loss_coef=coef)
    ids, mask, _ = batch
    lengths = mask.sum(dim=1)
    aux = []
    with torch.no_grad():
        for rows in torch.argsort(lengths, stable=True).chunk(2):
            T = int(lengths[rows].max())
            aux.append(model(input_ids=ids[rows, :T], attention_mask=mask[rows, :T], output_router_logits=True).aux_loss)
    assert batch_step(model, batch, 2, is_moe=True) == pytest.approx(plain + coef * float(sum(aux)) / 2, rel=1e-6)


def test_micro_batches_out_of_range_are_refused():
    with pytest.raises(ValueError, match="micro_batches=0"):
        PretrainConfig(arch="dense", micro_batches=0)
    with pytest.raises(ValueError, match="micro_batches=65"):
        PretrainConfig(arch="dense", micro_batches=65, batch_size=64)


def test_the_fine_moe_gradient_repeats_bit_for_bit_on_two_threads():
    """The fine-grained MoE (transformers' grouped expert matmul) on 2 threads: with `runtime.deterministic_cpu`, as the
    trainer and the pre-training set it, two backward passes of one batch give equal gradients in every parameter
    (without it they differed in all 86 on this machine, every time)."""
    from gpolib.runtime import cpu_threads, deterministic_cpu

    deterministic_cpu("cpu")
    assert torch.are_deterministic_algorithms_enabled()
    tok = build_tokenizer(padding_side="right")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config("moe-fine", len(tok), tok.pad_token_id, tok.eos_token_id))
    assert model.config._experts_implementation == "grouped_mm"
    batch = sft_batch(reserved_prompts(), tok, random.Random(0), PretrainConfig(arch="moe-fine", batch_size=32))
    grads = []
    with cpu_threads(2):
        for _ in range(2):
            model.zero_grad(set_to_none=True)
            batch_step(model, batch, 2, True)
            grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 80
    assert [n for n in grads[0] if not torch.equal(grads[0][n], grads[1][n])] == []
