"""GSPO on the MoE (issue 15): router training and Routing Replay through hooks on Qwen3-MoE and Qwen2-MoE
(Sec. 5.3), the rollout engine's log-probs as pi_old with a bf16 engine (Sec. 5.4), both inside the loop.

Models are random-weight and built here (Qwen3-MoE: the embedded config, 8 experts top-2, renormalised;
Qwen2-MoE: 4 experts top-2, shared expert, not renormalised), with LoRA as in training.
"""
import contextlib
import dataclasses
import math

import pytest
import torch
from peft import get_peft_model
from transformers import AutoModelForCausalLM, Qwen2MoeConfig

from gpolib import moe, presets, router_stats
from gpolib.logprobs import completion_logps
from gpolib.models import lora_config, tiny_config

ARCHS = ["qwen3_moe", "qwen2_moe"]
V = 64


def build(arch: str, train_router: bool = False, seed: int = 0, lora: bool = True):
    torch.manual_seed(seed)
    if arch == "qwen3_moe":
        cfg = tiny_config("moe", vocab_size=V, pad_id=0, eos_id=1)
    elif arch == "dense":
        cfg = tiny_config("dense", vocab_size=V, pad_id=0, eos_id=1)
    else:
        cfg = Qwen2MoeConfig(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                             moe_intermediate_size=32, shared_expert_intermediate_size=64, norm_topk_prob=False,
                             decoder_sparse_step=1, max_position_embeddings=64, pad_token_id=0, eos_token_id=1)
    model = AutoModelForCausalLM.from_config(cfg)
    return get_peft_model(model, lora_config(model, 4, 8, train_router)) if lora else model


def batch(B: int = 3, P: int = 5, T: int = 7, seed: int = 1):
    """Random prompt (left-padded) and completion (right-padded) ids and masks."""
    g = torch.Generator().manual_seed(seed)
    p_ids, c_ids = torch.randint(2, V, (B, P), generator=g), torch.randint(2, V, (B, T), generator=g)
    p_mask, c_mask = torch.ones(B, P, dtype=torch.long), torch.ones(B, T, dtype=torch.long)
    p_mask[0, :2] = 0  # left padding
    c_mask[1, 4:] = 0  # a shorter completion
    return p_ids * p_mask, p_mask, c_ids * c_mask, c_mask


def router_weights(model) -> list:
    return [moe.router_module(g).weight.detach().clone() for g in moe.routers(model)]


def lm_step(model, lr: float = 1e-2):
    """One AdamW step on the LM loss of a fixed random batch."""
    ids = torch.randint(2, V, (4, 12), generator=torch.Generator().manual_seed(7))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


@contextlib.contextmanager
def expert_inputs(model, store: list):
    """Record (expert ids (N, k), gate weights (N, k)) each fused experts module is called with."""
    blocks = [m for m in model.modules() if "gate" in m._modules and "experts" in m._modules]
    hook = lambda mod, args: store.append((args[1].detach().clone(), args[2].detach().clone()))
    handles = [b.experts.register_forward_pre_hook(hook) for b in blocks]
    try:
        yield store
    finally:
        for h in handles:
            h.remove()


def perturb_routers(model, scale: float = 0.5, seed: int = 3):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for r in moe.routers(model):
            w = moe.router_module(r).weight
            w.add_(scale * torch.randn(w.shape, generator=g))


# ---------------------------------------------------------------- router training

@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("train_router", [False, True])
def test_router_changes_after_one_step_only_when_trained(arch, train_router):
    model = build(arch, train_router)
    n_layers, (E, H) = len(moe.routers(model)), moe.router_module(moe.routers(model)[0]).weight.shape
    router_params = [n for n, p in model.named_parameters() if p.requires_grad and ".mlp.gate." in n]
    assert len(router_params) == (n_layers if train_router else 0)
    before = router_weights(model)
    lm_step(model)
    after = router_weights(model)
    changed = [not torch.equal(b, a) for b, a in zip(before, after)]
    assert changed == [train_router] * n_layers
    if train_router:
        assert sum(p.numel() for n, p in model.named_parameters() if n in router_params) == n_layers * E * H
        with model.disable_adapter():  # the reference policy keeps the frozen original router
            assert all(torch.equal(b, w) for b, w in zip(before, router_weights(model)))


def test_train_router_is_validated():
    dense = build("dense", lora=False)
    with pytest.raises(ValueError, match="train_router"):
        lora_config(dense, 4, 8, train_router=True)
    assert presets.get("gspo", train_router=True).identity()["train_router"] is True
    for name, bad in (("train_router", dict(train_router=True, lora_r=0)), ("train_router", dict(train_router=1)),
                      ("rollout_autocast", dict(rollout_autocast="int8")),
                      ("routing_replay", dict(routing_replay=True, old_logps="engine"))):
        with pytest.raises(ValueError, match=name):
            presets.get("gspo", **bad)
    assert "train_router" not in presets.get("gspo").identity()  # neutral defaults: run identities unchanged
    assert "rollout_autocast" not in presets.get("gspo").identity()


# ---------------------------------------------------------------- Routing Replay

def _logps(model, b):
    return completion_logps(model, *b, bucket=False)


@pytest.mark.parametrize("arch", ARCHS)
def test_replay_uses_exactly_the_recorded_experts(arch):
    model, b = build(arch, train_router=True), batch()
    model.eval()
    recorded = []
    with torch.no_grad(), moe.record_routing(model, recorded):
        _logps(model, b)
    perturb_routers(model)  # the new router would route differently
    free, replayed = [], []
    with torch.no_grad():
        with expert_inputs(model, free):
            _logps(model, b)
        with expert_inputs(model, replayed), moe.replay_routing(model, recorded):
            _logps(model, b)
    assert len(recorded) == len(replayed) == len(moe.routers(model))
    assert any(not torch.equal(r, f[0]) for r, f in zip(recorded, free))  # without replay some experts move
    for r, (used, _) in zip(recorded, replayed):
        assert torch.equal(used, r)


@pytest.mark.parametrize("arch", ARCHS)
def test_replay_without_parameter_change_gives_identical_logps(arch):
    model, b = build(arch, train_router=True), batch()
    model.eval()
    recorded, plain, replayed = [], [], []
    with torch.no_grad():
        with moe.record_routing(model, recorded), expert_inputs(model, plain):
            lp = _logps(model, b)
        with moe.replay_routing(model, recorded), expert_inputs(model, replayed):
            lp_replay = _logps(model, b)
    assert float((lp - lp_replay).abs().max()) <= 1e-6
    for (ids, w), (ids_r, w_r) in zip(plain, replayed):
        assert torch.equal(ids, ids_r) and float((w - w_r).abs().max()) <= 1e-6


@pytest.mark.parametrize("arch", ARCHS)
def test_replayed_gate_weights_are_the_new_router_softmax_at_the_recorded_experts(arch):
    model, b = build(arch, train_router=True), batch()
    model.eval()
    layer = len(moe.routers(model)) - 1
    gate = moe.routers(model)[layer]
    recorded, old_used, new_used, hidden = [], [], [], []
    with torch.no_grad():
        with moe.record_routing(model, recorded), expert_inputs(model, old_used):
            _logps(model, b)
        perturb_routers(model)
        handle = gate.register_forward_pre_hook(lambda m, args: hidden.append(args[0].detach().clone()))
        with moe.replay_routing(model, recorded), expert_inputs(model, new_used):
            _logps(model, b)
        handle.remove()
    router = moe.router_module(gate)
    logits = hidden[0].reshape(-1, router.weight.shape[1]) @ router.weight.t()  # (N, E)
    probs = torch.softmax(logits.double(), dim=-1)  # softmax over all E experts
    w = probs.gather(1, recorded[layer])  # (N, k) at the recorded experts
    if router.norm_topk_prob:
        w = w / w.sum(dim=-1, keepdim=True)
    used_ids, used_w = new_used[layer]
    assert torch.equal(used_ids, recorded[layer])
    assert float((used_w.detach().double() - w.detach()).abs().max()) < 1e-6
    assert float((used_w - old_used[layer][1]).detach().abs().max()) > 1e-3  # the weights did move with the router
    sums = used_w.sum(-1)
    assert torch.allclose(sums, torch.ones_like(sums)) == bool(router.norm_topk_prob)


def test_replay_rejects_a_wrong_layer_count_or_token_count():
    model, b = build("qwen3_moe"), batch()
    recorded = []
    with torch.no_grad(), moe.record_routing(model, recorded):
        _logps(model, b)
    with pytest.raises(ValueError, match="MoE layers"):
        with moe.replay_routing(model, recorded[:-1]):
            pass
    with pytest.raises(ValueError, match="tokens"), torch.no_grad():
        with moe.replay_routing(model, [r[:-1] for r in recorded]):
            _logps(model, b)


# ---------------------------------------------------------------- engine log-probs as pi_old (Sec. 5.4)

@pytest.fixture(scope="module")
def shipped_moe():
    from gpolib.models import EMBEDDED, load_policy
    return load_policy(EMBEDDED["moe"], lora_r=4, lora_alpha=8)


def _rollout(model, tok, dtype):
    from gpolib.rollout import autocast, generate
    torch.manual_seed(0)
    with autocast(dtype, "cpu"):
        return generate(model, tok, ["3+4=?\n", "12*3-4+5=?\n", "7-2*3=?\n"], 4, 24)


def test_engine_logps_are_pi_old_and_a_bf16_engine_disagrees(shipped_moe):
    from gpolib.collect import Batch
    from gpolib.lab.gspo import mismatch_stats, sequence_mismatch
    from gpolib.update import pi_old
    from types import SimpleNamespace

    model, tok = shipped_moe
    model.eval()
    stats = {}
    for dtype in (None, "bfloat16"):
        ro = _rollout(model, tok, dtype)
        args = (ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
        with torch.no_grad():
            trainer_lp = completion_logps(model, *args)
            with torch.autocast("cpu", dtype=torch.bfloat16):  # the transformers forward as a bf16 engine
                forward_bf16 = mismatch_stats(completion_logps(model, *args), trainer_lp, ro.completion_mask)
        stats[dtype] = mismatch_stats(ro.sample_logps, trainer_lp, ro.completion_mask)
        # |log s_i| <= mean_t |log rho_t| row by row (triangle inequality)
        per_row = (ro.sample_logps - trainer_lp).abs().sum(1) / ro.completion_mask.sum(1)
        assert (sequence_mismatch(ro.sample_logps, trainer_lp, ro.completion_mask) <= per_row + 1e-9).all()
        B = len(ro.texts)
        fake = SimpleNamespace(device="cpu", model=model)  # a Policy's fields that pi_old reads
        b = Batch(ro, torch.zeros(B), torch.zeros(B), torch.ones(B), ro.completion_mask.float(), {})
        olds, experts = pi_old(fake, presets.get("gspo", old_logps="engine", mu=2), b, list(torch.arange(B).chunk(2)),
                               torch.ones(B, dtype=torch.bool))
        assert experts is None and len(olds) == 2 and all(torch.equal(o, ro.sample_logps) for o in olds)
    assert stats[None]["token_mismatch"] < 1e-4  # fp32 engine = trainer up to summation order
    # bf16 keeps 8 significant bits (unit roundoff 2^-8 = 3.9e-3 per rounding): the bf16 engine's mean |log ratio| is
    # of the order of the transformers forward's under the same autocast on the same tokens, whatever bf16 kernel
    # the CPU has (both round the same operations; 9.5e-4 against 9.0e-4 with AMX, AVX512-BF16 and AVX2 kernels),
    # and far above fp32's summation-order noise (3e-7)
    mismatch, reference = stats["bfloat16"]["token_mismatch"], forward_bf16["token_mismatch"]
    assert 0.5 * reference <= mismatch <= 2 * reference, (mismatch, reference)
    assert mismatch > 20 * stats[None]["token_mismatch"]


# ---------------------------------------------------------------- the loop

def _router_step(tiny_cfg, **kw):
    """One collect + update of the embedded MoE (advantages forced non-zero); routers before, after, batch."""
    from gpolib.models import EMBEDDED
    from gpolib.train import Trainer

    tr = Trainer(tiny_cfg("gspo", model=EMBEDDED["moe"], steps=1, **kw))
    batch = tr.collect(0)
    batch.advantages = torch.linspace(-1, 1, len(batch.correct))
    before = router_weights(tr.model)
    metrics = tr.update(batch, 0)
    return tr, before, router_weights(tr.model), batch, metrics


def test_loop_trains_the_router_with_routing_replay(tiny_cfg, monkeypatch):
    from gpolib import update as upd
    calls = []
    real = upd._recompute_with_routing
    monkeypatch.setattr(upd, "_recompute_with_routing", lambda *a: calls.append(1) or real(*a))
    tr, before, after, _, metrics = _router_step(tiny_cfg, train_router=True, routing_replay=True)
    assert calls == [1]  # one recording pass, replayed by both minibatches
    assert all(not torch.equal(b, a) for b, a in zip(before, after))
    assert all(torch.isfinite(torch.tensor(v)) for k, v in metrics.items() if isinstance(v, float))


def test_loop_replays_the_recorded_experts_of_each_row(tiny_cfg, monkeypatch):
    """In `update`, every micro-batch forward uses the experts recorded for its rows before the first step."""
    from gpolib import update as upd
    from gpolib.models import EMBEDDED
    from gpolib.train import Trainer

    tr = Trainer(tiny_cfg("gspo", model=EMBEDDED["moe"], steps=1, train_router=True, routing_replay=True,
                          micro_batch_rows=4))
    batch = tr.collect(0)
    B = len(batch.correct)
    batch.advantages = torch.linspace(-1, 1, B)  # distinct values name the rows
    events, recorded = [], []
    real_rec, real_loss = upd._recompute_with_routing, upd.policy_loss

    def record(*a):
        out = real_rec(*a)
        recorded.extend(out[1])
        events.clear()  # the recording pass itself is not a replay
        return out
    monkeypatch.setattr(upd, "_recompute_with_routing", record)
    real_routing = moe.routing_pass

    def routing(*a):  # the routing pass after each step (`moe/expert_change`) is not a replay either
        n = len(events)
        out = real_routing(*a)
        del events[n:]
        return out
    monkeypatch.setattr(moe, "routing_pass", routing)
    monkeypatch.setattr(upd, "policy_loss",
                        lambda lp, old, adv, *a, **k: events.append(("loss", adv)) or real_loss(lp, old, adv, *a, **k))
    hooks = [b.experts.register_forward_pre_hook(lambda m, args: events.append(("ids", args[1].clone())))
             for b in tr.model.modules() if "gate" in b._modules and "experts" in b._modules]
    try:
        tr.update(batch, 0)
    finally:
        for h in hooks:
            h.remove()
    n_layers, ids, n_micro = len(recorded), [], 0
    for kind, value in events:
        if kind == "ids":
            ids.append(value)
            continue
        rows = (value[:, None] == batch.advantages[None, :]).nonzero()[:, 1]  # (b,) rows of this micro-batch
        assert len(ids) == n_layers
        for layer, used_ids in enumerate(ids):
            k = recorded[layer].shape[-1]
            assert torch.equal(used_ids, recorded[layer].view(B, -1, k)[rows].reshape(-1, k))
        ids, n_micro = [], n_micro + 1
    assert n_micro >= 2 * 2  # mu = 2 minibatches of >= 2 micro-batches each


def test_loop_with_a_bf16_engine_as_pi_old(tiny_cfg, monkeypatch):
    from gpolib import update as upd
    from gpolib.lab.gspo import mismatch_stats
    from gpolib.models import EMBEDDED
    from gpolib.train import Trainer

    tr = Trainer(tiny_cfg("gspo", model=EMBEDDED["moe"], steps=1, old_logps="engine", rollout_autocast="bfloat16"))
    batch = tr.collect(0)
    batch.advantages = torch.linspace(-1, 1, len(batch.correct))  # distinct values name the rows
    ro = batch.rollout
    stats = mismatch_stats(ro.sample_logps, tr.policy_logps(ro), ro.completion_mask)  # same policy, fp32 recompute
    assert stats["token_mismatch"] > 0 and stats["seq_mismatch"] > 0
    seen = []
    real = upd.policy_loss
    monkeypatch.setattr(upd, "policy_loss", lambda lp, old, adv, *a, **kw: seen.append((old, adv)) or real(lp, old, adv, *a, **kw))
    before = router_weights(tr.model)
    metrics = tr.update(batch, 0)
    assert all(torch.equal(b, a) for b, a in zip(before, router_weights(tr.model)))  # router frozen by default
    assert math.isfinite(metrics["grad/norm"]) and math.isfinite(metrics["loss/policy"])
    assert sum(len(adv) for _, adv in seen) == len(batch.correct)  # every row, in both minibatches
    for old, adv in seen:  # pi_old of every trained row is the engine's sampling log-prob
        rows = (adv[:, None] == batch.advantages[None, :]).nonzero()[:, 1]  # (b,)
        assert torch.equal(old, ro.sample_logps[rows][:, : old.shape[1]])


# ---------------------------------------------------------------- GSPO's measure: share of activated experts that change

def test_expert_change_hand_counted():
    # k = 2, 3 tokens, 2 layers. Layer 0: token 0 same set in another order (0 new), token 1 one expert
    # replaced (1 new), token 2 both replaced (2 new) -> 3 / 6. Layer 1: token 2 one replaced -> 1 / 6.
    before = torch.tensor([[[0, 1], [2, 3], [4, 5]], [[0, 1], [2, 3], [4, 5]]])  # (L=2, N=3, k=2)
    after = torch.tensor([[[1, 0], [2, 7], [6, 7]], [[0, 1], [3, 2], [5, 0]]])
    overall, per_layer = moe.expert_change(before, after, torch.ones(3))
    assert per_layer.tolist() == pytest.approx([3 / 6, 1 / 6])
    assert overall.item() == pytest.approx(4 / 12)
    # token 2 masked out: layer 0 counts 1 of 4 slots, layer 1 none
    overall, per_layer = moe.expert_change(before, after, torch.tensor([1, 1, 0]))
    assert per_layer.tolist() == pytest.approx([1 / 4, 0.0]) and overall.item() == pytest.approx(1 / 8)
    # a list of per-layer records (as `record_routing` gives them) and (L, B, T, k) with a (B, T) mask agree
    assert moe.expert_change(list(before), list(after), torch.tensor([1, 1, 0]))[1].tolist() == pytest.approx([0.25, 0])
    assert moe.expert_change(before[:, None], after[:, None], torch.ones(1, 3))[0].item() == pytest.approx(4 / 12)


def test_expert_change_is_zero_for_the_same_routing_and_one_for_disjoint_sets():
    torch.manual_seed(0)
    before = torch.stack([torch.randperm(64)[:8] for _ in range(2 * 5)]).reshape(2, 5, 8)  # (L, N, k=8)
    assert moe.expert_change(before, before.flip(-1), torch.ones(5))[0].item() == 0.0
    assert moe.expert_change(before, before + 64, torch.ones(5))[0].item() == 1.0  # ids 64.. never activated before
    one = before.clone()
    one[0, 0, 3] = 99  # one of 8 experts of one token of layer 0 replaced
    assert moe.expert_change(before, one, torch.ones(5))[1].tolist() == pytest.approx([1 / 40, 0.0])


def test_expert_change_rejects_mismatched_records():
    with pytest.raises(ValueError, match="mask's shape"):
        moe.expert_change(torch.zeros(2, 3, 2, dtype=torch.long), torch.zeros(2, 3, 2, dtype=torch.long), torch.ones(4))
    with pytest.raises(ValueError, match="must both be"):
        moe.expert_change(torch.zeros(2, 3, 2, dtype=torch.long), torch.zeros(1, 3, 2, dtype=torch.long), torch.ones(3))


def test_loop_logs_the_share_of_activated_experts_one_update_changes(tiny_cfg):
    """mu = 1: the logged `moe/expert_change` is `expert_change` of the rollout's completion-token experts before
    and after the update, recorded here by a separate full-batch pass (`lab.gspo.expert_ids`)."""
    from gpolib.lab.gspo import expert_ids, rollout_sequences
    from gpolib.metrics import METRICS
    from gpolib.models import EMBEDDED
    from gpolib.train import Trainer

    tr = Trainer(tiny_cfg("gspo", model=EMBEDDED["moe"], steps=1, train_router=True, mu=1, lr=3e-2,
                          expert_change="full"))
    batch = tr.collect(0)
    batch.advantages = torch.linspace(-1, 1, len(batch.correct))
    ids, attn, comp, _ = rollout_sequences(batch.rollout)  # (B, P+T) x3
    before = expert_ids(tr.model, ids, attn)  # (L, B, P+T, k)
    metrics = tr.update(batch, 0)
    overall, per_layer = moe.expert_change(before, expert_ids(tr.model, ids, attn), comp)
    assert overall.item() > 0.01  # a large router step moves some of the routing
    assert metrics["moe/expert_change"] == pytest.approx(overall.item(), abs=1e-6)
    assert [metrics[f"moe/expert_change/l{i}"] for i in range(4)] == pytest.approx(per_layer.tolist(), abs=1e-6)
    assert set(metrics) <= set(METRICS)
    off = Trainer(tiny_cfg("gspo", model=EMBEDDED["moe"], steps=1, train_router=True, mu=1, lr=3e-2,
                           log_expert_change=False, expert_change="minibatch"))
    assert off.cfg.fingerprint() == tr.cfg.fingerprint()  # logging only: the same run
    b = off.collect(0)
    b.advantages = torch.linspace(-1, 1, len(b.correct))
    assert not any(k.startswith("moe/") for k in off.update(b, 0))


def test_routing_stats_hand_counted():
    # E = 4, k = 2. Tokens pick {0, 1} (margin 0.3 - 0.2), {1, 2} (0.3 - 0.1), {2, 3} (0.3 - 0.05)
    probs = [torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.1, 0.5, 0.3, 0.1], [0.05, 0.05, 0.6, 0.3]])]  # (N=3, E=4)
    got = router_stats.routing_stats(probs, torch.ones(3), k=2)
    assert got["expert_share_min"] == [round(1 / 6, 4)] and got["expert_share_max"] == [round(2 / 6, 4)]
    assert got["router_margin_quantiles"]["q50"] == pytest.approx(0.2) and got["uniform_share"] == 0.25
    got = router_stats.routing_stats(probs * 2, torch.tensor([1, 1, 0]), k=2)  # two layers alike, the third token masked
    assert got["expert_share_min"] == [0.0, 0.0] and got["expert_share_max"] == [0.5, 0.5]  # counts 1, 2, 1, 0
    assert got["n_tokens"] == 2 and got["router_margin_quantiles"]["q50"] == pytest.approx(0.15)


def test_recorded_router_probs_pick_the_routers_experts():
    model = build("qwen3_moe", lora=False)
    ids, attn = batch()[:2]
    probs, picked = [], []
    with router_stats.record_router_probs(model, probs), moe.record_routing(model, picked):
        model(input_ids=ids, attention_mask=attn, use_cache=False)
    k = model.config.num_experts_per_tok
    for p, e in zip(probs, picked):
        assert torch.allclose(p.sum(-1), torch.ones(len(p)))
        assert torch.equal(p.topk(k, dim=-1).indices.sort(-1).values, e.sort(-1).values)


@pytest.mark.parametrize("mode", ["full", "minibatch"])
def test_loop_takes_pi_old_from_the_routing_pass(tiny_cfg, monkeypatch, mode):
    """Without Routing Replay, measuring `moe/expert_change` adds no pass before the update: one routing pass gives the
    routing under pi_old and the later minibatch's pi_old (no `_recompute`), then ('full') one routing pass per
    optimiser step, or ('minibatch') one after the last step alone (the others routed by the training forwards).
    Every pi_old the loss sees is the padded recompute's, row for row, to float32 rounding."""
    from gpolib import update as upd
    from gpolib.models import EMBEDDED
    from gpolib.train import Trainer

    tr = Trainer(tiny_cfg("gspo", model=EMBEDDED["moe"], steps=1, train_router=True, mu=2, expert_change=mode))
    batch = tr.collect(0)
    B = len(batch.correct)
    batch.advantages = torch.linspace(-1, 1, B)  # distinct values name the rows
    ref = upd._recompute(tr.policy, tr.cfg, batch, torch.arange(B))  # (B, T), padded and length-bucketed
    passes, seen = [], []
    real_pass, real_loss = moe.routing_pass, upd.policy_loss
    monkeypatch.setattr(moe, "routing_pass", lambda *a: passes.append(1) or real_pass(*a))
    monkeypatch.setattr(upd, "_recompute", lambda *a: pytest.fail("pi_old recomputed apart from the routing pass"))
    monkeypatch.setattr(upd, "policy_loss", lambda lp, old, adv, *a, **kw: seen.append((old, adv)) or
                        real_loss(lp, old, adv, *a, **kw))
    metrics = tr.update(batch, 0)
    assert len(passes) == 1 + (2 if mode == "full" else 1)  # pi_old's, then one after each of mu = 2 steps / the last
    assert sum(len(adv) for _, adv in seen) == B and "moe/expert_change" in metrics
    for old, adv in seen:
        rows = (adv[:, None] == batch.advantages[None, :]).nonzero()[:, 1]  # (b,)
        assert (old - ref[rows][:, : old.shape[1]]).abs().max() < 1e-5


@pytest.mark.parametrize("replay, mode", [(False, "full"), (True, "full"), (False, "minibatch"), (True, "minibatch")])
def test_expert_change_is_zero_when_the_update_does_not_move_the_policy(tiny_cfg, replay, mode):
    """lr = 1e-12: the routing after each step is pi_old's, so the logged share is 0 whether pi_old's routing comes
    from the routing pass or from Routing Replay's padded record moved to the real positions (`moe.to_real_positions`);
    a misaligned layout would count about (k - overlap) / k of the slots as changed."""
    from gpolib.models import EMBEDDED
    from gpolib.train import Trainer

    tr = Trainer(tiny_cfg("gspo", model=EMBEDDED["moe"], steps=1, train_router=True, mu=2, lr=1e-12,
                          routing_replay=replay, expert_change=mode))
    batch = tr.collect(0)
    batch.advantages = torch.linspace(-1, 1, len(batch.correct))
    metrics = tr.update(batch, 0)
    assert metrics["moe/expert_change"] < 1e-3
    assert all(metrics[f"moe/expert_change/l{i}"] < 1e-3 for i in range(4))


def row_by_row(policy, ro) -> tuple:
    """Each row alone, cut to its own tokens (no padding), rows in order: log-probs (B, T) and the routing of the real
    positions, row-major."""
    store, lps = [], []
    with torch.inference_mode(), moe.record_routing(policy.model, store):
        for i in range(len(ro.lengths)):
            lps.append(policy.logps(ro, [i], chunk_rows=1))
    return torch.cat(lps), moe.stack_by_layer(store, len(moe.routers(policy.model)))


def test_routing_pass_in_length_sorted_chunks_matches_each_row_alone_position_for_position(tiny_cfg):
    """`moe.routing_pass` runs length-sorted padded chunks, yet hands back the routing of the real positions in
    row-major order: in float64, where no near-tie can flip, every (position, layer, slot) expert is that of the row
    run alone (`row_by_row`) and the log-probs agree to 1e-10; chunks of 1, 3 and all the rows give the same record.
    A padded record moved to the real positions (`moe.to_real_positions`, Routing Replay's) is the same record."""
    from gpolib.models import EMBEDDED
    from gpolib.train import Trainer

    tr = Trainer(tiny_cfg("grpo", model=EMBEDDED["moe"], steps=1, train_router=True, mu=2))
    batch = tr.collect(0)
    tr.policy.model.double()
    tr.policy.model.config._experts_implementation = "eager"  # torch's grouped matmul has no float64 kernel
    ro = batch.rollout
    tr.policy.model.eval()
    lp_ref, ref = row_by_row(tr.policy, ro)
    assert len(ro.lengths.unique()) > 1  # rows of several lengths: the sort moves them
    padded: list = []
    with torch.inference_mode(), moe.record_routing(tr.policy.model, padded):
        tr.policy.logps(ro, chunk_rows=len(ro.lengths), bucket=False)
    moved = moe.to_real_positions(moe.stack_by_layer(padded, len(ref)), moe.real_positions(ro))
    assert all(torch.equal(a, b) for a, b in zip(ref, moved))
    for chunk_rows in (1, 3, len(batch.correct)):
        lp, got = moe.routing_pass(tr.policy, ro, chunk_rows)
        assert len(got) == len(ref)
        for a, b in zip(ref, got):
            assert torch.equal(a, b)
        assert (lp - lp_ref).abs().max() < 1e-10


@pytest.mark.parametrize("high", [64, 200])
def test_expert_change_by_bit_sets_equals_the_pairwise_comparison(high):
    """Ids below 64 go through one int64 bit set per token (bit 63 included); others through every pair: both give
    the comparison's answer, slot by slot, on sets that share none, some or all of their ids."""
    g = torch.Generator().manual_seed(high)
    before = torch.rand(3, 400, high, generator=g).topk(8, dim=-1).indices  # (L, N, k) distinct ids per token
    after = torch.rand(3, 400, high, generator=g).topk(8, dim=-1).indices
    before[0, 0, 0], after[0, 100, 0] = high - 1, high - 1  # the highest id, in a shared set and a new one
    after[:, :50] = before[:, :50].flip(-1)  # the same sets
    after[:, 50:100, :3] = before[:, 50:100, 5:]  # three shared
    want = ~(after.unsqueeze(-1) == before.unsqueeze(-2)).any(dim=-1)
    assert torch.equal(moe._not_in(after, before), want)
    assert want[:, :50].sum() == 0 and want[:, 50:100, :3].sum() == 0 and want[:, 50:100, 3:].sum() > 0
