"""gpolib.runtime.deterministic_cpu: deterministic kernels on, NaN-filling of new tensors off, and the second changes
no bit of the trainer's MoE passes (issue 50)."""
import torch
import torch.utils.deterministic

from gpolib import qwen_ops
from gpolib.models import EMBEDDED, load_policy
from gpolib.runtime import deterministic_cpu


def _state() -> tuple:
    return torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(), \
        torch.utils.deterministic.fill_uninitialized_memory


def _restore(state: tuple) -> None:
    on, warn, fill = state
    torch.use_deterministic_algorithms(on, warn_only=warn)
    torch.utils.deterministic.fill_uninitialized_memory = fill


def test_deterministic_cpu_keeps_deterministic_kernels_without_filling_new_memory():
    saved = _state()
    try:
        torch.use_deterministic_algorithms(False)
        deterministic_cpu("cuda")  # other devices: left alone
        assert not torch.are_deterministic_algorithms_enabled()
        deterministic_cpu("cpu")
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.utils.deterministic.fill_uninitialized_memory is False
    finally:
        _restore(saved)


def _moe_pass(model, ids, fill: bool) -> tuple:
    """The fine MoE's training forward + backward (the trainer's written-out ops and grouped experts) and a no-grad
    forward, with new tensors NaN-filled or not: (logits, gradients, no-grad logits)."""
    torch.utils.deterministic.fill_uninitialized_memory = fill
    model.zero_grad(set_to_none=True)
    with qwen_ops.fused():
        logits = model(input_ids=ids, use_cache=False).logits  # (B, L, V)
        logits.log_softmax(-1).square().mean().backward()
        with torch.inference_mode():
            plain = model(input_ids=ids, use_cache=False).logits
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    return logits.detach(), grads, plain


def test_unfilled_new_memory_changes_no_bit_of_the_moe_passes():
    """Every kernel of the MoE's passes writes all of its output: filling new tensors with NaN first (torch's default
    under deterministic algorithms) or not gives the same logits and gradients bit for bit."""
    saved = _state()
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.manual_seed(0)
        model, _ = load_policy(EMBEDDED["moe-fine"], lora_r=16, lora_alpha=32, train_router=True)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.02)
        ids = torch.randint(3, 90, (4, 40))  # (B, L)
        filled, unfilled = _moe_pass(model, ids, fill=True), _moe_pass(model, ids, fill=False)
        assert torch.isfinite(filled[0]).all() and len(filled[1]) > 40
        assert torch.equal(filled[0], unfilled[0]) and torch.equal(filled[2], unfilled[2])
        assert all(torch.equal(a, b) for a, b in zip(filled[1], unfilled[1]))
    finally:
        _restore(saved)
