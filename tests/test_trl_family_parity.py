"""TRL parity of the family since GSPO: CISPO, GMPO, SAPO, LUSPO, VESPO, the two selection steps (high-entropy
tokens, the off-policy sequence mask) and the vLLM importance-sampling correction.

TRL 1.16.0's own code on a shared batch, trainers built from the exported configuration by scale/trl_grpo.py
(only the model forward replaced by fixed log-probs, as in tests/test_export.py): `GRPOTrainer._compute_loss`
with loss_type='cispo' where the cap binds, 'sapo' at both ratio levels, 'luspo' where the sequence clip binds,
'vespo' on both advantage signs, top_entropy_quantile and off_policy_mask_threshold where they drop some tokens or
responses, `trl.experimental.gmpo.GMPOTrainer._compute_loss` on both clip sides with a KL term, and the
correction's weights computed by TRL's `_generate_and_score_completions` (a `rollout_func` stands in for vLLM and
returns the engine's log-probs) then applied by its `_compute_loss`. Value and d loss / d log pi_theta equal ours
to 1e-6.
"""
import importlib.util
import math
import sys
import warnings
from pathlib import Path

import pytest
import torch

from gpolib import presets
from gpolib.objectives import mismatch_weights, policy_loss

trl = pytest.importorskip("trl", reason="TRL: make test installs the pinned `trl` extra")
SCRIPT = Path(__file__).resolve().parents[1] / "scale" / "trl_grpo.py"
TOL = 1e-6
MODES = ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("trl_grpo_family", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["trl_grpo_family"] = module
    spec.loader.exec_module(module)
    return module


def small(name, **kw):
    return presets.get(name, **{**dict(prompts_per_step=2, group_size=4, max_new_tokens=24, steps=1, eval_prompts=8),
                                **kw})


def trainer_for(script, cfg, tmp_path, logps):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = script.build_trainer(cfg, str(tmp_path), strict=True, cpu=True)
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logps, torch.zeros_like(logps), None)
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    return trainer


def loss_inputs(mask, adv, old, ref=None):
    B, T = mask.shape
    out = {"prompt_ids": torch.zeros(B, 1, dtype=torch.long), "prompt_mask": torch.ones(B, 1, dtype=torch.long),
           "completion_ids": torch.zeros(B, T, dtype=torch.long), "completion_mask": mask, "advantages": adv,
           "old_per_token_logps": old, "num_items_in_batch": mask.sum()}
    if ref is not None:
        out["ref_per_token_logps"] = ref
    return out


def batch(B=8, T=10, spread=1.0, seed=0):
    """Ragged masks, log ratios spread wide: CISPO's cap e^log(5) and GMPO's +-0.4 bind on some tokens."""
    g = torch.Generator().manual_seed(seed)
    old = -3 * torch.rand(B, T, generator=g)
    logps = old + spread * torch.randn(B, T, generator=g)
    logps[:, 0] = old[:, 0] + 2.0  # r = e^2 > 5
    lengths = torch.randint(2, T + 1, (B,), generator=g)
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).long()  # (B, T)
    return logps.requires_grad_(True), old, torch.randn(B, generator=g), mask, old + 0.2 * torch.randn(B, T, generator=g)


def assert_same(ours, theirs, logps):
    (g_ours,) = torch.autograd.grad(ours, logps, retain_graph=True)
    (g_theirs,) = torch.autograd.grad(theirs, logps)
    assert abs(ours.item() - theirs.item()) <= TOL, (ours.item(), theirs.item())
    assert float((g_ours - g_theirs).abs().max()) <= TOL and float(g_ours.abs().max()) > 0


@pytest.mark.parametrize("cap", [5.0, 1.28])
def test_cispo_equals_trl_where_the_cap_binds(cap, script, tmp_path):
    """TRL's cap is absolute (r <= epsilon_high): our Cispo.cap is exported as it is, ScaleRL's 5 and a tight 1.28."""
    cfg = small("cispo", loss_cap=cap)
    logps, old, adv, mask, _ = batch()
    trainer = trainer_for(script, cfg, tmp_path, logps)
    assert trainer.loss_type == "cispo" and trainer.epsilon_high == cap
    ratio = torch.exp(logps.detach() - old)
    assert 0 < int(((ratio > cap) & mask.bool()).sum()) < int(mask.sum())  # the cap binds on some tokens
    ours, _ = policy_loss(logps, old, adv, mask, cfg.loss)
    assert_same(ours, trainer._compute_loss(trainer.model, loss_inputs(mask, adv, old)), logps)


def test_gmpo_equals_trl_experimental_gmpo_on_both_clip_sides(script, tmp_path):
    from trl.experimental.gmpo import GMPOTrainer

    cfg = small("gmpo", loss_beta=0.04)
    logps, old, adv, mask, ref = batch(spread=0.5)
    trainer = trainer_for(script, cfg, tmp_path, logps)
    assert isinstance(trainer, GMPOTrainer) and (trainer.epsilon_low, trainer.epsilon_high) == (0.4, 0.4)
    log_r = (logps.detach() - old)[mask.bool()]
    assert bool((log_r > 0.4).any()) and bool((log_r < -0.4).any())
    ours, _ = policy_loss(logps, old, adv, mask, cfg.loss, ref)
    assert_same(ours, trainer._compute_loss(trainer.model, loss_inputs(mask, adv, old, ref)), logps)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_sapo_equals_trl_at_both_ratio_levels_with_a_kl_term(level, script, tmp_path):
    """TRL's soft gate (4 / tau) sigmoid(tau (r - 1)) A, tau by the advantage's sign, at the token and the sequence
    ratio: the gate's weight falls below 0.1 on some tokens, not on all, and no token loses its gradient."""
    cfg = small("sapo", loss_beta=0.04, loss_ratio_level=level)
    logps, old, adv, mask, ref = batch(spread=1.0 if level == "token" else 3.0)
    trainer = trainer_for(script, cfg, tmp_path, logps)
    assert trainer.loss_type == "sapo" and trainer.importance_sampling_level == level
    assert (trainer.args.sapo_temperature_pos, trainer.args.sapo_temperature_neg) == (1.0, 1.05)
    ours, info = policy_loss(logps, old, adv, mask, cfg.loss, ref)
    assert 0 < info["gate/low_frac"].value < 1 and 0 < info["gate/mean"].value < 1
    assert_same(ours, trainer._compute_loss(trainer.model, loss_inputs(mask, adv, old, ref)), logps)


def test_luspo_equals_trl_where_the_sequence_clip_binds(script, tmp_path):
    """TRL's luspo: GSPO's clipped sequence term, summed over each response's tokens, mean over the responses."""
    cfg = small("luspo", loss_eps_low=0.05, loss_eps_high=0.08)
    logps, old, adv, mask, _ = batch(spread=0.3)
    trainer = trainer_for(script, cfg, tmp_path, logps)
    assert trainer.loss_type == "luspo" and trainer.importance_sampling_level == "sequence"
    assert (trainer.epsilon_low, trainer.epsilon_high) == (0.05, 0.08)
    ours, info = policy_loss(logps, old, adv, mask, cfg.loss)
    assert 0 < info["clip/frac"].value < 1  # the clip binds on some responses, not on all
    assert_same(ours, trainer._compute_loss(trainer.model, loss_inputs(mask, adv, old)), logps)


@pytest.mark.parametrize("spread", [0.05, 0.4])
def test_vespo_equals_trl_with_its_gamma_weight_on_both_signs(spread, script, tmp_path):
    """TRL's vespo: sg(phi(w)) A log pi, w the product of the token ratios, (k, lambda) by the advantage's sign; a
    small spread keeps w near 1 (phi near its peak), a wider one damps some responses below 0.1."""
    cfg = small("vespo", loss_beta=0.04)
    logps, old, adv, mask, ref = batch(spread=spread)
    with torch.no_grad():
        logps[:, 0] = old[:, 0] + spread  # the batch's r = e^2 on the first token would dominate w
    trainer = trainer_for(script, cfg, tmp_path, logps)
    assert trainer.loss_type == "vespo" and (trainer.args.vespo_k_pos, trainer.args.vespo_lambda_neg) == (2.0, 2.0)
    ours, info = policy_loss(logps, old, adv, mask, cfg.loss, ref)
    assert bool((adv > 0).any()) and bool((adv < 0).any()) and 0 < info["gamma_weight/mean"].value
    if spread > 0.1:
        assert 0 < info["gamma_weight/low_frac"].value < 1
    assert_same(ours, trainer._compute_loss(trainer.model, loss_inputs(mask, adv, old, ref)), logps)


@pytest.mark.parametrize("preset", ["grpo", "cispo", "sapo"])
def test_top_entropy_tokens_equal_trl(preset, script, tmp_path):
    """TRL's top_entropy_quantile = 0.2: the policy term on the tokens at or above the 0.8 quantile of entropy only."""
    cfg = small(preset, loss_top_entropy_quantile=0.2)
    logps, old, adv, mask, _ = batch(spread=0.3)
    entropies = 2 * torch.rand(logps.shape, generator=torch.Generator().manual_seed(5))
    trainer = trainer_for(script, cfg, tmp_path, logps)
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logps, entropies, None)
    assert trainer.top_entropy_quantile == 0.2
    ours, info = policy_loss(logps, old, adv, mask, cfg.loss, entropies=entropies)
    assert info["select/entropy_dropped"].value == pytest.approx(0.8, abs=0.03)
    assert_same(ours, trainer._compute_loss(trainer.model, loss_inputs(mask, adv, old)), logps)


@pytest.mark.parametrize("engine", [False, True])
def test_off_policy_sequence_mask_equals_trl(engine, script, tmp_path):
    """TRL's off_policy_mask_threshold: a response with A < 0 and mean log(pi_sample / pi_theta) > delta is dropped;
    pi_sample is the engine's log-probs where given (TRL's sampling_per_token_logps), pi_old otherwise."""
    cfg = small("grpo", loss_off_policy_mask_threshold=0.1)
    logps, old, adv, mask, sample = batch(spread=0.1, seed=2)
    with torch.no_grad():
        logps[:, 0] = old[:, 0]  # no r = e^2 token
        logps[(adv < 0).nonzero()[::2, 0]] -= 0.3  # every other A < 0 response drifts 0.3 nats a token from pi_old
    trainer = trainer_for(script, cfg, tmp_path, logps)
    assert trainer.off_policy_mask_threshold == 0.1
    inputs = loss_inputs(mask, adv, old)
    if engine:
        inputs["sampling_per_token_logps"] = sample
    ours, info = policy_loss(logps, old, adv, mask, cfg.loss, engine_logps=sample if engine else None)
    assert 0 < info["select/off_policy_dropped"].value < float((adv < 0).float().mean())  # some A < 0, not all
    assert_same(ours, trainer._compute_loss(trainer.model, inputs), logps)


def trl_weights(trainer, old, engine, lengths):
    """TRL's importance_sampling_ratio from `_generate_and_score_completions`, vLLM replaced by a rollout_func."""
    B = len(lengths)
    ids = [[5 + (i + t) % 7 for t in range(n)] for i, n in enumerate(lengths)]  # never EOS: masks from lengths

    def rollout(prompts, _trainer):
        return {"prompt_ids": [[3, 4]] * len(prompts), "completion_ids": ids,
                "logprobs": [engine[i, :n].tolist() for i, n in enumerate(lengths)]}

    trainer.rollout_func, trainer.use_vllm = rollout, True  # the correction runs only with vLLM
    trainer._last_loaded_step = trainer.state.global_step  # no weight sync to an engine
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (old, None, None)
    inputs = [{"prompt": "1+1=?", "answer": 2} for _ in range(B)]
    return trainer._generate_and_score_completions(inputs)


@pytest.mark.parametrize("mode", MODES)
def test_mismatch_weights_and_their_use_equal_trl(mode, script, tmp_path):
    cfg = small("grpo", loss_mismatch_correction=mode, loss_mismatch_cap=1.6)
    g = torch.Generator().manual_seed(3)
    lengths = [10, 3, 7, 10, 1, 5, 8, 2]
    B, T = len(lengths), max(lengths)
    mask = (torch.arange(T).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).long()  # (B, T)
    old = (-3 * torch.rand(B, T, generator=g)) * mask
    engine = (old + 0.25 * torch.randn(B, T, generator=g)) * mask
    trainer = trainer_for(script, cfg, tmp_path, old)
    assert (trainer.vllm_importance_sampling_mode, trainer.vllm_importance_sampling_clip_max) == (mode, 1.6)
    out = trl_weights(trainer, old, engine, lengths)
    assert torch.equal(out["completion_mask"], mask)
    theirs_w = out["importance_sampling_ratio"]
    ours_w = mismatch_weights(old, engine, mask, mode, 1.6)
    assert theirs_w.shape == ours_w.shape and torch.allclose(theirs_w, ours_w, atol=TOL, rtol=0)
    changed = (ours_w != torch.exp(((old - engine) * mask).sum(1, keepdim=True) if mode.startswith("sequence")
                                   else (old - engine) * mask))
    assert bool(changed.any()) and not bool(changed.all())  # the cap binds on some weights, not all
    # ... and TRL's loss with its weights = ours with the engine's log-probs
    logps = (old + 0.2 * torch.randn(B, T, generator=g)).requires_grad_(True)
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logps, torch.zeros_like(logps), None)
    adv = torch.randn(B, generator=g)
    inputs = {**loss_inputs(mask, adv, old), "importance_sampling_ratio": theirs_w}
    ours, info = policy_loss(logps, old, adv, mask, cfg.loss, engine_logps=engine)
    assert_same(ours, trainer._compute_loss(trainer.model, inputs), logps)
    assert math.isfinite(info["mismatch/kl"].value)
