"""TrainConfig.adapter_steps: adapters kept before the end (D2's fixed panel), outside the run's identity."""
import pytest
import torch
from safetensors.torch import load_file

from gpolib import presets
from gpolib.train import Trainer, adapter_save_steps, train


def _cfg(**kw):
    base = dict(steps=3, prompts_per_step=2, group_size=2, eval_prompts=2, eval_samples=1, max_new_tokens=24,
                warmup_steps=0)
    return presets.get("grpo", **{**base, **kw})


def test_steps_and_shares_by_hand():
    assert adapter_save_steps(_cfg(adapter_steps=(0.5,)).replace(steps=100)) == {50}
    assert adapter_save_steps(_cfg(adapter_steps=(0.5, 2)).replace(steps=3)) == {2}  # round(1.5) = 2, and 2
    assert adapter_save_steps(_cfg(adapter_steps=(0.1,)).replace(steps=4)) == {1}  # round(0.4) = 0 -> at least 1
    assert adapter_save_steps(_cfg(adapter_steps=(0.9,)).replace(steps=2)) == {1}  # round(1.8) = 2 -> at most 1
    assert adapter_save_steps(_cfg()) == set()


def test_outside_the_identity_and_read_back_from_json():
    a, b = _cfg(), _cfg(adapter_steps=(0.5,))
    assert a.identity() == b.identity() and a.fingerprint() == b.fingerprint()
    assert type(b).from_dict({**b.to_dict(), "adapter_steps": [0.5]}).adapter_steps == (0.5,)
    with pytest.raises(ValueError, match=r"adapter_steps=\(3,\) is invalid; allowed: a tuple of steps 1..2"):
        _cfg(adapter_steps=(3,))


def test_the_kept_adapter_is_the_policy_of_its_step(tmp_path, monkeypatch):
    """The update is replaced by one that writes its step number + 1 into one LoRA B entry: the adapter kept
    after step 1 holds 2.0 there (steps count from 0), the final one 3.0, every other B entry still 0."""
    def marking_update(self, batch, step):
        name, prm = next((n, p) for n, p in self.model.named_parameters() if "lora_B" in n)
        with torch.no_grad():
            prm[0, 0] = step + 1.0
        return {}
    monkeypatch.setattr(Trainer, "update", marking_update)
    train(_cfg(adapter_steps=(2,)), tmp_path, progress=False)
    mid = load_file(tmp_path / "adapter" / "step-2" / "adapter_model.safetensors")
    end = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    b = [k for k in mid if "lora_B" in k]
    assert b and set(mid) == set(end)
    marked = [k for k in b if end[k].abs().max() > 0]
    assert len(marked) == 1 and float(mid[marked[0]][0, 0]) == 2.0 and float(end[marked[0]][0, 0]) == 3.0
    assert all(float(mid[k].abs().max()) == 0 for k in b if k not in marked)
    assert sorted(p.name for p in (tmp_path / "adapter").iterdir() if p.is_dir()) == ["step-2"]
