"""The step-0 evaluation cache (`gpolib.eval_cache`): what it rests on (every run of one base policy and evaluation
setting evaluates to the same numbers before its first update, and training does not depend on the evaluation
having run) and what it does (one computation per key, the key follows the evaluation's inputs)."""
import json

import pytest

from gpolib import eval_cache
from gpolib.models import EMBEDDED
from gpolib.train import Trainer, train

SMALL = dict(max_new_tokens=160, eval_prompts=6, eval_samples=2)


def test_arms_and_seeds_share_their_step0_evaluation(tiny_cfg):
    """Other seed (other LoRA A), other objective, lr, group size and mu: the same numbers at step 0, also for a MoE
    whose router is trained in full (peft's copy of it)."""
    a = Trainer(tiny_cfg("grpo", seed=0, **SMALL)).evaluate(0)
    b = Trainer(tiny_cfg("gspo", seed=2, lr=1e-2, group_size=2, **SMALL)).evaluate(0)
    assert a == b and eval_cache.key(tiny_cfg("grpo", seed=0, **SMALL)) == eval_cache.key(
        tiny_cfg("gspo", seed=2, lr=1e-2, group_size=2, **SMALL))
    moe = dict(model=EMBEDDED["moe"], mu=2, **SMALL)
    c = Trainer(tiny_cfg("grpo", seed=0, **moe)).evaluate(0)
    d = Trainer(tiny_cfg("gspo", seed=1, train_router=True, **moe)).evaluate(0)
    assert c == d and c != a


def test_one_computation_per_key(tiny_cfg, monkeypatch):
    first = Trainer(tiny_cfg("grpo", seed=0, **SMALL))
    got = eval_cache.step0(first)
    path = eval_cache.cache_dir() / f"{eval_cache.key(first.cfg)}.json"
    assert json.loads(path.read_text()) == got
    second = Trainer(tiny_cfg("dr_grpo", seed=1, **SMALL))
    monkeypatch.setattr(second, "evaluate", lambda step: pytest.fail("a cached evaluation was computed again"))
    assert eval_cache.step0(second) == got  # the stored numbers, and they are what it would compute:
    assert Trainer(tiny_cfg("dr_grpo", seed=1, **SMALL)).evaluate(0) == got


@pytest.mark.parametrize("change", [dict(eval_seed=7), dict(max_new_tokens=150), dict(eval_prompts=5),
                                    dict(model=EMBEDDED["moe"]), dict(rollout_autocast="bfloat16"),
                                    dict(task_eval="data/tasks/val.jsonl")])
def test_key_follows_what_the_evaluation_reads(tiny_cfg, change):
    base = tiny_cfg("grpo", **SMALL)
    assert eval_cache.key(tiny_cfg("grpo", **{**SMALL, **change})) != eval_cache.key(base)
    assert eval_cache.key(tiny_cfg("grpo", seed=5, steps=9, lr=3e-2, **SMALL)) == eval_cache.key(base)


def test_training_is_the_same_with_the_cached_evaluation(tiny_cfg, tmp_path, monkeypatch):
    """The second run takes its step-0 evaluation from the cache (it never evaluates at step 0) and trains to the
    same metrics and final evaluation: every step reseeds, nothing depends on the evaluation having run."""
    cfg = tiny_cfg("grpo", steps=2, **SMALL)
    first = train(cfg, tmp_path / "a", progress=False)
    real = Trainer.evaluate
    steps_evaluated = []
    monkeypatch.setattr(Trainer, "evaluate", lambda self, step: steps_evaluated.append(step) or real(self, step))
    second = train(cfg, tmp_path / "b", progress=False)
    assert steps_evaluated == [2]  # the final evaluation only
    drop = lambda rows: [{k: v for k, v in r.items() if not k.startswith("time/") and k != "tokens_per_s"}  # noqa: E731
                         for r in rows]
    assert drop(first) == drop(second)
    sa, sb = (json.loads((tmp_path / r / "summary.json").read_text()) for r in "ab")
    assert sa["eval"] == sb["eval"]
