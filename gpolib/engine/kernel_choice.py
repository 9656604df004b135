"""Which decoder kernels this machine's CPU runs fastest: measured once per machine, not assumed.

The C++ kernels are written for wide vector registers. On a CPU without AVX-512 their 16-float vectors are split
by the compiler, and on one such CPU (an AMD EPYC exposing AVX2 only) the whole-step kernel's matmul ran far below
torch.mm's (benchmarks/README.md, "Timings that were in docstrings"): a default fixed to "kernels on" made sampling
several times slower there. So the sampling engine's default (`SampleSpec(kernels=None)`, where no environment variable sets one:
`native.forced`) is the fastest of `native.KERNELS` in a short timing of `Decoder.step` on a random dense model of the embedded policy's
shape (128 rows at 120 cached positions, one thread, the best of 3 means of 10 calls per choice, interleaved).
A kernel choice is kept unless another is at least `MARGIN` faster, so that a CPU where the paths are close keeps
one choice (the choices agree to float32 rounding, not bit for bit). The result is written beside the built
library (`<library>.choice.json`, with the times) and read back by every later process on this machine: runs on
one machine keep one choice, and the file says why it was made.
"""
from __future__ import annotations

import functools
import json
import time
from pathlib import Path

import torch

from . import native
from .decoder import Decoder

MARGIN = 1.2
"""a choice replaces an earlier one of ("all", "attention", "none") only when at least this much faster"""
SHAPE = dict(vocab_size=99, hidden_size=128, intermediate_size=344, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=32)
"""the random model timed: the embedded dense policy's shape (data/models/tiny-qwen3)"""
ROWS, POSITIONS = 128, 120


def choose(ms: dict) -> str:
    """Milliseconds per step of each choice, in preference order -> the kept choice: walking the choices in order,
    a later one replaces the current one only when it is at least MARGIN times faster."""
    best = None
    for name, t in ms.items():
        if best is None or t * MARGIN <= ms[best]:
            best = name
    return best


def _random_weights() -> dict:
    """The decoder's weights of a random Qwen3 of SHAPE (seeded; no file read)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from .weights import read

    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = Qwen3ForCausalLM(Qwen3Config(**SHAPE, tie_word_embeddings=True)).eval()
    return read(model, POSITIONS + 1)


def time_choices(kernels: tuple, repeats: int = 3, calls: int = 10) -> dict:
    """Milliseconds of one `Decoder.step` (ROWS rows, cache column POSITIONS - 1) per kernels choice, one thread:
    the best of `repeats` means of `calls` calls, the choices interleaved within each repeat."""
    from ..runtime import cpu_threads

    weights = _random_weights()
    tok = torch.randint(2, SHAPE["vocab_size"], (ROWS,), generator=torch.Generator().manual_seed(0))
    pos = torch.full((ROWS,), POSITIONS - 1)
    decs = {k: Decoder(weights, ROWS, POSITIONS + 1, threads=1, kernels=k) for k in kernels}
    best = {k: float("inf") for k in kernels}
    with torch.inference_mode(), cpu_threads(1):
        for dec in decs.values():
            dec.k.normal_(generator=torch.Generator().manual_seed(1))
            dec.v.normal_(generator=torch.Generator().manual_seed(2))
            dec.step(tok, pos, POSITIONS - 1)  # warm-up: packs the weights once
        for _ in range(repeats):
            for k, dec in decs.items():
                t0 = time.perf_counter()
                for _ in range(calls):
                    dec.step(tok, pos, POSITIONS - 1)
                best[k] = min(best[k], 1e3 * (time.perf_counter() - t0) / calls)
    return best


def record_path(library: Path) -> Path:
    return library.with_name(library.name + ".choice.json")


def measured(library: Path, kernels: tuple) -> str:
    """The kept choice for this library (read from its record), measured and recorded when there is none."""
    path = record_path(library)
    try:
        kept = json.loads(path.read_text())
        if kept.get("choice") in kernels:
            return kept["choice"]
    except (OSError, ValueError):
        pass
    ms = time_choices(kernels)
    choice = choose(ms)
    tmp = path.with_name(path.name + f".{time.time_ns()}.tmp")
    tmp.write_text(json.dumps({"choice": choice, "ms_per_step": ms, "margin": MARGIN, "rows": ROWS,
                               "positions": POSITIONS, "threads": 1}, indent=1))
    tmp.replace(path)  # atomic: a process reading it sees the whole record or none
    return choice


@functools.lru_cache(maxsize=1)
def default() -> str:
    """The process's default kernels, decided once: the environment's (`native.kernels_setting`) where it sets them
    or where the library cannot be built (the decoder then keeps its torch path), else this machine's measured
    choice."""
    if native.forced() or native.library() is None:
        return native.kernels_setting()
    return measured(native.build(), native.KERNELS)


def resolve(kernels: str | None) -> str:
    """`kernels` checked against `native.KERNELS` (ValueError naming the allowed values); None: `default()`."""
    return default() if kernels is None else native.resolve(kernels)
