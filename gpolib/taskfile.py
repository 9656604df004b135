"""Reading a task file (JSONL of {"prompt", "answer"} rows), checked on load.

A file that cannot be trained on fails here, naming the file and line (`gpolib.errors.DataError`):
not UTF-8, malformed JSON, a missing or mistyped field, an empty prompt, an answer the strict parser
(`gpolib.rewards`) can never read, a directory given as a file; `check_vocabulary` adds the prompts'
characters against the policy's tokenizer once it is loaded.
"""
from __future__ import annotations

import json
from pathlib import Path

from .errors import DataError
from .paths import resolve

MAX_ANSWER_DIGITS = 12
"""the strict parser's longest answer (`gpolib.rewards.MAX_ANSWER_DIGITS`, kept equal by a test; not imported
so that reading tasks does not load torch)"""


def _parse_line(line: str, path: Path, lineno: int) -> dict:
    """One task row, checked: an object with a non-empty str 'prompt' and an int 'answer' the parser can read."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise DataError(f"{path}:{lineno}: malformed JSON ({err.msg})") from None
    if not isinstance(row, dict) or "prompt" not in row or "answer" not in row:
        raise DataError(f"{path}:{lineno}: expected an object with 'prompt' and 'answer'")
    if not isinstance(row["prompt"], str) or isinstance(row["answer"], bool) or not isinstance(row["answer"], int):
        raise DataError(f"{path}:{lineno}: 'prompt' must be a str and 'answer' an int")
    if not row["prompt"].strip():
        raise DataError(f"{path}:{lineno}: the prompt is empty")
    if len(str(abs(row["answer"]))) > MAX_ANSWER_DIGITS:
        raise DataError(f"{path}:{lineno}: answer {row['answer']} has more than {MAX_ANSWER_DIGITS} digits, so the "
                        "strict parser (gpolib.rewards) can never read it and every response would score 0")
    return row


def _text(path: Path) -> str:
    """The file as UTF-8 text; a byte that is not UTF-8 names the file and its line."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataError(f"{path}:{line}: not UTF-8 (byte 0x{data[err.start]:02x}); task files are UTF-8 JSONL") from None


def load_tasks(path: str | Path) -> list[dict]:
    """Read a task JSONL file. Blank lines are skipped; errors name the file and line (`DataError`)."""
    path = resolve(path)
    if path.is_dir():
        raise DataError(f"task file {path} is a directory; allowed: a JSONL file of {{\"prompt\", \"answer\"}} rows")
    if not path.is_file():
        raise FileNotFoundError(f"task file not found: {path}")
    rows = [_parse_line(line, path, i) for i, line in enumerate(_text(path).splitlines(), start=1) if line.strip()]
    if not rows:
        raise DataError(f"{path}: task file is empty")
    return rows


def check_vocabulary(path: str | Path, tokenizer) -> None:
    """Every prompt of a task file encodes without the tokenizer's unknown token (file and line named):
    a character the model has no token for (e.g. Arabic-Indic digits for the embedded tokenizer) would
    silently become <unk> and the run would learn nothing."""
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is None:
        return
    path = resolve(path)
    for lineno, line in enumerate(_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        prompt = json.loads(line)["prompt"]
        ids = tokenizer(prompt, add_special_tokens=False).input_ids
        if unk in ids:
            bad = sorted({c for c in prompt if unk in tokenizer(c, add_special_tokens=False).input_ids})
            raise DataError(f"{path}:{lineno}: the prompt has characters the tokenizer does not know "
                            f"({', '.join(repr(c) for c in bad)}); they would become {tokenizer.unk_token!r}")
