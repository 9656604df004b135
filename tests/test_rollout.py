"""Rollouts: masks, truncation, sampling log-probs = trainer log-probs, the vLLM conversion."""
import sys
from types import SimpleNamespace

import pytest
import torch

from gpolib.rollout import completion_masks, concat, generate
from gpolib.logprobs import completion_logps
from gpolib.tasks import load_tasks

MODEL = "data/models/tiny-qwen3"


def test_completion_masks_hand_example():
    ids = torch.tensor([[5, 6, 2, 0, 0], [5, 5, 5, 5, 5], [2, 0, 0, 0, 0]])  # eos = 2, pad = 0
    mask, trunc = completion_masks(ids, eos_id=2)
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    assert trunc.tolist() == [False, True, False]


@pytest.fixture(scope="module")
def policy():
    from gpolib.models import load_policy
    return load_policy(MODEL, lora_r=8)


def test_sampling_logps_match_trainer_recompute(policy):
    model, tok = policy
    torch.manual_seed(0)
    from gpolib.tasks import load_tasks
    prompts = [t["prompt"] for t in load_tasks("data/tasks/heldout.jsonl")[:3]]
    for temperature in (1.0, 0.7):
        ro = generate(model, tok, prompts, group_size=4, max_new_tokens=40, temperature=temperature)
        assert ro.completion_ids.shape[0] == 12 and len(ro.texts) == 12
        with torch.no_grad():
            lp = completion_logps(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                                  temperature)
        assert torch.allclose(lp, ro.sample_logps, atol=1e-4), (lp - ro.sample_logps).abs().max()
        assert bool((ro.sample_logps <= 0).all())
        assert ro.lengths.max().item() == ro.completion_ids.shape[1]


def test_compacting_sampler_equals_generate_when_greedy(policy):
    model, tok = policy
    prompts = [t["prompt"] for t in load_tasks("data/tasks/heldout.jsonl")[:24]]
    ours = generate(model, tok, prompts, 1, 96, greedy=True, backend="hf")
    ref = generate(model, tok, prompts, 1, 96, greedy=True, backend="hf_generate")
    assert ours.texts == ref.texts
    assert torch.equal(ours.completion_mask, ref.completion_mask)
    assert torch.allclose(ours.sample_logps, ref.sample_logps, atol=1e-4)


def test_top_p_filter_keeps_the_nucleus():
    from gpolib.engine.loop import _top_p_filter
    logp = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(_top_p_filter(logp, 0.7))
    assert kept.tolist() == [[True, True, False, False]]  # 0.5 < 0.7 <= 0.8
    assert torch.isfinite(_top_p_filter(logp, 1.0)).all()


def test_select_and_concat_round_trip(policy):
    model, tok = policy
    torch.manual_seed(1)
    ro = generate(model, tok, ["Q: 1+1=\n", "Q: 9*9-3=\n"], group_size=3, max_new_tokens=30)
    a, b = ro.select(torch.arange(3)), ro.select(torch.arange(3, 6))
    back = concat([a, b], tok.pad_token_id)
    assert back.texts == ro.texts
    assert torch.equal(back.lengths, ro.lengths)
    assert torch.allclose(back.sample_logps[:, : ro.sample_logps.shape[1]], ro.sample_logps)


def test_vllm_missing_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    from gpolib.engine import SampleSpec, vllm_sample
    with pytest.raises(ImportError, match=r"gpolib\[vllm\]"):
        vllm_sample(None, ["q"], 2, SampleSpec(max_new_tokens=8, eos_id=1, pad_id=0))


def test_vllm_backend_imports_nothing_of_gpolib():
    """No import cycle: rollout.py makes the Rollout, vllm_backend.py only returns tensors."""
    import ast
    import gpolib.engine.vllm_backend as V
    tree = ast.parse(open(V.__file__).read())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.startswith(("gpolib", "."))] and all(n.level == 0 for n in ast.walk(tree)
                                                                           if isinstance(n, ast.ImportFrom))


def test_vllm_generate_on_a_recorded_fixture(policy, monkeypatch):
    """generate(backend='vllm') on vLLM's recorded output shape, with the engine and vllm stubbed out."""
    import gpolib.engine.vllm_backend as V
    _, tok = policy
    eos = tok.eos_token_id
    a, b = tok.convert_tokens_to_ids(["1", "2"])

    def comp(ids, lps, text):
        return SimpleNamespace(token_ids=ids, text=text,
                               logprobs=[{i: SimpleNamespace(logprob=lp)} for i, lp in zip(ids, lps)])
    # recorded shape of vLLM RequestOutput: .outputs -> CompletionOutput(token_ids, text, logprobs)
    outputs = [SimpleNamespace(outputs=[comp([a, b, eos], [-0.1, -0.2, -0.3], "12"),
                                        comp([b, b, b, b], [-1.0, -1.0, -1.0, -1.0], "2222")])]
    engine = SimpleNamespace(generate=lambda prompts, params, lora_request, use_tqdm: outputs)
    monkeypatch.setattr(V, "_import_vllm", lambda: (None, lambda **k: SimpleNamespace(**k), None))
    ro = generate(None, tok, ["Q: 5+7=\n"], group_size=2, max_new_tokens=4, backend="vllm", engine=engine)
    assert ro.completion_mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert ro.truncated.tolist() == [False, True]
    assert torch.allclose(ro.sample_logps, torch.tensor([[-0.1, -0.2, -0.3, 0.0], [-1.0] * 4]))
    assert ro.prompt_index.tolist() == [0, 0] and ro.texts == ["12", "2222"]
    assert ro.prompt_ids.shape[0] == 2
