"""An audited task for crash tests: each execution is written to a ledger *before* it does anything.

A crash test cannot ask the store what ran: the store is what is under test. This ledger is the
evidence from outside (the fault harness's method): an fsynced line per execution, naming the
pipeline, the task's position and the process, so that after a SIGKILL and a resume a test can
check that no task whose output was durable at the kill ran again, and can kill exactly one shard.

Use it in a config as ``use: pyattacker.testing.audit:step`` with ``PYATTACKER_AUDIT_LEDGER`` set
to the ledger's path in the environment of every process that runs tasks.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, NamedTuple

from pyattacker.flow.taskspec import task

LEDGER_ENV = "PYATTACKER_AUDIT_LEDGER"
"""The environment variable naming the ledger file."""

STEP_SLEEP_ENV = "PYATTACKER_AUDIT_SLEEP_S"
"""How long ``step`` sleeps after writing its line (default 0.1 s), so a kill finds tasks in flight."""


class Execution(NamedTuple):
    """One ledger line: a task body that started."""

    pipeline_id: str
    seq: int
    pid: int


def record(pipeline_id: str, seq: int) -> None:
    """Append one execution to the ledger and fsync it, so it survives the kill that follows."""
    fd = os.open(os.environ[LEDGER_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{pipeline_id}\t{seq}\t{os.getpid()}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_ledger(path: Path) -> list[Execution]:
    """Every execution recorded in ``path`` (none if the file does not exist yet), in order."""
    if not path.exists():
        return []
    executions = []
    for line in path.read_text().splitlines():
        pipeline_id, seq, pid = line.split("\t")
        executions.append(Execution(pipeline_id, int(seq), int(pid)))
    return executions


@task
async def step(value: Any, ctx: Any) -> Any:
    """Record this execution, wait a little, and pass the value on unchanged."""
    record(ctx.pipeline_id, ctx.seq)
    await asyncio.sleep(float(os.environ.get(STEP_SLEEP_ENV, "0.1")))
    return value
