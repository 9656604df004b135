"""The arithmetic-chain task: splits, answers, SFT text, loading errors, tokenizer round trip."""
import json
import random

import pytest

from gpolib.rewards import parse_answer
from gpolib.tasks import (MAX_OPS, Problem, apply_op, default_task_path, load_tasks, make_problem, make_splits,
                          solution_text, write_splits)
from gpolib.tokenizer import build_tokenizer


def recompute(row: dict) -> int:
    value = row["operands"][0]
    for op, b in zip(row["ops"], row["operands"][1:]):
        value = {"+": value + b, "-": value - b, "*": value * b}[op]
    return value


def test_splits_are_deterministic_and_disjoint(tmp_path):
    a = write_splits(tmp_path / "a", seed=3, n_train=300, n_heldout=50)
    b = write_splits(tmp_path / "b", seed=3, n_train=300, n_heldout=50)
    assert a["train"].read_bytes() == b["train"].read_bytes()
    assert a["heldout"].read_bytes() == b["heldout"].read_bytes()
    train, heldout = load_tasks(a["train"]), load_tasks(a["heldout"])
    assert len(train) == 300 and len(heldout) == 50
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in heldout}
    assert len({r["id"] for r in train + heldout}) == 350


def test_shipped_splits_match_the_generator():
    train, heldout = make_splits(seed=0)
    assert load_tasks(default_task_path("train")) == train
    assert load_tasks(default_task_path("heldout")) == heldout
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in heldout}


def test_answers_recompute_and_difficulty_range():
    rows = load_tasks(default_task_path("heldout"))
    for row in rows:
        assert row["answer"] == recompute(row) == Problem.from_row(row).answer
        assert Problem.from_row(row).prompt == row["prompt"]
        assert row["n_ops"] == len(row["ops"]) and row["prompt"].endswith("=?\n")
    assert {r["n_ops"] for r in rows} == set(range(1, MAX_OPS + 1))


def test_problem_evaluates_left_to_right():
    p = Problem((7, 3, 4, 12), ("-", "*", "+"))
    assert p.prompt == "7-3*4+12=?\n" and p.answer == 28 and p.values() == [7, 4, 16, 28]
    with pytest.raises(ValueError, match="op"):
        apply_op(1, "/", 2)
    with pytest.raises(ValueError, match="n_ops"):
        make_problem(random.Random(0), 0)


def test_clean_sft_text_parses_to_the_answer():
    rng = random.Random(1)
    for _ in range(300):
        p = make_problem(rng, rng.randint(1, MAX_OPS))
        text = solution_text(p, rng, p_check=0.5, p_noise=0.0)
        assert parse_answer(text) == p.answer
        assert parse_answer(text + "\n") == p.answer


def test_sft_text_lengths_vary_and_noise_makes_errors():
    rng = random.Random(2)
    p = Problem((13, 6, 15, 2, 19), ("*", "-", "-", "-"))
    lengths = {len(solution_text(p, rng, p_check=0.3, p_noise=0.0)) for _ in range(50)}
    assert len(lengths) >= 4
    wrong = sum(parse_answer(solution_text(p, rng, p_noise=0.2)) != p.answer for _ in range(400))
    assert 0.2 < wrong / 400 < 0.8  # 1 - 0.8**4 = 0.59


def test_load_tasks_names_file_and_line_on_malformed_json(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"prompt": "1+1=?\n", "answer": 2}) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:2"):
        load_tasks(path)


def test_load_tasks_names_line_missing_a_field(tmp_path):
    path = tmp_path / "missing.jsonl"
    path.write_text(json.dumps({"prompt": "1+1=?\n", "answer": 2}) + "\n\n" + json.dumps({"prompt": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"missing\.jsonl:3"):
        load_tasks(path)


def test_load_tasks_empty_and_missing_file(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        load_tasks(empty)
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_tasks(tmp_path / "nope.jsonl")


def test_tokenizer_round_trips_task_strings():
    tok = build_tokenizer()
    rng = random.Random(4)
    rows = load_tasks(default_task_path("train"))[:100]
    strings = [r["prompt"] for r in rows]
    strings += [solution_text(Problem.from_row(r), rng) for r in rows]
    assert len(strings) == 200
    for s in strings:
        ids = tok(s).input_ids
        assert len(ids) == len(s) and tok.unk_token_id not in ids
        assert tok.decode(ids, skip_special_tokens=True) == s
        assert tok.decode(ids + [tok.eos_token_id, tok.pad_token_id], skip_special_tokens=True) == s


def test_render_prompt_raw_for_embedded_and_chat_with_a_template():
    from gpolib.models import load_policy
    from gpolib.tasks import INSTRUCTION, render_prompt
    _, tok = load_policy("data/models/tiny-qwen3", lora_r=0)
    assert render_prompt(tok, "7-3=?\n") == "7-3=?\n"  # no chat template: raw
    with pytest.raises(ValueError, match="chat template"):
        render_prompt(tok, "7-3=?\n", "chat")
    with pytest.raises(ValueError, match="prompt_style"):
        render_prompt(tok, "7-3=?\n", "fancy")
    tok.chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
    assert render_prompt(tok, "7-3=?\n") == f"<user>{INSTRUCTION}7-3=?<assistant>"
    assert render_prompt(tok, "7-3=?\n", "raw") == "7-3=?\n"
