"""Tasks for the crash tests: each execution appends a line to an audit ledger (fsynced) first.

The ledger is the tests' own record of what ran (tests/faults's method): after a SIGKILL and a
resume, a task whose output was durable at the kill must not appear in it again. Each line
names the process that ran the task, so a test can kill exactly one shard.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pyattacker import task

LEDGER_ENV = "RAY_TEST_LEDGER"


def _audit(pipeline_id: str, seq: int) -> None:
    fd = os.open(os.environ[LEDGER_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{pipeline_id}\t{seq}\t{os.getpid()}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


@task
async def step(value: Any, ctx: Any) -> Any:
    _audit(ctx.pipeline_id, ctx.seq)
    await asyncio.sleep(0.1)
    return value
