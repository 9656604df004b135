"""`moe/expert_change`'s two modes (config `expert_change`, `moe.ExpertChange`): 'full' routes every row of the rollout
after every optimiser step; 'minibatch' the rows the next minibatch trains, recorded in its training forward."""
from __future__ import annotations

import re

import pytest
import torch

from gpolib import moe
from gpolib import update as upd

K = 2
"""the embedded MoE's experts per token"""
SETS = [  # per layer, the expert set every token is routed to after v optimiser steps (v = 0, 1, 2, 3)
    [[0, 1], [0, 2], [3, 2], [4, 5]],  # 1/2, 1, 1 of pi_old's set replaced
    [[0, 1], [0, 1], [0, 1], [0, 1]],  # never changes
    [[0, 1], [1, 0], [0, 1], [1, 0]],  # the same set in another order: no change
    [[0, 1], [7, 1], [1, 7], [7, 1]],  # 1/2 after every step
]
KNOWN = [(1 / 2 + 1 + 1) / 3, 0.0, 0.0, 1 / 2]
"""the share per layer averaged over mu = 3 steps; measuring before a step instead of after gives 1/2, 0, 0, 1/3"""


def hand_routed(tr) -> list:
    """Force every layer's router to SETS[layer][v] for every token, v = the optimiser steps taken so far (weights
    from the router's logits at those experts, as Routing Replay does); returns the hook handles."""
    version = [0]
    step = tr.policy.step

    def stepped():
        step()
        version[0] += 1
    tr.policy.step = stepped

    def force(layer):
        def hook(module, args, output):
            experts = torch.tensor(SETS[layer][version[0]]).repeat(output[0].shape[0], 1)  # (N, k)
            return moe._replayed(module, output, experts)
        return hook
    return [r.register_forward_hook(force(i)) for i, r in enumerate(moe.routers(tr.model))]


@pytest.mark.parametrize("mode, replay", [("full", False), ("minibatch", False), ("full", True), ("minibatch", True)])
def test_both_modes_give_the_known_share_of_a_hand_built_router(tiny_cfg, mode, replay):
    """Every token goes to the same hand-set experts, changed by each optimiser step: whichever rows a mode routes,
    after which step, the logged share per layer is the known one (KNOWN), with and without Routing Replay."""
    from gpolib.models import EMBEDDED
    from gpolib.train import Trainer

    tr = Trainer(tiny_cfg("gspo", model=EMBEDDED["moe"], steps=1, mu=3, expert_change=mode, routing_replay=replay))
    assert tr.model.config.num_experts_per_tok == K
    batch = tr.collect(0)
    adv = torch.linspace(-1, 1, len(batch.correct))
    adv[::5] = 0  # some rows inactive: never trained, never measured in 'minibatch'
    batch.advantages = adv
    handles = hand_routed(tr)
    try:
        metrics = tr.update(batch, 0)
    finally:
        for h in handles:
            h.remove()
    got = [metrics[f"moe/expert_change/l{i}"] for i in range(4)]
    assert got == pytest.approx(KNOWN, abs=1e-6)
    assert metrics["moe/expert_change"] == pytest.approx(sum(KNOWN) / 4, abs=1e-6)
    # the update's ratio spreads come from routing passes over rows whose pi_old a pass recorded: 'full' without replay
    assert ("moe/update_kl" in metrics) == (mode == "full" and not replay)
    if "moe/update_kl" in metrics:
        assert metrics["moe/update_kl"] >= 0 and metrics["moe/update_max_ratio"] > 0


def test_update_ratios_by_hand():
    """Two responses, log rho = [ln 2, 0 | -ln 2, (masked)]: token std of (ln 2, 0, -ln 2) = ln 2 sqrt(2/3); max ratio 2;
    k3 KL mean of (2 - 1 - ln 2, 0, 0.5 - 1 + ln 2) = 1/6; sequence log ratios ln 2 / 2 and -ln 2, std 0.75 ln 2."""
    import math
    ln2 = math.log(2)
    old = torch.zeros(2, 2, dtype=torch.float64)
    new = torch.tensor([[ln2, 0.0], [-ln2, 5.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1], [1, 0]])
    got = moe.update_ratios(old, new, mask)
    assert got["moe/update_log_ratio_std"] == pytest.approx(ln2 * math.sqrt(2 / 3), abs=1e-12)
    assert got["moe/update_max_ratio"] == pytest.approx(2.0, abs=1e-12)
    assert got["moe/update_kl"] == pytest.approx(1 / 6, abs=1e-12)
    assert got["moe/update_seq_log_ratio_std"] == pytest.approx(0.75 * ln2, abs=1e-12)


def test_minibatch_mode_is_the_full_measure_restricted_to_its_rows_exactly(tiny_cfg, monkeypatch):
    """On the embedded MoE with a trained router and a large step, in float64 (no near-tie can flip an expert): each
    step's share logged by 'minibatch' (from the next minibatch's training forward, or a pass after the last step)
    equals, exactly, `moe.expert_change` of full routing passes over the rollout before the update and after that
    step, restricted to the same rows (`update.measured_rows`)."""
    from gpolib.models import EMBEDDED
    from gpolib.train import Trainer

    tr = Trainer(tiny_cfg("gspo", model=EMBEDDED["moe"], steps=1, train_router=True, mu=3, lr=3e-2,
                          expert_change="minibatch"))
    batch = tr.collect(0)
    adv = torch.linspace(-1, 1, len(batch.correct))
    adv[::5] = 0
    batch.advantages = adv
    tr.policy.model.double()
    tr.policy.model.config._experts_implementation = "eager"  # torch's grouped matmul has no float64 kernel
    tr.policy.experts_kernel = False
    ro, chunk = batch.rollout, tr.cfg.micro_batch_rows
    full_before = torch.stack(moe.routing_pass(tr.policy, ro, chunk)[1])  # (L, N, k) pi_old, every row
    tr.policy.model.train()
    full_after, measured, meters = [], [], []
    step = tr.policy.step

    def stepped():  # the full measure's pass after every step, beside the update
        step()
        full_after.append(torch.stack(moe.routing_pass(tr.policy, ro, chunk)[1]))
        tr.policy.model.train()
    tr.policy.step = stepped
    real_rows = upd.measured_rows
    monkeypatch.setattr(upd, "measured_rows", lambda *a: measured.append(real_rows(*a)) or measured[-1])

    class Meter(moe.ExpertChange):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            meters.append(self)
    monkeypatch.setattr(moe, "ExpertChange", Meter)
    metrics = tr.update(batch, 0)
    meter, = meters
    assert len(full_after) == len(measured) == len(meter.changes) == 3
    comp = meter.comp  # (N,) completion positions
    for j, rows in enumerate(measured):
        assert 0 < len(rows) < len(batch.correct) and bool(adv[rows].ne(0).all())
        pos = meter._positions(rows)
        want = moe.expert_change(full_before[:, pos], full_after[j][:, pos], comp[pos])[1]
        assert torch.equal(meter.changes[j], want)
    assert max(c.max().item() for c in meter.changes) > 0.01  # the steps moved some routing: the test can fail
    assert metrics["moe/expert_change"] == torch.stack(meter.changes).mean(dim=0).mean().item()


def test_positions_follow_the_rows_order():
    """`ExpertChange._positions`: rows of 2, 3 and 1 real positions -> offsets 0, 2, 5 in the row-major record."""
    class Ro:
        prompt_mask = torch.tensor([[0, 1], [1, 1], [0, 1]])
        completion_mask = torch.tensor([[1, 0], [1, 0], [0, 0]])
        lengths = torch.tensor([1, 1, 0])
    meter = moe.ExpertChange(None, Ro(), chunk_rows=2)
    assert meter._positions(torch.tensor([2, 0])).tolist() == [5, 0, 1]
    assert meter._positions(torch.tensor([1])).tolist() == [2, 3, 4]
    assert meter.comp.tolist() == [0, 1, 0, 0, 1, 0]
    with pytest.raises(ValueError, match="minibatch"):
        moe.ExpertChange(None, Ro(), chunk_rows=2, mode="every")


def test_the_mode_is_checked_and_not_part_of_a_runs_identity():
    from gpolib import presets

    with pytest.raises(ValueError, match=re.escape("expert_change='every' is invalid; allowed: 'full' | 'minibatch'")):
        presets.get("gspo", expert_change="every")
    full, sub = presets.get("gspo", expert_change="full"), presets.get("gspo")
    assert sub.expert_change == "minibatch" and full.fingerprint() == sub.fingerprint()  # logging only: the same run
