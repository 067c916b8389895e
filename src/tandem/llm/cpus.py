"""The CPUs an engine runs on: how many it may take right now (those this process may use, less what others
keep busy), and what kind they are for the precision it computes in (:func:`cpu_kind`)."""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path

from tandem.llm.hf import available_cpus


def idle_cpus(window_s: float = 0.3, stat: str = "/proc/stat") -> int:
    """Threads for the engine when none are asked for: the CPUs this process may use, less what other
    processes keep busy right now (:func:`busy_cpus` over ``window_s``; the 1-minute load average where
    ``/proc/stat`` cannot be read), at least 1. On a saturated 2-core machine one thread decoded as fast
    as two or faster (docs/openvino.md): threads that wait for a descheduled sibling at every layer lose
    more than the second core gives. The load average is not used first because it trails by a
    minute: right after a run it still counts the run's own cores as busy."""
    cpus = available_cpus()
    busy = busy_cpus(window_s, stat)
    if busy is None:
        try:
            busy = os.getloadavg()[0]
        except OSError:
            return cpus
    return max(1, min(cpus, round(cpus - busy)))


def busy_cpus(window_s: float = 0.3, stat: str = "/proc/stat") -> float | None:
    """CPUs kept busy over the next ``window_s`` seconds, machine-wide (from two readings of the
    aggregate ``cpu`` line of ``/proc/stat``: non-idle jiffies over all jiffies, times the CPU count);
    None where the file cannot be read."""
    def read() -> tuple[int, int] | None:
        try:
            fields = Path(stat).read_text().split("\n", 1)[0].split()
            ticks = [int(x) for x in fields[1:]]
        except (OSError, ValueError, IndexError):
            return None
        if fields[0] != "cpu" or len(ticks) < 5:
            return None
        return sum(ticks[:8]), ticks[3] + ticks[4]  # total (user..steal), idle + iowait

    first = read()
    time.sleep(window_s)
    second = read()
    if first is None or second is None or second[0] <= first[0]:
        return None
    total, idle = second[0] - first[0], second[1] - first[1]
    return (os.cpu_count() or 1) * (total - idle) / total


#: Linux's /proc/cpuinfo flag of the AMX tiles that multiply bf16 (Intel Xeon since Sapphire Rapids); the kernel
#: clears it where it does not enable the tiles' state, so a VM whose CPUID advertises AMX without letting
#: processes use it does not count as one
AMX_FLAG = "amx_bf16"


@functools.cache
def cpu_kind() -> str:
    """The kind of CPU the answers rule is run on apart: ``amx`` where OpenVINO computes bf16 natively and the
    CPU has AMX tiles for it, ``avx512_bf16`` where it computes bf16 natively without them (its AVX-512 BF16
    kernels, whose sums depend on what else is in the batch), else ``other`` (bf16 emulated, slower than f32)."""
    if "BF16" not in cpu_capabilities():
        return "other"
    return "amx" if AMX_FLAG in _cpu_flags() else "avx512_bf16"


def _cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux lists them; empty elsewhere (no AMX is then assumed)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


@functools.cache
def cpu_capabilities() -> tuple[str, ...]:
    """What OpenVINO's CPU plugin says this CPU computes natively (``BF16``, ``INT8``, ...)."""
    import openvino

    return tuple(openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
