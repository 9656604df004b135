"""gpolib.engine.topk_kernel and the router's forward in qwen_ops: an MoE router's top-k by one C++ call per batch,
the same indices, values and gradients as transformers' router with torch.topk (issue 50)."""
import pytest
import torch
from transformers.models.qwen3_moe.configuration_qwen3_moe import Qwen3MoeConfig
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

from gpolib import qwen_ops
from gpolib.engine import router_top_k
from gpolib.engine import topk_kernel as T


@pytest.mark.parametrize("choice", ["all", "attention", "none"])
def test_the_kernel_is_built_and_serves_unless_the_machine_chose_no_kernels(monkeypatch, choice):
    from gpolib.engine import kernel_choice

    monkeypatch.setattr(kernel_choice, "default", lambda: choice)
    assert T.available() and router_top_k() is (None if choice == "none" else T.top_k_indices)


@pytest.mark.parametrize("N,E,k", [(2000, 64, 8), (300, 8, 2), (17, 5, 5), (9, 128, 1), (0, 64, 8)])
def test_indices_are_torch_topk_indices(N, E, k):
    """Random router probabilities (no ties): torch.topk's indices, in its (descending) order."""
    g = torch.Generator().manual_seed(N + E)
    p = torch.randn(N, E, generator=g).mul(3).softmax(-1)  # (N, E)
    assert torch.equal(T.top_k_indices(p, k), torch.topk(p, k, dim=-1).indices)


def test_hand_built_rows_with_ties_and_infinities():
    """By hand: descending order, equal values in the order of their index, -inf ranked last."""
    p = torch.tensor([[0.1, 0.4, 0.2, 0.4, 0.3],
                      [0.0, 0.0, 0.0, 0.0, 0.0],
                      [-float("inf"), 1.0, -float("inf"), 2.0, 0.5],
                      [5.0, 4.0, 3.0, 2.0, 1.0]])
    assert T.top_k_indices(p, 3).tolist() == [[1, 3, 4], [0, 1, 2], [3, 1, 4], [0, 1, 2]]


@pytest.mark.parametrize("E,k", [(8, 2), (16, 16), (17, 3), (50, 50), (64, 8), (65, 8), (100, 9)])
def test_ties_zeros_and_infinities_in_the_order_of_a_stable_sort(E, k):
    """Rows drawn from a few values (ties everywhere, -0 and +0, both infinities): the first k of a stable descending
    sort, equal values in the order of their index. E up to 64 takes the vector path on an AVX-512 CPU, 65 and 100
    the insertion (kernels/topk.h); both must give this order."""
    g = torch.Generator().manual_seed(E * 10 + k)
    values = torch.tensor([-float("inf"), -1.0, -0.0, 0.0, 0.25, 0.5, 1.0, float("inf")])
    p = values[torch.randint(0, len(values), (500, E), generator=g)]  # (500, E)
    p[:3] = values[3]  # rows of equal values
    want = torch.sort(p, dim=-1, descending=True, stable=True).indices[:, :k]
    assert torch.equal(T.top_k_indices(p, k), want)


def test_it_declines_what_it_cannot_serve():
    """NaN (torch ranks it highest), float64, a single row vector: None, so the router keeps torch.topk; bad k raises."""
    p = torch.rand(4, 8)
    p[2, 5] = float("nan")
    assert T.top_k_indices(p, 2) is None
    assert T.top_k_indices(torch.rand(4, 8, dtype=torch.float64), 2) is None
    assert T.top_k_indices(torch.rand(8), 2) is None
    with pytest.raises(ValueError, match="k=9"):
        T.top_k_indices(torch.rand(4, 8), 9)


@pytest.mark.parametrize("norm", [True, False])
def test_router_forward_equals_transformers_bit_for_bit_with_gradients(norm):
    """The router inside a fused block with the kernel, against transformers' own forward outside: logits, weights
    and indices equal, and the gradients of the router weight and of the hidden states, bit for bit."""
    cfg = Qwen3MoeConfig(hidden_size=48, num_experts=64, num_experts_per_tok=8, norm_topk_prob=norm)
    router = Qwen3MoeTopKRouter(cfg)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        router.weight.copy_(torch.randn(64, 48, generator=g) * 0.3)
    x = torch.randn(3, 70, 48, generator=g)
    cot = torch.randn(210, 8, generator=g)  # a gradient for the routing weights

    served = []

    def spy(p, k):
        served.append(T.top_k_indices(p, k))
        return served[-1]

    def run(fused: bool):
        router.zero_grad(set_to_none=True)
        h = x.clone().requires_grad_(True)
        ctx = qwen_ops.fused(top_k=spy) if fused else qwen_ops.fused(False)
        with ctx:
            logits, weights, index = router(h)
        (logits.square().sum() + (weights * cot).sum()).backward()
        return logits.detach(), weights.detach(), index, router.weight.grad.clone(), h.grad.clone()

    ours, theirs = run(True), run(False)
    assert len(served) == 1 and served[0] is not None  # ours came from the kernel, theirs from torch.topk
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)
    assert theirs[2].shape == (210, 8) and theirs[4].abs().max() > 0
