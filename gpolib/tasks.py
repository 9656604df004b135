"""The embedded verifiable task: integer arithmetic chains with multi-digit products.

A problem is a chain of 2..6 integers joined by `+`, `-` or `*`, evaluated strictly
left to right (no operator precedence). The prompt is the chain followed by `=?` and a
newline; the model continues it with one line per step and a final answer line:

    prompt      "47*6+13*7=?\\n"
    completion  "47*6=282\\n282+13=295\\n295*7:5*7=35,9*7+3=66,2*7+6=20;295*7=2065\\nA=2065"
                (+ EOS token)

- direct step   `a<op>b=c`       c is the running value after applying <op> b.
- long product  `a*d:<digits>;a*d=c`
                                 the same product worked digit by digit from the right,
                                 `x*d+carry=u` per digit of a (`+carry` left out when it is
                                 0), then the product itself; c is read off the partials
                                 (the last one, then the units digits of the others, newest
                                 first). Every piece is a one-digit table fact plus a small
                                 carry, so the long form is reliable where the direct form
                                 of a 3- or 4-digit product is not.
- answer line   `A=<int>`        the only line the reward reads (`gpolib.rewards.parse_answer`).

Difficulty is `hardness`: the total number of digits of the multiplicands of the chain's
products (a 4-digit running value times 7 adds 4). Errors come from difficulty alone: the
supervised data (`solution_text`) never writes a wrong result; it writes each product
directly or long at random (`p_long`), so the base policy has practised both and picks
between them per step. Longer work pays on hard steps, which is what RL can discover.

Splits live in `data/tasks/{train,val,heldout}.jsonl`, one JSON object per line:
`{"id", "prompt", "answer", "n_ops", "operands", "ops", "hardness"}`. `val` is for tuning,
`heldout` for judging claims; the three are disjoint by prompt.
"""
from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

from .folders import write_text
from .paths import repo_root, resolve
from .validation import PROMPT_STYLES, choice
from .taskfile import check_vocabulary, load_tasks  # noqa: F401  (the task file's reader lives beside)

OPS = ("+", "-", "*")
MIN_OPS, MAX_OPS = 2, 6
"""chains have MIN_OPS..MAX_OPS operators"""
N_OPS_CYCLE = (2, 3, 4, 5, 6, 4, 5, 6)
"""split rows take n_ops from this cycle"""
MUL_MAX = 9999
"""`*` is only drawn while the running value is <= MUL_MAX (multiplicands of 2..4 digits)"""
P_MUL = 0.7
"""probability of drawing `*` at a step where it is allowed"""
SPLIT_N_OPS, SPLIT_P_MUL = (6,), 0.5
"""the RL splits' distribution, harder than the SFT data's (N_OPS_CYCLE, P_MUL): chains of 6 operators with a product
at each step with probability 0.5 (benchmarks/regime_probe.py: base accuracy 0.445 on the models of the build
before; 0.508 on the held-out split after the rebuild)"""
SPLIT_SIZES = {"heldout": 512, "val": 512, "train": 8000}
"""rows per split, in the order they are drawn (so held-out prompts never depend on the train size)"""


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

    @property
    def hardness(self) -> int:
        """Total digits of the multiplicands of the `*` steps (0 for a chain without products)."""
        values = self.values()
        return sum(len(str(abs(values[i]))) for i, op in enumerate(self.ops) if op == "*")

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


def make_problem(rng: random.Random, n_ops: int, p_mul: float = P_MUL) -> Problem:
    """A chain with `n_ops` operators from a start in 10..99: `*` takes 2..9 (while the value is
    <= MUL_MAX, with probability `p_mul`), `+`/`-` take 1..20 (`-` never goes below 0)."""
    if not MIN_OPS <= n_ops <= MAX_OPS:
        raise ValueError(f"n_ops={n_ops!r} is invalid; allowed: {MIN_OPS}..{MAX_OPS}")
    return make_chain(rng, n_ops, p_mul)


def make_chain(rng: random.Random, n_ops: int, p_mul: float = P_MUL) -> Problem:
    """`make_problem`'s chain (the same draws) without its MIN_OPS..MAX_OPS bound: longer chains than the splits
    hold, for probes of long responses (notebook 02's long-response panel)."""
    if n_ops < 1:
        raise ValueError(f"n_ops={n_ops!r} is invalid; allowed: >= 1")
    if not 0.0 <= p_mul <= 1.0:
        raise ValueError(f"p_mul={p_mul!r} is invalid; allowed: a probability in [0, 1]")
    value = rng.randint(10, 99)
    operands, ops = [value], []
    for _ in range(n_ops):
        if value <= MUL_MAX and rng.random() < p_mul:
            op, b = "*", rng.randint(2, 9)
        else:
            b = rng.randint(1, 20)
            op = "-" if rng.random() < 0.5 and value >= b else "+"
        value = apply_op(value, op, b)
        operands.append(b)
        ops.append(op)
    return Problem(tuple(operands), tuple(ops))


def long_product(a: int, d: int) -> str:
    """`a*d:x*d=u,x*d+c=u,...;a*d=p` — a times one digit d, worked digit by digit from the right."""
    pieces, carry = [], 0
    for x in (int(ch) for ch in reversed(str(a))):
        u = x * d + carry
        pieces.append(f"{x}*{d}+{carry}={u}" if carry else f"{x}*{d}={u}")
        carry = u // 10
    return f"{a}*{d}:" + ",".join(pieces) + f";{a}*{d}={a * d}"


def solution_text(problem: Problem, rng: random.Random, p_long: float = 0.3) -> str:
    """SFT completion for `problem` (without EOS); every written result is correct.

    p_long: probability that a product is written long (`long_product`) instead of directly.
    """
    lines, value = [], problem.operands[0]
    for op, b in zip(problem.ops, problem.operands[1:]):
        result = apply_op(value, op, b)
        if op == "*":
            lines.append(long_product(value, b) if rng.random() < p_long else f"{value}*{b}={result}")
        else:
            lines.append(f"{value}{op}{b}={result}")
        value = result
    lines.append(f"A={value}")
    return "\n".join(lines)


_PRODUCT_LINE = re.compile(r"(-?\d+)\*(\d)(:[^;\n]*;\1\*\2)?=(-?\d+)")
_SUM_LINE = re.compile(r"-?\d+[+-]\d+=-?\d+")


def product_steps(text: str) -> list[dict]:
    """The product lines of a completion: multiplicand digits, form ('direct' | 'long'), and whether
    the written product is right for the multiplicand written (the step's own correctness)."""
    out = []
    for line in text.split("\n"):
        m = _PRODUCT_LINE.fullmatch(line)
        if m:
            a, d, c = int(m.group(1)), int(m.group(2)), int(m.group(4))
            out.append({"digits": len(str(abs(a))), "form": "long" if m.group(3) else "direct", "ok": a * d == c})
    return out


def line_kinds(text: str) -> dict[str, int]:
    """Characters (tokens) per kind of line — where the length of a completion goes:
    'long' (long products), 'direct' (direct products), 'sum' (`+`/`-` steps), 'answer', 'other'."""
    kinds = dict.fromkeys(("long", "direct", "sum", "answer", "other"), 0)
    for line in text.split("\n"):
        m = _PRODUCT_LINE.fullmatch(line)
        kind = ("long" if m and m.group(3) else "direct" if m else "sum" if _SUM_LINE.fullmatch(line)
                else "answer" if line.startswith("A=") else "other")
        kinds[kind] += len(line) + 1
    return kinds


def split_row(problem: Problem, split: str, index: int) -> dict:
    """The JSON object of a split file for `problem`, the `index`-th row of `split`."""
    return {"id": f"{split}-{index:05d}", "prompt": problem.prompt, "answer": problem.answer,
            "n_ops": problem.n_ops, "operands": list(problem.operands), "ops": list(problem.ops),
            "hardness": problem.hardness}


def make_splits(seed: int = 0, sizes: dict | None = None) -> dict[str, list[dict]]:
    """Deterministic splits, disjoint by prompt, drawn in the order heldout, val, train."""
    sizes = dict(SPLIT_SIZES, **(sizes or {}))
    rng = random.Random(seed)
    seen: set[str] = set()
    splits: dict[str, list[dict]] = {}
    for split in ("heldout", "val", "train"):
        rows = splits[split] = []
        while len(rows) < sizes[split]:
            problem = make_problem(rng, SPLIT_N_OPS[len(rows) % len(SPLIT_N_OPS)], p_mul=SPLIT_P_MUL)
            if problem.prompt not in seen:
                seen.add(problem.prompt)
                rows.append(split_row(problem, split, len(rows)))
    return splits


def write_splits(out_dir: str | Path = "data/tasks", seed: int = 0, sizes: dict | None = None) -> dict[str, Path]:
    """Write train.jsonl, val.jsonl and heldout.jsonl under `out_dir`; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, rows in make_splits(seed, sizes).items():
        paths[name] = out / f"{name}.jsonl"
        write_text(paths[name], "".join(json.dumps(r) + "\n" for r in rows))
    return paths


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
    choice("prompt_style", style, PROMPT_STYLES)
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if style == "raw" or (style == "auto" and not has_template):
        return prompt
    if not has_template:
        raise ValueError("prompt_style='chat' needs a tokenizer with a chat template")
    messages = [{"role": "user", "content": INSTRUCTION + prompt.rstrip("\n")}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
