"""The embedded verifiable task: integer arithmetic chains evaluated left to right.

A problem is a chain of 2..5 small integers joined by `+`, `-` or `*`, evaluated
strictly left to right (no operator precedence). The prompt is the chain followed
by `=?` and a newline; the model continues it with one line per intermediate step,
optional re-checking lines, and a final answer line:

    prompt      "7-3*4+12=?\\n"
    completion  "7-3=4\\n4*4=16\\nchk 16/4=4\\n16+12=28\\nA=28"   (+ EOS token)

- step line    `a<op>b=c`         c is the running value after applying <op> b.
- check line   `chk c<inv>b=a`    redundant inverse of the step just above it
                                  (`+` <-> `-`, `*` -> `/`); it never changes the answer.
- answer line  `A=<int>`          the only line the reward reads (see
                                  `gpolib.rewards.parse_answer`).

Difficulty is `n_ops`, the number of operators (1..4): every extra operator is one
more step where the policy can slip. The supervised data (`solution_text`) adds
check lines at random, so answers to one prompt vary in length, and writes a wrong
step result with a small probability, so the pretrained base policy is imperfect.

Splits live in `data/tasks/{train,heldout}.jsonl`, one JSON object per line:
`{"id": str, "prompt": str, "answer": int, "n_ops": int, "operands": [...], "ops": [...]}`.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from .paths import repo_root, resolve

OPS = ("+", "-", "*")
MAX_OPS = 4
"""the longest chain has MAX_OPS operators (MAX_OPS + 1 operands)"""
N_OPS_CYCLE = (1, 2, 3, 4, 2, 3, 4, 4)
"""split rows take n_ops from this cycle (one-step chains are few and easy)"""
MUL_LIMIT = 60
"""`*` is only drawn while |running value| <= MUL_LIMIT, which keeps numbers short"""


@dataclass(frozen=True)
class Problem:
    """One arithmetic chain, evaluated left to right."""

    operands: tuple[int, ...]
    """the integers a_0..a_n of the chain"""
    ops: tuple[str, ...]
    """the n operators, each in OPS; ops[i] joins the running value and operands[i + 1]"""

    @classmethod
    def from_row(cls, row: dict) -> "Problem":
        """The problem of a split row (its `operands` and `ops` fields)."""
        return cls(tuple(row["operands"]), tuple(row["ops"]))

    @property
    def n_ops(self) -> int:
        return len(self.ops)

    @property
    def prompt(self) -> str:
        """Exactly the text fed to the tokenizer; the model continues it."""
        chain = str(self.operands[0]) + "".join(f"{o}{b}" for o, b in zip(self.ops, self.operands[1:]))
        return f"{chain}=?\n"

    @property
    def answer(self) -> int:
        return self.values()[-1]

    def values(self) -> list[int]:
        """Running values [a_0, v_1, ..., v_n], v_n being the answer."""
        out = [self.operands[0]]
        for op, b in zip(self.ops, self.operands[1:]):
            out.append(apply_op(out[-1], op, b))
        return out


def apply_op(a: int, op: str, b: int) -> int:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    raise ValueError(f"op={op!r} is invalid; allowed: {OPS}")


def make_problem(rng: random.Random, n_ops: int) -> Problem:
    """Draw a chain with `n_ops` operators: `+`/`-` take 0..20, `*` takes 2..9."""
    if not 1 <= n_ops <= MAX_OPS:
        raise ValueError(f"n_ops={n_ops!r} is invalid; allowed: 1..{MAX_OPS}")
    value = rng.randint(0, 20)
    operands, ops = [value], []
    for _ in range(n_ops):
        choices = OPS if abs(value) <= MUL_LIMIT else OPS[:2]
        op = rng.choice(choices)
        b = rng.randint(2, 9) if op == "*" else rng.randint(0, 20)
        value = apply_op(value, op, b)
        operands.append(b)
        ops.append(op)
    return Problem(tuple(operands), tuple(ops))


def _check_line(c: int, op: str, b: int) -> str | None:
    """`chk c<inv>b=a` undoing the step `a<op>b=c`; None when `c/b` is not exact."""
    if op == "*":
        return f"chk {c}/{b}={c // b}" if c % b == 0 else None
    inverse, a = ("-", c - b) if op == "+" else ("+", c + b)
    return f"chk {c}{inverse}{b}={a}"


def _slip(rng: random.Random, value: int) -> int:
    """A plausible wrong result: off by 1..10 in either direction."""
    return value + rng.choice((-1, 1)) * rng.randint(1, 10)


def solution_text(problem: Problem, rng: random.Random, p_check: float = 0.3,
                  p_noise: float = 0.05) -> str:
    """SFT completion for `problem` (without EOS): steps, optional checks, answer line.

    p_check: probability of a redundant check line after each step.
    p_noise: probability that a step's written result is wrong; later steps then
        continue from the wrong value, so the final answer is wrong too.
    """
    lines, value = [], problem.operands[0]
    for op, b in zip(problem.ops, problem.operands[1:]):
        result = apply_op(value, op, b)
        if rng.random() < p_noise:
            result = _slip(rng, result)
        lines.append(f"{value}{op}{b}={result}")
        check = _check_line(result, op, b) if rng.random() < p_check else None
        if check is not None:
            lines.append(check)
        value = result
    lines.append(f"A={value}")
    return "\n".join(lines)


def _record(problem: Problem, split: str, index: int) -> dict:
    return {"id": f"{split}-{index:05d}", "prompt": problem.prompt, "answer": problem.answer,
            "n_ops": problem.n_ops, "operands": list(problem.operands), "ops": list(problem.ops)}


def make_splits(seed: int = 0, n_train: int = 4000, n_heldout: int = 512) -> tuple[list[dict], list[dict]]:
    """Deterministic, disjoint (by prompt) train and held-out splits; n_ops follows N_OPS_CYCLE."""
    rng = random.Random(seed)
    seen: set[str] = set()
    splits = {"train": [], "heldout": []}
    for split, n in (("heldout", n_heldout), ("train", n_train)):
        while len(splits[split]) < n:
            problem = make_problem(rng, N_OPS_CYCLE[len(splits[split]) % len(N_OPS_CYCLE)])
            if problem.prompt in seen:
                continue
            seen.add(problem.prompt)
            splits[split].append(_record(problem, split, len(splits[split])))
    return splits["train"], splits["heldout"]


def write_splits(out_dir: str | Path = "data/tasks", seed: int = 0, n_train: int = 4000,
                 n_heldout: int = 512) -> dict[str, Path]:
    """Write train.jsonl and heldout.jsonl under `out_dir`; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train, heldout = make_splits(seed, n_train, n_heldout)
    paths = {}
    for name, rows in (("train", train), ("heldout", heldout)):
        paths[name] = out / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return paths


def _parse_line(line: str, path: Path, lineno: int) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}:{lineno}: malformed JSON ({err.msg})") from None
    if not isinstance(row, dict) or "prompt" not in row or "answer" not in row:
        raise ValueError(f"{path}:{lineno}: expected an object with 'prompt' and 'answer'")
    if not isinstance(row["prompt"], str) or isinstance(row["answer"], bool) or not isinstance(row["answer"], int):
        raise ValueError(f"{path}:{lineno}: 'prompt' must be a str and 'answer' an int")
    return row


def load_tasks(path: str | Path) -> list[dict]:
    """Read a task JSONL file. Blank lines are skipped; errors name the file and line."""
    path = resolve(path)
    if not path.is_file():
        raise FileNotFoundError(f"task file not found: {path}")
    rows = [_parse_line(line, path, i) for i, line in
            enumerate(path.read_text(encoding="utf-8").splitlines(), start=1) if line.strip()]
    if not rows:
        raise ValueError(f"{path}: task file is empty")
    return rows


def default_task_path(split: str = "train") -> Path:
    return repo_root() / "data" / "tasks" / f"{split}.jsonl"


INSTRUCTION = ("Evaluate the chain strictly from left to right (no operator precedence). Write one line per "
               "step like `7-3=4`, then a last line `A=<integer>` with the result and nothing after it.\n\n")
"""what a chat model is told; the embedded models learned the format and see the raw prompt"""


def render_prompt(tokenizer, prompt: str, style: str = "auto") -> str:
    """The text fed to the model: the raw task prompt, or the instruction + prompt in the chat template.

    'auto' uses the chat form when the tokenizer has a chat template (hub instruct models) and the
    raw prompt otherwise (the embedded character-level models).
    """
    if style not in ("auto", "raw", "chat"):
        raise ValueError(f"prompt_style={style!r} is invalid; allowed: 'auto' | 'raw' | 'chat'")
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if style == "raw" or (style == "auto" and not has_template):
        return prompt
    if not has_template:
        raise ValueError("prompt_style='chat' needs a tokenizer with a chat template")
    messages = [{"role": "user", "content": INSTRUCTION + prompt.rstrip("\n")}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
