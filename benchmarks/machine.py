"""How fast and how steady the machine is while the suite runs: a pure-Python loop and a disk
sync, measured at the start and at the end of every suite.

Ratios measured in the same run carry over between machines; absolute rates do not, and the
noise of a shared machine decides how far a single ratio can be trusted. Two machines of the
same kind have differed by 2.3-3.5x per task here, and one of them gave a CPU-bound loop from
0.55x to 1.0x of its median speed from one 50 ms window to the next. These two readings say
which kind of machine and minute a results file comes from.
"""

from __future__ import annotations

import os
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["CoreTimes", "calibrate", "core_shares", "core_times", "cpu_windows", "describe", "sync_latencies"]

_sync_data = getattr(os, "fdatasync", os.fsync)


def cpu_windows(seconds: float = 1.5, window: float = 0.05) -> list[float]:
    """Iterations per second of a fixed pure-Python loop, one value per ``window`` seconds."""
    rates: list[float] = []
    clock = time.perf_counter
    end = clock() + seconds
    while clock() < end:
        start = clock()
        n = 0
        while clock() - start < window:
            for _ in range(1000):
                n += 1
        rates.append(n / (clock() - start))
    return rates


def sync_latencies(folder: Path, n: int = 40, chunk: int = 32 * 1024) -> list[float]:
    """Seconds per ``fdatasync`` of a file in ``folder`` after each overwrite of ``chunk`` bytes
    (what a FULL commit's sync of the log costs, without SQLite)."""
    fd, name = tempfile.mkstemp(prefix="sync-probe-", dir=folder)
    try:
        data = b"\x5a" * chunk
        out: list[float] = []
        for i in range(n):
            os.pwrite(fd, data, (i % 16) * chunk)
            t0 = time.perf_counter()
            _sync_data(fd)
            out.append(time.perf_counter() - t0)
        return out
    finally:
        os.close(fd)
        os.unlink(name)


def calibrate(folder: Path) -> dict[str, Any]:
    """The two readings, summarized: loop speed (median, and the slowest window and the tenth
    percentile as fractions of it) and sync latency (median and 90th percentile)."""
    rates = sorted(cpu_windows())
    median = statistics.median(rates)
    syncs = sorted(sync_latencies(folder))
    return {
        "loop_mips": round(median / 1e6, 2),
        "loop_slowest": round(rates[0] / median, 3),
        "loop_p10": round(rates[len(rates) // 10] / median, 3),
        "sync_ms": round(statistics.median(syncs) * 1e3, 3),
        "sync_p90_ms": round(syncs[int(len(syncs) * 0.9)] * 1e3, 3),
    }


def describe(reading: dict[str, Any] | None) -> str:
    """One line for the docs and the terminal ('' without a reading)."""
    if not reading:
        return ""
    return (
        f"a Python loop at {reading['loop_mips']:.1f} M iterations/s (slowest 50 ms window"
        f" {reading['loop_slowest']:.2f} of the median, tenth percentile {reading['loop_p10']:.2f}),"
        f" fdatasync {reading['sync_ms']:.2f} ms (p90 {reading['sync_p90_ms']:.2f} ms)"
    )


# ------------------------------------------------------------------------------- the cores' time
class CoreTimes(NamedTuple):
    """Seconds of every core together since boot (``/proc/stat``), and the CPU of this process's
    waited-for descendants (``RUSAGE_CHILDREN``: a shard waited for by its command counts)."""

    busy: float  # user, nice, system, irq, softirq
    idle: float  # idle and waiting for the disk
    steal: float  # taken by the hypervisor for other machines
    children: float


_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def core_times() -> CoreTimes | None:
    """Now, or ``None`` where the kernel does not say (not Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) * _TICK_S for x in fields[1:9])
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    children = usage.ru_utime + usage.ru_stime
    return CoreTimes(user + nice + system + irq + softirq, idle + iowait, steal, children)


def core_shares(before: CoreTimes | None, after: CoreTimes | None) -> dict[str, float]:
    """Where the cores' time went between two readings around one run, as shares of it: the
    run's own processes (``run_share``), everything else that ran (``other_share``: the kernel's
    threads, other processes, this harness), the hypervisor (``steal_share``) and nothing
    (``idle_share``: a core the run left unused); and the run's CPU seconds (``run_cpu_s``). A
    run of two processes that keep two cores busy has a ``run_share`` near 1; one process on two
    cores, near 0.5."""
    if before is None or after is None:
        return {}
    run = after.children - before.children
    busy = after.busy - before.busy
    idle = after.idle - before.idle
    steal = after.steal - before.steal
    total = busy + idle + steal
    if total <= 0:
        return {}
    run = min(run, busy)  # ticks and rusage round differently
    return {
        "run_cpu_s": run,
        "run_share": run / total,
        "other_share": (busy - run) / total,
        "steal_share": steal / total,
        "idle_share": idle / total,
    }
