import os

import pytest
import torch

torch.set_num_threads(2)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture
def tiny_cfg():
    """A train config small enough for a few seconds per step on 2 cores."""
    from gpolib import presets

    def make(name="grpo", **kw):
        base = dict(steps=2, prompts_per_step=4, group_size=4, max_new_tokens=48, eval_prompts=8, eval_samples=2,
                    checkpoint_every=1, warmup_steps=0)
        if name == "gfpo":
            base.update(group_size=8, gfpo_k=4)
        if name == "gspo":
            base.update(mu=2)
        base.update(kw)
        return presets.get(name, **base)
    return make
