"""The C++ kernels' panel layout, shared by the decode-step kernel and the experts kernel: packed matrices have their
columns zero-padded to a multiple of the panel width."""
from __future__ import annotations

NR = 32
"""the kernels' panel width (`kernels/gemm.h`): packed matrices have their columns zero-padded to a multiple of this"""


def padded(n: int) -> int:
    """n rounded up to a multiple of NR."""
    return -(-n // NR) * NR
