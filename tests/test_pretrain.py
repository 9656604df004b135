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


# ---------------------------------------------------------------- the load-balanced fine MoE (issue 52)

def test_balance_per_layer_on_hand_made_routers():
    """Switch loss per layer, mean over layers: E * sum_e f_e P_e with f the top-k picks per token. 4 experts, top-2,
    2 tokens. Layer A: uniform probabilities (ties pick experts 0, 1 twice): f = (1, 1, 0, 0), P = 1/4 each ->
    4 * 2/4 = 2 = k. Layer B: token 1 -> (0.5, 0.3, 0.1, 0.1), token 2 -> (0.1, 0.1, 0.3, 0.5): f = (1/2 each),
    P = (0.3, 0.2, 0.2, 0.3) -> 4 * 0.5 * 1.0 = 2. Layer C: both tokens (0.5, 0.3, 0.1, 0.1): f = (1, 1, 0, 0),
    P = (0.5, 0.3, 0.1, 0.1) -> 4 * 0.8 = 3.2. A masked third token changes nothing."""
    from gpolib.pretrain import balance_per_layer

    logits = lambda rows: torch.tensor(rows, dtype=torch.float64).log()  # noqa: E731  softmax(log p) = p
    a = torch.zeros(2, 4, dtype=torch.float64)
    b = logits([[0.5, 0.3, 0.1, 0.1], [0.1, 0.1, 0.3, 0.5]])
    c = logits([[0.5, 0.3, 0.1, 0.1], [0.5, 0.3, 0.1, 0.1]])
    mask = torch.ones(2)
    assert balance_per_layer((b,), mask, 2).item() == pytest.approx(2.0)
    assert balance_per_layer((c,), mask, 2).item() == pytest.approx(3.2)
    assert balance_per_layer((b, c), mask, 2).item() == pytest.approx(2.6)  # the mean over layers
    pad = torch.cat([c, logits([[0.1, 0.1, 0.3, 0.5]])])  # a third, masked token
    assert balance_per_layer((pad,), torch.tensor([1.0, 1.0, 0.0]), 2).item() == pytest.approx(3.2)
    assert balance_per_layer((a,), mask, 2).item() == pytest.approx(2.0)


def test_balance_per_layer_raises_a_dead_experts_logit():
    """Its gradient reaches an expert no token picks through the router probabilities: d loss / d z_dead =
    E * P_dead * (f_dead - sum_e f_e P_e) / n per token < 0, so a descent step raises the dead expert's logit."""
    from gpolib.pretrain import balance_per_layer

    z = torch.tensor([[2.0, 1.5, 0.0, -1.0], [1.8, 1.6, 0.1, -1.0]], dtype=torch.float64, requires_grad=True)
    balance_per_layer((z,), torch.ones(2), 2).backward()
    assert (z.grad[:, 3] < 0).all() and (z.grad[:, 0] > 0).all()  # expert 3 never picked: pushed up; 0 down
    p = torch.softmax(z.detach(), dim=-1)
    f = torch.tensor([1.0, 1.0, 0.0, 0.0])  # picks per token
    P = p.mean(dim=0)
    # d/dz_j of 4 * sum_e f_e * mean_t p_te = 4/n * p_tj * (f_j - sum_e f_e p_te)
    expected = 4 / 2 * p[:, 3] * (f[3] - (p * f).sum(dim=1))
    torch.testing.assert_close(z.grad[:, 3], expected)
    assert P.sum().item() == pytest.approx(1.0)


def test_continued_training_starts_from_the_init_weights_with_its_coefficient(tmp_path):
    """`init` loads the shipped weights (no fresh initialisation); aux_per_layer turns transformers' pooled term off
    in training while the config records the coefficient."""
    from gpolib.pretrain import build_model

    tok = build_tokenizer(padding_side="right")
    cfg = PretrainConfig(arch="moe-balanced", init="data/models/tiny-qwen3-moe-fine", aux_coef=0.2,
                         aux_per_layer=True, out=str(tmp_path / "m"))
    model = build_model(cfg, tok)
    shipped = AutoModelForCausalLM.from_pretrained("data/models/tiny-qwen3-moe-fine")
    torch.testing.assert_close(model.model.layers[3].mlp.gate.weight, shipped.model.layers[3].mlp.gate.weight)
    assert model.config.router_aux_loss_coef == 0.2 and model.router_aux_loss_coef == 0.0
    pooled = build_model(PretrainConfig(arch="moe-fine", aux_coef=0.05, out=str(tmp_path / "p")), tok)
    assert pooled.router_aux_loss_coef == 0.05 == pooled.config.router_aux_loss_coef
    with pytest.raises(ValueError, match="aux_coef=-1"):
        PretrainConfig(arch="moe-fine", aux_coef=-1, out=str(tmp_path / "x"))


def test_per_layer_term_in_batch_step_is_the_mean_of_the_micro_batches():
    """batch_step with per_layer_coef: the cross-entropy plus coef x the mean of the micro-batches' per-layer losses."""
    from gpolib.pretrain import balance_per_layer

    batch = _batch(8)
    ce = batch_step(_model("moe", router_aux_loss_coef=0.0), batch, 2, is_moe=True)
    model = _model("moe", router_aux_loss_coef=0.0)
    model.router_aux_loss_coef = 0.0
    ids, mask, _ = batch
    lengths = mask.sum(dim=1)
    per = []
    with torch.no_grad():
        for rows in torch.argsort(lengths, stable=True).chunk(2):
            T = int(lengths[rows].max())
            out = model(input_ids=ids[rows, :T], attention_mask=mask[rows, :T], output_router_logits=True)
            per.append(float(balance_per_layer(out.router_logits, mask[rows, :T].reshape(-1), 2)))
    got = batch_step(model, batch, 2, is_moe=True, per_layer_coef=0.3)
    assert got == pytest.approx(ce + 0.3 * sum(per) / 2, rel=1e-6)


def test_underload_hinge_by_hand():
    """One token, E = 4, k = 2, logits (3, 1, 0, -2): the soft picks' threshold sits midway between the 2nd and 3rd
    logit (0.5): sigmoid(2.5, 0.5, -0.5, -2.5) = (0.9241, 0.6225, 0.3775, 0.0759), above 1/2 exactly at the picks.
    The hinge's value takes the hard picks: loads (E / k x picks) (2, 2, 0, 0); floor 0.5: experts 2 and 3 short by
    0.5 each -> 1.0; floor 0.25 -> 0.5. Two tokens picking (0, 1) and (2, 3): every load 1, nothing short at any
    floor < 1. A masked token changes nothing; two layers: their mean."""
    from gpolib.pretrain import soft_picks, underload_per_layer

    z = torch.tensor([[3.0, 1.0, 0.0, -2.0]], dtype=torch.float64)
    s = soft_picks(z, 2)
    assert s[0].tolist() == pytest.approx([0.9241418, 0.6224593, 0.3775407, 0.0758582], abs=1e-6)
    assert ((s > 0.5) == torch.tensor([[True, True, False, False]])).all()
    one = torch.ones(1)
    assert underload_per_layer((z,), one, 2, 0.5).item() == pytest.approx(1.0)
    assert underload_per_layer((z,), one, 2, 0.25).item() == pytest.approx(0.5)
    even = torch.tensor([[3.0, 1.0, 0.0, -2.0], [-2.0, 0.0, 1.0, 3.0]], dtype=torch.float64)
    assert underload_per_layer((even,), torch.ones(2), 2, 0.9).item() == 0.0
    pad = torch.cat([z, torch.tensor([[-5.0, -5.0, 9.0, 9.0]], dtype=torch.float64)])  # a masked second token
    assert underload_per_layer((pad,), torch.tensor([1.0, 0.0]), 2, 0.5).item() == pytest.approx(1.0)
    assert underload_per_layer((even, z.repeat(2, 1)), torch.ones(2), 2, 0.5).item() == pytest.approx(0.5)  # (0 + 1) / 2


def test_underload_hinge_raises_only_the_short_experts_logits():
    """Straight through the soft picks: d/dz_e of relu(0.5 - 2 pick_e) = -2 s_e (1 - s_e) for a short expert (c
    detached): expert 2 (s = 0.3775) -0.47001, expert 3 (s = 0.0759) -0.14021; experts above the floor get none."""
    from gpolib.pretrain import underload_per_layer

    z = torch.tensor([[3.0, 1.0, 0.0, -2.0]], dtype=torch.float64, requires_grad=True)
    underload_per_layer((z,), torch.ones(1), 2, 0.5).backward()
    assert z.grad[0].tolist() == pytest.approx([0.0, 0.0, -0.4700074, -0.1402074], abs=1e-6)


def test_underload_term_in_batch_step_is_the_mean_of_the_micro_batches():
    """batch_step with floor_coef: the cross-entropy plus coef x the mean of the micro-batches' hinge terms."""
    from gpolib.pretrain import underload_per_layer

    batch = _batch(8)
    ce = batch_step(_model("moe", router_aux_loss_coef=0.0), batch, 2, is_moe=True)
    model = _model("moe", router_aux_loss_coef=0.0)
    model.router_aux_loss_coef = 0.0
    ids, mask, _ = batch
    lengths = mask.sum(dim=1)
    per = []
    with torch.no_grad():
        for rows in torch.argsort(lengths, stable=True).chunk(2):
            T = int(lengths[rows].max())
            out = model(input_ids=ids[rows, :T], attention_mask=mask[rows, :T], output_router_logits=True)
            per.append(float(underload_per_layer(out.router_logits, mask[rows, :T].reshape(-1), 2, 0.9)))
    assert sum(per) > 0  # some expert short of 0.9 x uniform in a fresh router: the term is not vacuous here
    got = batch_step(model, batch, 2, is_moe=True, floor_coef=2.0, floor=0.9)
    assert got == pytest.approx(ce + 2.0 * sum(per) / 2, rel=1e-6)


def test_rebuild_command_names_every_recipe_field():
    from gpolib.model_card import rebuild_command

    rc = {"arch": "moe-balanced", "steps": 120, "seed": 1, "micro_batches": 4, "init": "data/models/tiny-qwen3-moe-fine",
          "lr": 3e-4, "warmup": 10, "aux_coef": 0.2, "aux_per_layer": True}
    assert rebuild_command(rc) == ("python -m gpolib pretrain --arch moe-balanced --steps 120 --seed 1 --micro-batches 4 "
                                   "--init data/models/tiny-qwen3-moe-fine --lr 0.0003 --warmup 10 --aux-coef 0.2 "
                                   "--aux-per-layer")
    assert rebuild_command({**rc, "floor_coef": 1.0, "floor": 0.5}).endswith("--aux-per-layer --floor-coef 1.0 --floor 0.5")
    assert rebuild_command({"arch": "dense", "steps": 800, "seed": 0}) == \
        "python -m gpolib pretrain --arch dense --steps 800 --seed 0"


def test_card_balance_table_and_sweep_rows():
    """The card's load-balance table: shares as multiples of 1/E (E = 64 from uniform_share 0.0156), dead experts."""
    from gpolib.model_card import balance_lines, sweep_table

    routing = {"uniform_share": 0.0156, "expert_share_min": [0.0, 0.0078125], "expert_share_max": [0.0625, 0.03125],
               "dead_experts": [3, 0], "premise": "not reproduced"}
    lines = balance_lines(routing)
    assert "| 0 | 0.00 | 4.00 | 3 |" in lines and "| 1 | 0.50 | 2.00 | 0 |" in lines
    row = {"setting": "s", "coef": 0.2, "per_layer": True, "steps": 120, "train_s": 300.4, "accuracy": 0.4012,
           "acc_prompts": 256, "acc_G": 4, "routing": routing, "lr": 3e-4}
    assert sweep_table([row])[-1] == "| s | heldout | 0.2 | per layer | 120 | 0.0003 | 0.00 | 3/0 | 4.00 | not met | 0.401 (256 x 4) | 300 |"


@pytest.mark.parametrize("arch", ["moe-balanced", "moe-floor"])
def test_balanced_moe_loads_and_routes_as_the_standard_class(arch):
    """The load-balanced fine MoE is a plain Qwen3MoeForCausalLM: transformers' own class, loaded with no gpolib code,
    picks the same top-8 experts per token and layer as the workbook's loader, and gives the same logits."""
    from transformers import Qwen3MoeForCausalLM

    from gpolib.models import EMBEDDED, load_policy, router_topk

    path = EMBEDDED[arch]
    plain = Qwen3MoeForCausalLM.from_pretrained(path).eval()
    ours, tok = load_policy(path, lora_r=0)
    ids = tok(["47*6+13*7=?\n", "5*5-3=?\n"], return_tensors="pt", padding=True)
    with torch.no_grad():
        a = router_topk(plain, ids.input_ids, ids.attention_mask)
        b = router_topk(ours.eval(), ids.input_ids, ids.attention_mask)
        la = plain(**ids).logits
        lb = ours(**ids).logits
    assert a.shape[0] == 8 and a.shape[-1] == 8
    assert torch.equal(a.sort(-1).values, b.sort(-1).values)
    torch.testing.assert_close(la, lb, rtol=1e-4, atol=1e-4)
