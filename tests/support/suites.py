"""A small experiment suite on disk for CLI tests: member configs, a task module that audits
every execution to a ledger and counts the tasks running at once across members."""

from __future__ import annotations

from pathlib import Path

#: the task module (written to the test's folder, which is on the subprocess's PYTHONPATH).
#: Every execution appends ``pipeline_id<TAB>seq<TAB>attempt`` to $SUITE_LEDGER (fsynced) before
#: anything else, as tests/faults does; the peak of tasks running at once (every member counted
#: together) goes to $SUITE_LEDGER.peak.
TASKS = """
import asyncio
import os

from pyattacker import task

_running = {"now": 0, "peak": 0}


def _audit(ctx):
    fd = os.open(os.environ["SUITE_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{ctx.pipeline_id}\\t{ctx.seq}\\t{ctx.attempt}\\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


async def _work(value, ctx):
    _audit(ctx)
    _running["now"] += 1
    if _running["now"] > _running["peak"]:
        _running["peak"] = _running["now"]
        with open(os.environ["SUITE_LEDGER"] + ".peak", "w") as fh:
            fh.write(str(_running["peak"]))
    try:
        await asyncio.sleep(float(os.environ.get("SUITE_PAUSE", "0.005")))
    finally:
        _running["now"] -= 1
    if isinstance(value, dict) and value.get("fail"):
        raise ValueError("this seed fails")
    ctx.report_metric("tokens", 10)
    ctx.report_metric("score", float(value.get("score", 1.0)) if isinstance(value, dict) else 1.0)
    return value


@task(name="step")
async def step(value, ctx):
    return await _work(value, ctx)


@task(name="leased")
async def leased(value, ctx):
    async with ctx.acquire():
        return await _work(value, ctx)


@task(name="files")
async def files(value, ctx):
    (ctx.artifact_dir() / "out.txt").write_text(ctx.pipeline_id)  # a task's own file
    return await _work(value, ctx)


@task(name="named")
async def named(value, ctx):
    async with ctx.acquire("model"):  # the member's own pool name, whatever the suite calls it
        return await _work(value, ctx)
"""


def member(source: str, *, tasks: int = 2, pool: str | None = None, extra: str = "") -> str:
    """A member config: ``tasks`` steps (leased from ``pool`` when given) over ``source``."""
    if pool is None:
        entries = ", ".join(f"{{use: 'suite_tasks:step', name: s{i}}}" for i in range(tasks))
        pools = ""
    else:
        entries = ", ".join(
            f"{{use: 'suite_tasks:leased', name: s{i}, resource: {pool}}}" for i in range(tasks)
        )
        pools = f"pools:\n  {pool}: {{resources: [{{id: r1, capacity: 8}}]}}\n"
    return f"{pools}pipeline: {{name: p, tasks: [{entries}]}}\nsource: {source}\n{extra}"


def write_suite(folder: Path, body: str, members: dict[str, str]) -> Path:
    """The task module, the member configs (``name.yaml``) and ``suite.yaml`` in ``folder``."""
    (folder / "suite_tasks.py").write_text(TASKS)
    for name, text in members.items():
        (folder / f"{name}.yaml").write_text(text)
    path = folder / "suite.yaml"
    path.write_text(body)
    return path


def read_ledger(path: Path) -> list[tuple[str, int]]:
    """``(pipeline_id, seq)`` of every complete ledger line."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines(keepends=True):
        if line.endswith("\n"):
            pid, seq, _attempt = line.rstrip("\n").split("\t")
            out.append((pid, int(seq)))
    return out
