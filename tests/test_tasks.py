"""The arithmetic-chain task: splits, answers, SFT text, loading errors, tokenizer round trip."""
import json
import random

import pytest

from gpolib.rewards import parse_answer
from gpolib.tasks import (MAX_OPS, MIN_OPS, MUL_MAX, SPLIT_N_OPS, SPLIT_P_MUL, Problem, apply_op, default_task_path,
                          line_kinds, load_tasks, long_product, make_problem, make_splits, product_steps, solution_text,
                          write_splits)
from gpolib.tokenizer import build_tokenizer


def recompute(row: dict) -> int:
    value = row["operands"][0]
    for op, b in zip(row["ops"], row["operands"][1:]):
        value = {"+": value + b, "-": value - b, "*": value * b}[op]
    return value


def test_splits_are_deterministic_and_disjoint(tmp_path):
    sizes = {"train": 300, "val": 40, "heldout": 50}
    a = write_splits(tmp_path / "a", seed=3, sizes=sizes)
    b = write_splits(tmp_path / "b", seed=3, sizes=sizes)
    for name in sizes:
        assert a[name].read_bytes() == b[name].read_bytes()
    rows = {name: load_tasks(a[name]) for name in sizes}
    assert {name: len(r) for name, r in rows.items()} == sizes
    prompts = {name: {r["prompt"] for r in rs} for name, rs in rows.items()}
    assert not prompts["train"] & prompts["heldout"] and not prompts["train"] & prompts["val"]
    assert not prompts["val"] & prompts["heldout"]
    assert len({r["id"] for rs in rows.values() for r in rs}) == 390


def test_shipped_splits_match_the_generator_and_are_disjoint():
    splits = make_splits(seed=0)
    for name, rows in splits.items():
        assert load_tasks(default_task_path(name)) == rows
    prompts = [{r["prompt"] for r in rows} for rows in splits.values()]
    assert sum(map(len, prompts)) == len(set().union(*prompts)) == 512 + 512 + 8000


def test_answers_recompute_and_difficulty_range():
    rows = load_tasks(default_task_path("heldout"))
    for row in rows:
        assert row["answer"] == recompute(row) == Problem.from_row(row).answer
        assert Problem.from_row(row).prompt == row["prompt"] and row["hardness"] == Problem.from_row(row).hardness
        assert row["n_ops"] == len(row["ops"]) and row["prompt"].endswith("=?\n")
    assert {r["n_ops"] for r in rows} == set(SPLIT_N_OPS)  # the RL splits: 6-operator chains
    share = sum(op == "*" for r in rows for op in r["ops"]) / sum(r["n_ops"] for r in rows)
    assert 0.40 < share < SPLIT_P_MUL  # p_mul 0.5 where a product is allowed (running value <= MUL_MAX)
    hardness = [r["hardness"] for r in rows]
    assert min(hardness) <= 2 and max(hardness) >= 12  # easy and hard prompts both present


def test_problem_evaluates_left_to_right():
    p = Problem((7, 3, 4, 12), ("-", "*", "+"))
    assert p.prompt == "7-3*4+12=?\n" and p.answer == 28 and p.values() == [7, 4, 16, 28]
    assert p.hardness == 1  # one product, of the 1-digit running value 4
    assert Problem((47, 6, 13, 7), ("*", "+", "*")).hardness == 2 + 3
    with pytest.raises(ValueError, match="op"):
        apply_op(1, "/", 2)
    with pytest.raises(ValueError, match="n_ops"):
        make_problem(random.Random(0), 1)
    with pytest.raises(ValueError, match="p_mul=1.5"):
        make_problem(random.Random(0), 3, p_mul=1.5)


def test_the_share_of_products_is_a_parameter():
    """p_mul = 1: a product at every step while the running value allows one (<= MUL_MAX); p_mul = 0: none;
    the default draws the shipped splits (checked above against the files)."""
    rng = random.Random(3)
    for _ in range(50):
        p = make_problem(rng, 6, p_mul=1.0)
        for value, op in zip(p.values(), p.ops):
            assert (op == "*") == (value <= MUL_MAX)
        assert "*" not in make_problem(rng, 6, p_mul=0.0).ops


def test_long_product_by_hand():
    # 295 * 7: 5*7 = 35 (write 5, carry 3), 9*7+3 = 66 (6, carry 6), 2*7+6 = 20 -> 2065
    assert long_product(295, 7) == "295*7:5*7=35,9*7+3=66,2*7+6=20;295*7=2065"
    assert long_product(102, 5) == "102*5:2*5=10,0*5+1=1,1*5=5;102*5=510"
    assert long_product(9999, 9) == "9999*9:9*9=81,9*9+8=89,9*9+8=89,9*9+8=89;9999*9=89991"


def test_sft_text_is_always_right_and_parses_to_the_answer():
    rng = random.Random(1)
    for _ in range(300):
        p = make_problem(rng, rng.randint(MIN_OPS, MAX_OPS))
        text = solution_text(p, rng, p_long=0.5)
        assert parse_answer(text) == p.answer and parse_answer(text + "\n") == p.answer
        steps = product_steps(text)
        assert len(steps) == p.ops.count("*") and all(s["ok"] for s in steps)


def test_sft_forms_follow_p_long_and_lengths_vary():
    rng = random.Random(2)
    p = Problem((47, 6, 13, 7, 5), ("*", "+", "*", "-"))
    assert solution_text(p, rng, p_long=0.0) == "47*6=282\n282+13=295\n295*7=2065\n2065-5=2060\nA=2060"
    forms = [s["form"] for _ in range(500) for s in product_steps(solution_text(p, rng, p_long=0.3))]
    assert abs(forms.count("long") / len(forms) - 0.3) < 0.05
    lengths = {len(solution_text(p, rng, p_long=0.5)) for _ in range(50)}
    assert len(lengths) == 4  # two products, each direct or long: 4 combinations of lengths


def test_product_steps_and_line_kinds_read_completions():
    text = "47*6=282\n282+13=295\n295*7:5*7=35,9*7+3=66,2*7+6=20;295*7=2064\nA=2064"
    assert product_steps(text) == [{"digits": 2, "form": "direct", "ok": True},
                                   {"digits": 3, "form": "long", "ok": False}]
    kinds = line_kinds(text)
    assert kinds == {"long": 42, "direct": 9, "sum": 11, "answer": 7, "other": 0}
    assert sum(kinds.values()) == len(text) + 1
    # a mismatched long line (different product on both sides) is not a product line
    assert product_steps("29*7:9*7=63;28*7=196") == []


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
