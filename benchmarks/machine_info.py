"""What the benchmarks record about the machine they ran on (imported by the scripts beside it)."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from typing import Any

import torch


def environment() -> dict:
    """torch version and threads, Python version, CPU architecture."""
    return {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def cpu_info() -> dict:
    """CPUs visible, torch threads, platform, versions and the CPU model (from /proc/cpuinfo where it exists)."""
    info = {
        "cpus_visible": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu_model"] = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return info


def load_average() -> list[float] | None:
    """The 1/5/15-minute load averages, or None where the platform has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """(fn(), seconds it took)."""
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start
