"""Freed memory handed back to the operating system, and the process's resident size to measure it.

glibc keeps freed heap pages for reuse; `malloc_trim(0)` returns them (the KV pools of a small model sit
below its mmap threshold). On a GPU, the caching allocator's free blocks go back with `empty_cache`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

import torch


def give_back(device: torch.device) -> None:
    """After freeing storages (resized to 0: no garbage collection needed): the GPU allocator's cache
    emptied, glibc's free pages returned."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
    _malloc_trim()


def rss_bytes() -> int:
    """The process's resident set size, from /proc (Linux); 0 where it cannot be read."""
    try:
        with open(f"/proc/{os.getpid()}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _malloc_trim() -> None:
    name = ctypes.util.find_library("c")
    if name is None:
        return
    libc = ctypes.CDLL(name)
    if hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
