"""The RL-step benchmark's own checks: like-for-like GRPO loss vs TRL, matmul peak, gpolib phase breakdown."""
import pytest

from gpolib.bench import common, ours, trl_side  # a package with an entry point: python -m gpolib bench


def test_like_for_like_loss_matches_trl():
    pytest.importorskip("trl")
    check = common.like_for_like_loss_check()
    assert check["ok"], check
    assert check["abs_diff"] <= 1e-6 and check["grad_max_abs_diff"] <= 1e-6
    assert 0 < check["clipped_token_share"] < 1  # the batch exercises both clipped and unclipped tokens


def test_trl_mapping_keeps_128_completions_per_step():
    for mu in (1, 2, 4):
        m = trl_side.trl_mapping(mu)
        assert m["per_device_train_batch_size"] * m["steps_per_generation"] == 16 * 8
        assert m["steps_per_generation"] == mu and m["num_iterations"] == 1 and m["gradient_accumulation_steps"] == 1
    with pytest.raises(ValueError, match="mu=3"):
        trl_side.trl_mapping(3)


def test_matmul_peak_is_positive():
    assert common.matmul_peak_gflops(n=128, repeats=2, inner=2) > 0


def test_breakdown_keys_on_one_tiny_step(tiny_cfg):
    import torch

    import gpolib.update as U
    from gpolib.train import Trainer

    trainer = Trainer(tiny_cfg("grpo", prompts_per_step=4, group_size=4, max_new_tokens=24, mu=2))
    patched = (U.policy_loss, U.pi_old, torch.nn.utils.clip_grad_norm_, trainer.opt.step)
    br = ours.gpolib_breakdown(trainer, step=0)
    assert set(br) == set(ours.PHASES) | {"total"}
    assert br["total"] > 0 and br["rollout"] > 0 and all(v >= 0 for k, v in br.items() if k != "other")
    assert sum(br[p] for p in ours.PHASES) == pytest.approx(br["total"])
    if br["new_logps_fwd"] > 0:  # the update ran (it is skipped when every advantage is 0)
        assert br["backward"] > 0 and br["optimizer"] > 0
    # the timers are removed again
    assert "rollout" not in vars(trainer) and "logps" not in vars(trainer)
    assert (U.policy_loss, U.pi_old, torch.nn.utils.clip_grad_norm_, trainer.opt.step) == patched
