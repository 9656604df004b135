"""The fused decode-attention kernel: `kernels/decode_attention.cpp`, built once per machine, called through ctypes.

A decode step's attention on the CPU is, per layer, one small product per (row, KV head): 2 query rows against
the cached positions (`benchmarks/decode_attention.py`). As batched matmuls (`bmm`, softmax, `bmm`) each product
costs a fixed overhead that exceeds its arithmetic; the kernel does scores, padding bias, softmax and the sum of
values in one pass per product, reading the cache once, straight from its strided views.

`attend` is what `decode.Decoder.step` calls for a float32 cache on the CPU when `available()`; otherwise (no C++
compiler, another dtype or device, GPOLIB_DECODE_KERNEL=0) the decoder keeps its torch path. The library is
compiled with the machine's C++ compiler (`CXX`, default g++) at first use, for this CPU (-march=native), into
`$GPOLIB_CACHE_DIR/kernels` (default ~/.cache/gpolib/kernels), under a name that hashes the source, the flags, the
compiler's version and the CPU's flags, so a shared home on another CPU builds its own. Tested against the torch
path and the transformers forward (tests/test_attention_kernel.py, tests/test_sampler.py).
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import subprocess
import tempfile
import warnings
from pathlib import Path

import torch

from . import paths

SOURCE = Path(__file__).parent / "kernels" / "decode_attention.cpp"
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fPIC", "-shared", "-pthread")
ENV = "GPOLIB_DECODE_KERNEL"
"""set to 0 to keep the decoder on its torch path (e.g. to compare the two)"""


def enabled() -> bool:
    """False when GPOLIB_DECODE_KERNEL is 0 / false / no / off."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


@contextlib.contextmanager
def disabled(yes: bool = True):
    """Within: decoders built with yes=True use their torch attention path (GPOLIB_DECODE_KERNEL=0)."""
    if not yes:
        yield
        return
    old = os.environ.get(ENV)
    os.environ[ENV] = "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ[ENV]
        else:
            os.environ[ENV] = old


def _cpu_flags() -> str:
    """The CPU's feature flags (Linux: /proc/cpuinfo), '' where unknown: -march=native code runs on this CPU only."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def library_path(compiler: str) -> Path:
    """Where the built library for this source, compiler and CPU lives."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    h = hashlib.sha256()
    for part in (SOURCE.read_bytes(), " ".join(FLAGS).encode(), version.encode(), _cpu_flags().encode()):
        h.update(part)
    return paths.cache_root() / "kernels" / f"decode_attention-{h.hexdigest()[:16]}.so"


def build(compiler: str | None = None) -> Path:
    """Compile the kernel unless this machine's build exists; returns the library's path. Raises on failure
    (the compiler's message included). Written to a temporary name and renamed, so concurrent builds agree."""
    compiler = compiler or os.environ.get("CXX", "g++")
    path = library_path(compiler)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        done = subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", tmp], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{compiler} could not build {SOURCE.name}:\n{done.stderr[-2000:]}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


@functools.lru_cache(maxsize=1)
def _library():
    """The loaded kernel, or None (warned once) when it cannot be built here."""
    try:
        lib = ctypes.CDLL(str(build()))  # CDLL releases the GIL during the call: row shards overlap
    except (OSError, RuntimeError, subprocess.SubprocessError) as err:
        warnings.warn(f"decode-attention kernel unavailable, the decoder uses its torch path: {err}", stacklevel=3)
        return None
    fn = lib.gpolib_decode_attention_f32
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                   ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                   ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
    return fn


def available() -> bool:
    """The kernel is enabled (`ENV`) and built for this machine."""
    return enabled() and _library() is not None


def usable(cache: torch.Tensor) -> bool:
    """The kernel can serve a decoder with this KV cache: float32 on the CPU, and available."""
    return cache.dtype == torch.float32 and cache.device.type == "cpu" and available()


def attend(q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor, bias: torch.Tensor | None,
           threads: int = 1) -> torch.Tensor:
    """softmax(q K + bias) V for each of bn products; float32 CPU tensors.

    q (bn, r, d), scale folded in; keys (bn, d, end) and vals (bn, end, d), views whose last dim has stride 1
    (the decoder's cache); bias (bn, 1, P) with P <= end, added to the first P columns (left padding), or None.
    Returns out (bn, r, d).
    """
    bn, r, d = q.shape
    end = keys.shape[-1]
    if keys.shape != (bn, d, end) or vals.shape != (bn, end, d):
        raise ValueError(f"shapes q {tuple(q.shape)}, keys {tuple(keys.shape)}, vals {tuple(vals.shape)} do not "
                         "match: expected keys (bn, d, end), vals (bn, end, d)")
    if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in (q, keys, vals)):
        raise ValueError("attend takes float32 CPU tensors")
    if keys.stride(-1) != 1 or vals.stride(-1) != 1:
        raise ValueError("keys and vals need a unit stride in their last dim")
    q = q.contiguous()
    P = 0
    if bias is not None:
        bias = bias.reshape(bn, -1).contiguous()
        P = bias.shape[1]
    out = torch.empty(bn, r, d)
    fn = _library()
    if fn is None:
        raise RuntimeError("the decode-attention kernel is unavailable on this machine")
    code = fn(q.data_ptr(), keys.data_ptr(), keys.stride(0), keys.stride(1), vals.data_ptr(), vals.stride(0),
              vals.stride(1), None if bias is None else bias.data_ptr(), P, out.data_ptr(), bn, r, d, end, threads)
    if code:
        raise ValueError(f"decode-attention kernel refused sizes bn={bn} r={r} d={d} end={end} P={P}")
    return out
