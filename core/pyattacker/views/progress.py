"""A live progress bar for ``run --progress``, drawn on stderr from the runner's counters.

It runs as a periodic asyncio task on the runner's own loop and reads ``runner.stats()``
(a cheap in-memory snapshot), so it never touches the store and never races the workers.
stdout stays reserved for the summary: ``run --progress --summary-format json | jq`` works.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn

__all__ = ["RunProgress", "progress_fields"]


def progress_fields(stats: dict[str, Any]) -> dict[str, Any]:
    """done / failed / in flight / parked / rate from one ``runner.stats()`` snapshot."""
    c = stats.get("counters", {})
    done = c.get("pipelines_succeeded", 0) + c.get("pipelines_failed", 0) + c.get("skipped", 0)
    elapsed = float(stats.get("elapsed_s") or 0.0)
    return {
        "done": done,
        "failed": c.get("pipelines_failed", 0),
        "retries": c.get("retries", 0),
        "in_flight": max(
            0, int(stats.get("in_flight_pipelines", 0)) - int(stats.get("delayed_pipelines", 0))
        ),
        "parked": int(stats.get("delayed_pipelines", 0)),
        "rate": done / elapsed if elapsed > 0 else 0.0,
    }


class RunProgress:
    """``async with RunProgress(runner, total):`` shows a bar until the block ends."""

    def __init__(
        self, runner: Any, total: int | None, *, interval: float = 0.2, console: Console | None = None
    ) -> None:
        self.runner = runner
        self.total = total
        self.interval = interval
        columns: list[Any] = [
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.fields[total_text]}"),
            TextColumn(
                "failed {task.fields[failed]}  in flight {task.fields[in_flight]}"
                "  parked {task.fields[parked]}  retries {task.fields[retries]}"
            ),
            TextColumn("{task.fields[rate]:.1f}/s"),
            TimeElapsedColumn(),
        ]
        if total is not None:
            columns.append(TimeRemainingColumn())
        self.progress = Progress(*columns, console=console or Console(stderr=True), transient=False)
        self._task: TaskID | None = None
        self._loop_task: asyncio.Task[None] | None = None

    def update(self) -> None:
        if self._task is None:
            return
        try:
            fields = progress_fields(self.runner.stats())
        except Exception:  # a snapshot taken mid-change is simply skipped
            return
        self.progress.update(
            self._task,
            completed=fields["done"],
            total_text=str(self.total) if self.total is not None else "?",
            **{k: v for k, v in fields.items() if k != "done"},
        )

    async def _tick(self) -> None:
        while True:
            self.update()
            await asyncio.sleep(self.interval)

    async def __aenter__(self) -> RunProgress:
        self._task = self.progress.add_task(
            "run", total=self.total, total_text="?", failed=0, in_flight=0, parked=0, retries=0, rate=0.0
        )
        self.progress.start()
        self._loop_task = asyncio.get_running_loop().create_task(self._tick(), name="pyattacker-progress")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        self.update()
        self.progress.stop()  # ends the line cleanly before the summary is printed
