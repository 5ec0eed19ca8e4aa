"""Give freed tensor memory back to the OS on CPU (``trainer.release_memory``).

PyTorch's CPU allocator is the C library's ``malloc``. glibc serves large blocks from ``mmap`` and
returns them on ``free`` — until a freed mmapped block raises its *dynamic* threshold (up to 32 MiB),
after which the activations of a forward pass come from the heap and stay resident after they are
freed. Measured on a SmolLM2-135M update (bench/update/update.py memory): the process held ~2 GB it no
longer used (LoRA r16 with gradient checkpointing peaked at 3.45 GB; 1.4 GB with the threshold
fixed). ``mallopt(M_MMAP_THRESHOLD, 128 KiB)`` fixes the threshold (and turns the dynamic rule off),
the same as starting the process with ``MALLOC_MMAP_THRESHOLD_=131072``. Written by hand (a ctypes
call) because no library wraps ``mallopt``; a no-op off glibc.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
THRESHOLD = 128 * 1024


def release_freed_memory(threshold: int = THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes; True if applied (False: not glibc, or the
    user already chose one through ``MALLOC_MMAP_THRESHOLD_``)."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        return False
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, int(threshold)))
