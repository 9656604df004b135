"""gpolib's C++ kernels (`gpolib/kernels`): built once per machine with its C++ compiler, loaded through ctypes.

The kernels are the fused decode attention (`attention_kernel`) and the fused dense decode step (`step_kernel`);
`decode.Decoder` calls them for float32 decoding on the CPU. Every source in `kernels/` is compiled into one shared
library with the machine's C++ compiler (`CXX`, default g++) at first use, for this CPU (-march=native), into
`$GPOLIB_CACHE_DIR/kernels` (default ~/.cache/gpolib/kernels), under a name that hashes the sources, the flags, the
compiler's version and the CPU's flags, so a shared home on another CPU builds its own. Without a compiler the
library is None (one warning) and the decoder keeps its torch path; GPOLIB_DECODE_KERNEL=0 turns the kernels off
(`disabled()` within a block), e.g. to compare the two.
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

from .. import paths

KERNELS = Path(__file__).parent / "kernels"
FLAGS = ("-O3", "-fno-math-errno", "-fPIC", "-shared", "-pthread", "-Wno-psabi")
"""the compiler flags besides -march (`build`'s march: native, this CPU, unless a test asks for another)"""
ENV = "GPOLIB_DECODE_KERNEL"
"""set to 0 to keep the decoder on its torch path (e.g. to compare the two)"""


def sources() -> list:
    """The C++ sources compiled into the library (kernels/*.cpp; their headers are kernels/*.h), sorted."""
    return sorted(KERNELS.glob("*.cpp"))


def enabled(env: str = ENV) -> bool:
    """False when the switch `env` (default GPOLIB_DECODE_KERNEL, all kernels) is 0 / false / no / off."""
    return os.environ.get(env, "1").strip().lower() not in ("0", "false", "no", "off")


@contextlib.contextmanager
def disabled(yes: bool = True, env: str = ENV):
    """Within (when yes): the switch `env` is 0, so decoders built there do without those kernels (default: all,
    the torch path)."""
    if not yes:
        yield
        return
    old = os.environ.get(env)
    os.environ[env] = "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ[env]
        else:
            os.environ[env] = old


def _cpu_flags() -> str:
    """The CPU's feature flags (Linux: /proc/cpuinfo), '' where unknown: -march=native code runs on this CPU only."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def library_path(compiler: str, march: str = "native") -> Path:
    """Where the built library for these sources, compiler, -march and CPU lives."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    h = hashlib.sha256()
    for f in sorted(KERNELS.glob("*.h")) + sources():
        h.update(f.name.encode() + f.read_bytes())
    for part in (" ".join(FLAGS).encode(), march.encode(), version.encode(), _cpu_flags().encode()):
        h.update(part)
    return paths.cache_root() / "kernels" / f"gpolib-kernels-{h.hexdigest()[:16]}.so"


def build(compiler: str | None = None, march: str = "native") -> Path:
    """Compile the library unless this machine's build exists; returns its path. Raises on failure (the
    compiler's message included). Written to a temporary name and renamed, so concurrent builds agree.
    march: the target CPU (native: this one; tests build for an older one, e.g. haswell, to check its code path)."""
    compiler = compiler or os.environ.get("CXX", "g++")
    path = library_path(compiler, march)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        argv = [compiler, *FLAGS, f"-march={march}", *map(str, sources()), "-o", tmp]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{compiler} could not build {KERNELS.name}/*.cpp:\n{done.stderr[-2000:]}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


@functools.lru_cache(maxsize=1)
def library():
    """The loaded library, or None (warned once) when it cannot be built here. ctypes.CDLL releases the GIL
    during each call, so the sampler's row shards run their kernels at the same time."""
    try:
        return ctypes.CDLL(str(build()))
    except (OSError, RuntimeError, subprocess.SubprocessError) as err:
        warnings.warn(f"gpolib's C++ kernels are unavailable, the decoder uses its torch path: {err}", stacklevel=3)
        return None


def function(name: str, argtypes: list, lib=None):
    """The C function `name` of `lib` (default: this machine's library) with these argument types (returning int),
    or None without a library."""
    lib = library() if lib is None else lib
    if lib is None:
        return None
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = ctypes.c_int, argtypes
    return fn
