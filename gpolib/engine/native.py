"""gpolib's C++ kernels (`gpolib/engine/kernels`): built once per machine with its C++ compiler, loaded through ctypes.

The kernels are the fused decode attention (`attention_kernel`) and the fused dense decode step (`step_kernel`);
`decoder.Decoder` calls them for float32 decoding on the CPU. Every source in `kernels/` is compiled into one shared
library with the machine's C++ compiler (`CXX`, default g++) at first use, for this CPU (-march=native), into
`$GPOLIB_CACHE_DIR/kernels` (default ~/.cache/gpolib/kernels), under a name that hashes the sources, the flags, the
compiler's version and the CPU's flags, so a shared home on another CPU builds its own. Without a compiler the
library is None (one warning) and the decoder keeps its torch path.

Which kernels a decoder uses is an argument (`Decoder(kernels=...)`, `SampleSpec.kernels`: one of KERNELS); its
default is the process's setting, read once from the environment by `kernels_setting` and never written:
GPOLIB_DECODE_KERNEL=0 turns both kernels off ('none'), GPOLIB_STEP_KERNEL=0 the whole-step kernel alone
('attention'), e.g. to compare the paths. The sampling engine's default (`SampleSpec(kernels=None)`) is the
machine's measured choice where neither variable is set (`kernel_choice.default`).
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
import tempfile
import warnings
from pathlib import Path

from .. import paths

KERNELS_DIR = Path(__file__).parent / "kernels"
FLAGS = ("-O3", "-fno-math-errno", "-fPIC", "-shared", "-pthread", "-Wno-psabi")
"""the compiler flags besides -march (`build`'s march: native, this CPU, unless a test asks for another)"""
KERNELS = ("all", "attention", "none")
"""'all': the whole-step kernel for dense models, the attention kernel for MoE; 'attention': the attention kernel
only (a dense step runs per layer in torch); 'none': torch throughout. A kernel serves float32 on the CPU only."""
DECODE_ENV = "GPOLIB_DECODE_KERNEL"
"""set to 0 to keep the decoder on its torch path (the default kernels 'none')"""
STEP_ENV = "GPOLIB_STEP_KERNEL"
"""set to 0 to turn the whole-step kernel off alone (the default kernels 'attention')"""


def sources() -> list:
    """The C++ sources compiled into the library (kernels/*.cpp; their headers are kernels/*.h), sorted."""
    return sorted(KERNELS_DIR.glob("*.cpp"))


def _off(env: str) -> bool:
    return os.environ.get(env, "1").strip().lower() in ("0", "false", "no", "off")


@functools.lru_cache(maxsize=1)
def kernels_setting() -> str:
    """The process's default kernels (one of KERNELS), read once: 'none' when GPOLIB_DECODE_KERNEL is 0 / false /
    no / off, else 'attention' when GPOLIB_STEP_KERNEL is, else 'all'."""
    return "none" if _off(DECODE_ENV) else "attention" if _off(STEP_ENV) else "all"


def forced() -> bool:
    """Whether GPOLIB_DECODE_KERNEL or GPOLIB_STEP_KERNEL is set: the kernels then follow `kernels_setting`, not the
    machine's measured choice (`kernel_choice.default`)."""
    return DECODE_ENV in os.environ or STEP_ENV in os.environ


def resolve(kernels: str | None) -> str:
    """`kernels` checked against KERNELS (ValueError naming the allowed values); None: `kernels_setting()`."""
    if kernels is None:
        return kernels_setting()
    if kernels not in KERNELS:
        raise ValueError(f"kernels={kernels!r} is invalid; allowed: {' | '.join(KERNELS)}")
    return kernels


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
    for f in sorted(KERNELS_DIR.glob("*.h")) + sources():
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
            raise RuntimeError(f"{compiler} could not build {KERNELS_DIR.name}/*.cpp:\n{done.stderr[-2000:]}")
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
