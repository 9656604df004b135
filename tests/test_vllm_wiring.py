"""backend='vllm' wired into the loop, tested with a stand-in engine (tests/vllm_standin.py).

vLLM itself cannot be installed here (CUDA only); the stand-in implements the part of its documented
offline API the code uses (LLM(...), generate with a LoRARequest, sleep / wake_up). What is checked:
the loop builds the engine from the config (memory fraction, sleep mode, LoRA rank, processed
log-probs); each optimizer step hands the engine the current policy as a new LoRA adapter (a new
lora_int_id: vLLM caches adapters by id); the engine's sampling log-probs equal the trainer's
log-probs of the same tokens under the updated policy (so pi_old='engine' is the policy that
sampled); the engine sleeps during the update and wakes for the next rollout.
"""
import pytest
import torch

import vllm_standin
from gpolib import presets


@pytest.fixture
def standin():
    vllm = vllm_standin.install()
    yield vllm
    vllm_standin.uninstall()


def vllm_cfg(**kw):
    base = dict(backend="vllm", steps=2, prompts_per_step=4, group_size=4, max_new_tokens=16, overlong_cache=4, eval_prompts=4,
                eval_samples=2, warmup_steps=0, lr=2e-2, vllm_gpu_memory_utilization=0.25, vllm_sleep=True)
    return presets.get("grpo", **{**base, **kw})


def test_engine_built_from_the_config(standin):
    from gpolib.train import Trainer

    trainer = Trainer(vllm_cfg())
    (llm,) = standin.LLM.instances
    kw = llm.kwargs
    assert kw["enable_lora"] is True and kw["max_lora_rank"] == 16 and kw["gpu_memory_utilization"] == 0.25
    assert kw["enable_sleep_mode"] is True and kw["logprobs_mode"] == "processed_logprobs"
    assert kw["model"].endswith("tiny-qwen3") and trainer.engine.llm is llm


def test_each_update_hands_the_engine_the_new_policy(standin):
    from gpolib.train import Trainer, train_step

    trainer = Trainer(vllm_cfg(old_logps="engine"))
    # the wiring is under test, not learning: random rewards give every group a nonzero advantage
    trainer.score = lambda ro, tasks: (torch.zeros(len(ro.texts)), torch.rand(len(ro.texts)))
    llm = standin.LLM.instances[0]
    rows = [train_step(trainer, step) for step in range(2)]
    assert all(r["update/skipped"] == 0 for r in rows) and trainer.sched.last_epoch == 2
    gens = [c for c in llm.calls if c[0] == "generate"]
    assert [c[1] for c in gens] == [1, 2]  # one adapter per optimizer-step version, never a reused id
    # sleep during each update, wake before the next rollout
    assert llm.calls == [("generate", 1), ("sleep", 1), ("wake_up",), ("generate", 2), ("sleep", 1)]
    # the engine samples from the policy being trained: its log-probs = the trainer's, after 2 updates
    tasks = trainer.sample_prompts(99, 0)
    ro = trainer.rollout(tasks, 2)
    assert llm.calls[-2:] == [("wake_up",), ("generate", 3)]
    trainer.model.eval()
    with torch.no_grad():
        ours = trainer.logps(ro) * ro.completion_mask  # (B, T)
        with trainer.model.disable_adapter():
            base = trainer.logps(ro) * ro.completion_mask
    assert float((ro.sample_logps - ours).abs().max()) < 1e-4
    assert float((ro.sample_logps - base).abs().max()) > 1e-3  # ... and not the base model's


def test_vllm_validation():
    with pytest.raises(ValueError, match="lora_r"):
        presets.get("grpo", backend="vllm", lora_r=0)
    with pytest.raises(ValueError, match="vllm_sleep"):
        presets.get("grpo", vllm_sleep=True)
    with pytest.raises(ValueError, match="vllm_gpu_memory_utilization"):
        presets.get("grpo", backend="vllm", vllm_gpu_memory_utilization=1.5)
    assert presets.get("grpo", backend="vllm").backend == "vllm"


def test_without_vllm_the_error_names_the_extra():
    from gpolib.engine import INSTALL_HINT, make_vllm_engine

    with pytest.raises(ImportError, match="gpolib\\[vllm\\]"):
        make_vllm_engine("data/models/tiny-qwen3")
    assert "CUDA" in INSTALL_HINT
