"""The benchmark's tasks: the overhead/latency workload of ``benchmarks/product_run.py`` as a
module a shard imports (``BENCH_LATENCY_MS``: per-task latency; 0 = ``asyncio.sleep(0)`` once)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pyattacker import task

_LATENCY_S = float(os.environ.get("BENCH_LATENCY_MS", "0")) / 1000.0


async def _work(value: Any, ctx: Any) -> Any:
    async with ctx.acquire():
        await asyncio.sleep(_LATENCY_S)
    return f"{value}|t{ctx.seq}"


t0, t1, t2 = (task(_work, name=f"t{k}", resource="apis") for k in range(3))
