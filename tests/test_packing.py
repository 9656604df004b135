"""The justified layout of `completion_logps` (the default: each row's prompt moved to column 0 and its completion
after it, padding at the right only, no attention mask: causal attention alone) against the padded one (left-padded
prompts, right-padded completions, under an attention mask; `justify=False`): log-probs, entropies, a policy loss and
the LoRA gradients equal the padded path's to 1e-6 relative (dense and MoE, prompts of different lengths, T != 1)."""
import pytest
import torch

from gpolib.config import LossConfig
from gpolib.logprobs import completion_logps, justified_layout
from gpolib.models import EMBEDDED, load_policy
from gpolib.objectives import Clip, policy_loss

TEMPERATURE = 0.7
RTOL = 1e-6


def _policy(arch: str, dtype: str = "float64"):
    """In float64 the two paths differ only by rounding far below 1e-6, so the tolerance tests the layout; float32
    is checked apart (its rounding alone reaches ~2e-6 in the entropy's logsumexp - E[logit])."""
    torch.manual_seed(0)
    model, _ = load_policy(EMBEDDED[arch], lora_r=4, lora_alpha=8, dtype=dtype)
    if arch == "moe" and dtype == "float64":  # torch's grouped matmul has no float64 kernel
        model.get_base_model().set_experts_implementation("eager")
    with torch.no_grad():  # a trained adapter: at B = 0 the LoRA gradients of A vanish
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    return model


def _batch(B: int = 5, P: int = 9, T: int = 13, seed: int = 1) -> tuple:
    """Left-padded prompts (B, P) and right-padded completions (B, T) of different lengths."""
    g = torch.Generator().manual_seed(seed)
    p_len = torch.tensor([9, 3, 6, 1, 7][:B])
    c_len = torch.tensor([13, 1, 8, 5, 11][:B])
    pos = torch.arange(P)
    p_mask = (pos[None] >= P - p_len[:, None]).long()  # (B, P)
    c_mask = (torch.arange(T)[None] < c_len[:, None]).long()  # (B, T)
    p_ids = torch.randint(2, 99, (B, P), generator=g) * p_mask
    c_ids = torch.randint(2, 99, (B, T), generator=g) * c_mask
    return p_ids, p_mask, c_ids, c_mask


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


LAYOUTS = {"padded": dict(justify=False), "justified": dict(justify=True)}
"""layout -> completion_logps' arguments"""


def _loss_and_grads(model, batch, layout: str, chunk_rows: int) -> tuple:
    model.zero_grad(set_to_none=True)
    lp, ent = completion_logps(model, *batch, temperature=TEMPERATURE, chunk_rows=chunk_rows, with_entropy=True,
                               **LAYOUTS[layout])
    mask = batch[3].to(lp.dtype)
    old = lp.detach() - 0.1 * torch.linspace(-1, 1, lp.shape[1], dtype=lp.dtype)[None] * mask  # ratios != 1: clipping active
    adv = torch.tensor([1.0, -0.5, 0.3, -1.2, 0.8], dtype=lp.dtype)
    cfg = LossConfig(ratio_level="token", surrogate=Clip(eps_low=0.2, eps_high=0.28), aggregation="seq_mean_token_mean")
    loss, _ = policy_loss(lp, old, adv, mask, cfg)
    loss.backward()
    grads = torch.cat([p.grad.flatten() for n, p in model.named_parameters() if p.requires_grad])
    return lp.detach(), ent, loss.detach(), grads


def test_justified_layout_by_hand():
    """Rows [pad, a, b | c, pad] and [d, e, f | g, h]: justified [a b c . .] (read from columns 1 2 3, then clamped
    to 4) and [d e f g h]; c is predicted from column 1 (b), g and h from columns 2 and 3 (f, g); row 0's padded
    completion slot points at a column that exists (clamped to L - 1)."""
    source, predictor = justified_layout(torch.tensor([[0, 1, 1], [1, 1, 1]]), torch.tensor([[1, 0], [1, 1]]))
    assert source.tolist() == [[1, 2, 3, 4, 4], [0, 1, 2, 3, 4]]
    assert predictor.tolist() == [[1, 2], [2, 3]]


@pytest.mark.parametrize("arch", ["dense", "moe"])
@pytest.mark.parametrize("chunk_rows", [5, 2])
def test_layout_equals_padded(arch, chunk_rows, layout="justified"):
    model = _policy(arch)
    model.train()
    batch = _batch()
    lp0, ent0, loss0, g0 = _loss_and_grads(model, batch, "padded", chunk_rows=5)
    lp1, ent1, loss1, g1 = _loss_and_grads(model, batch, layout, chunk_rows=chunk_rows)
    mask = batch[3].bool()
    assert _rel(lp1, lp0) < RTOL and _rel(ent1, ent0) < RTOL
    assert (lp1[~mask] == 0).all() and (ent1[~mask] == 0).all()  # same layout: zeros on padding
    assert abs(float(loss1 - loss0)) / abs(float(loss0)) < RTOL
    assert _rel(g1, g0) < RTOL and float(g0.abs().max()) > 0


@pytest.mark.parametrize("arch", ["dense", "moe"])
def test_layout_equals_padded_in_float32(arch, layout="justified"):
    model = _policy(arch, dtype="float32")
    model.train()
    batch = _batch()
    out0 = _loss_and_grads(model, batch, "padded", chunk_rows=5)
    out1 = _loss_and_grads(model, batch, layout, chunk_rows=5)
    assert max(_rel(a, b) for a, b in zip(out1, out0)) < 1e-5


def test_attention_stays_within_each_row(layout="justified"):
    """Changing row 0's tokens leaves every other row's log-probs exactly as they were; changing the token after a
    row's last completion token (padding, visible to no real position) changes nothing."""
    model = _policy("dense")
    model.eval()
    p_ids, p_mask, c_ids, c_mask = _batch()
    with torch.no_grad():
        lp = completion_logps(model, p_ids, p_mask, c_ids, c_mask, temperature=TEMPERATURE, **LAYOUTS[layout])
        c2 = c_ids.clone()
        c2[0, :5] = (c2[0, :5] + 7) % 97 + 2
        lp2 = completion_logps(model, p_ids, p_mask, c2, c_mask, temperature=TEMPERATURE, **LAYOUTS[layout])
        c3 = c_ids.clone()
        c3[1, 1:] = 5  # row 1 has one completion token: the rest is padding
        lp3 = completion_logps(model, p_ids, p_mask, c3, c_mask, temperature=TEMPERATURE, **LAYOUTS[layout])
    assert (lp2[1:] - lp[1:]).abs().max() < 1e-12
    assert (lp2[0] - lp[0]).abs().max() > 1e-3
    assert torch.equal(lp3, lp)


def test_layouts_need_a_prompt_token_per_row():
    with pytest.raises(ValueError, match="justified chunk"):
        justified_layout(torch.tensor([[0, 0], [1, 1]]), torch.tensor([[1, 1], [1, 0]]))
