"""The phases of a step called directly with typed inputs, no trainer: `collect` with a scripted draw and a
baseline, `update` with a hand-built `Policy` and a fixed batch, checked against hand-computed numbers."""
import math

import pytest
import torch

from gpolib import presets
from gpolib.baseline import GroupBaseline
from gpolib.collect import Batch, collect, step_seed
from gpolib.models import EMBEDDED, load_policy
from gpolib.policy import Policy
from gpolib.rollout import Rollout, generate
from gpolib.update import update

G = 4


def _rollout(lengths: list) -> Rollout:
    B, T = len(lengths), max(lengths)
    mask = (torch.arange(T) < torch.tensor(lengths)[:, None]).long()  # (B, T)
    return Rollout(torch.ones(B, 2, dtype=torch.long), torch.ones(B, 2, dtype=torch.long), mask.clone(), mask,
                   torch.zeros(B, T), torch.zeros(B, dtype=torch.bool), [f"r{i}" for i in range(B)],
                   torch.arange(B) // G)


def test_collect_reads_only_the_draw_and_the_baseline():
    cfg = presets.get("grpo", prompts_per_step=2, group_size=G, seed=3)
    calls = []

    def draw(step, round_):
        calls.append((step, round_, torch.initial_seed()))
        correct = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0])  # (8,) two groups of 4
        return _rollout([3, 5, 4, 6, 2, 2, 7, 3]), correct, correct.clone()

    batch = collect(cfg, 5, draw, 0, GroupBaseline(cfg))
    assert calls == [(5, 0, step_seed(3, 5))]  # one round, seeded by the step before the draw
    # GRPO Eq. 3: (r - mean) / (unbiased std + 1e-4); group 1: mean 1/2, std sqrt(1/3); group 2: mean 3/4, deviations
    # 1/4 (x 3) and -3/4, std sqrt((3/16 + 9/16) / 3) = 1/2
    a1, a2 = 0.5 / (math.sqrt(1 / 3) + 1e-4), 0.25 / (0.5 + 1e-4)
    assert batch.advantages.tolist() == pytest.approx([a1, -a1, -a1, a1, a2, a2, a2, -3 * a2], rel=1e-6)
    s = batch.stats
    assert (s["acc/mean"], s["len/mean"], s["groups/kept"], s["gen/tokens"]) == (0.625, 4.0, 2, 32)
    assert batch.loss_mask.sum().item() == 32


@pytest.fixture(scope="module")
def fixed_rollout():
    torch.manual_seed(0)
    model, tok = load_policy(EMBEDDED["dense"], lora_r=8, lora_alpha=16)
    model.eval()
    return generate(model, tok, ["3+4=?\n", "12*3-4+5=?\n"], 2, 12)


def test_update_with_a_hand_built_policy(fixed_rollout):
    """One minibatch at ratio 1 (pi_old = the policy): GRPO's loss is -mean_i A_i (seq_mean_token_mean of a
    constant advantage per response; the KL term is 0 while LoRA's B is 0). AdamW's first step moves every weight
    with a gradient by lr * g / (|g| + eps) ~ lr, and decays the others by (1 - lr * wd) only."""
    cfg = presets.get("grpo", group_size=2, prompts_per_step=2, mu=1, lr=1e-3, weight_decay=0.1, warmup_steps=0)
    torch.manual_seed(0)
    model, _ = load_policy(EMBEDDED["dense"], lora_r=8, lora_alpha=16)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    policy = Policy(model, params, opt, sched, "cpu", cfg.temperature)
    adv = torch.tensor([1.0, -0.5, 0.25, 0.0])  # (4,) the last row carries no gradient: skipped
    ro = fixed_rollout
    batch = Batch(ro, torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.zeros(4), adv, ro.completion_mask.float(), {})
    before = {id(p): p.detach().clone() for p in params}
    out = update(policy, cfg, GroupBaseline(cfg), batch, step=0)
    assert out["loss/policy"] == pytest.approx(-adv.mean().item(), rel=1e-5, abs=1e-7)
    assert out["clip/frac"] == 0.0 and out["grad/norm"] > 0
    moved = decayed = 0
    for p in params:
        delta = p.detach() - before[id(p)] * (1 - cfg.lr * cfg.weight_decay)  # (shape of p) after the decay
        if before[id(p)].abs().max() == 0:  # LoRA B, initialised at 0: its first Adam step is ~ lr per entry
            assert delta.abs().max().item() == pytest.approx(cfg.lr, rel=1e-3)
            moved += 1
        else:  # LoRA A: zero gradient while B = 0, only the decoupled weight decay
            assert delta.abs().max().item() < 1e-9
            decayed += 1
    assert moved == decayed > 0 and sched.last_epoch == 1
