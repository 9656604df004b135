"""The RL-step benchmark's own checks: like-for-like GRPO loss vs TRL, matmul peak, gpolib phase breakdown."""
import pytest

from gpolib.bench import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark()


def test_like_for_like_loss_matches_trl(bench):
    pytest.importorskip("trl")
    check = bench.like_for_like_loss_check()
    assert check["ok"], check
    assert check["abs_diff"] <= 1e-6 and check["grad_max_abs_diff"] <= 1e-6
    assert 0 < check["clipped_token_share"] < 1  # the batch exercises both clipped and unclipped tokens


def test_trl_mapping_keeps_128_completions_per_step(bench):
    for mu in (1, 2, 4):
        m = bench.trl_mapping(mu)
        assert m["per_device_train_batch_size"] * m["steps_per_generation"] == 16 * 8
        assert m["steps_per_generation"] == mu and m["num_iterations"] == 1 and m["gradient_accumulation_steps"] == 1
    with pytest.raises(ValueError, match="mu=3"):
        bench.trl_mapping(3)


def test_matmul_peak_is_positive(bench):
    assert bench.matmul_peak_gflops(n=128, repeats=2, inner=2) > 0


def test_breakdown_keys_on_one_tiny_step(bench, tiny_cfg):
    import torch

    import gpolib.train as T

    trainer = T.Trainer(tiny_cfg("grpo", prompts_per_step=4, group_size=4, max_new_tokens=24, mu=2))
    patched = (T.policy_loss, torch.nn.utils.clip_grad_norm_, trainer.opt.step)
    br = bench.gpolib_breakdown(trainer, step=0)
    assert set(br) == set(bench.PHASES) | {"total"}
    assert br["total"] > 0 and br["rollout"] > 0 and all(v >= 0 for k, v in br.items() if k != "other")
    assert sum(br[p] for p in bench.PHASES) == pytest.approx(br["total"])
    if br["new_logps_fwd"] > 0:  # the update ran (it is skipped when every advantage is 0)
        assert br["backward"] > 0 and br["optimizer"] > 0
    # the timers are removed again
    assert "rollout" not in vars(trainer) and "logps" not in vars(trainer)
    assert (T.policy_loss, torch.nn.utils.clip_grad_norm_, trainer.opt.step) == patched
