"""A run in this process, for ``run``/``resume`` (one shard or none) and ``demo``: open the
store, run every spec (with an optional progress bar), print the summary and exit with the
report's ``ExitCode``.

The summary goes to stdout: a rich table, or one JSON object with ``--summary-format json``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterable
from typing import Any

from pyattacker.cli.common import out, print_rich, warn
from pyattacker.engine.report import RunReport, handoff_operations
from pyattacker.errors import ExitCode, PyAttackerError, StoreUnavailable

__all__ = ["HealthLog", "execute", "finish", "summary_table"]


class HealthLog:
    """Counts each resource's degraded / dead / recovered transitions during the run."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], dict[str, int]] = {}

    def __call__(self, event: Any) -> None:
        if event.kind in ("resource.degraded", "resource.dead", "resource.recovered") and event.resource_id:
            row = self.counts.setdefault((event.pool, event.resource_id), {})
            name = event.kind.split(".", 1)[1]
            row[name] = row.get(name, 0) + 1


def execute(
    config: Any,
    pools: list[Any],
    specs: Iterable[Any],
    *,
    total: int | None,
    progress: bool,
    template: Any = None,
    store: Any = None,
) -> tuple[RunReport, HealthLog]:
    """Open the store (``store``: one opened already; else ``config.store``), run every spec
    (with an optional progress bar), return the report."""
    from pyattacker.engine.runner import Runner  # start-up: `--help` imports this module

    health = HealthLog()
    for pool in pools:
        pool.listeners.append(health)
    try:
        runner = Runner(store, config=config, pools=pools)
    except PyAttackerError:
        raise
    except Exception as exc:
        raise StoreUnavailable(f"cannot open store {config.store}: {type(exc).__name__}: {exc}") from exc
    with runner:
        if template is not None:  # before the run row: nothing is written for a refused run
            runner.check_control(template)

        async def main() -> RunReport:
            if not progress:
                return await runner.run_async(specs, expected=total)
            from pyattacker.views.progress import RunProgress  # start-up: only with --progress

            async with RunProgress(runner, total):
                return await runner.run_async(specs, expected=total)

        with asyncio.Runner(loop_factory=runner.loop_factory()) as loop_runner:
            report = loop_runner.run(main())
    return report, health


def summary_table(
    report: RunReport, health: HealthLog, pools: list[Any], *, store_below: bool = False
) -> Any:
    """The text summary: counts, duration, each resource's state and health, the store
    (``store_below``: the path is printed under the table, whole, instead of in a cell)."""
    from rich.table import Table  # start-up: only a text summary loads rich

    c = report.counters
    table = Table(title=f"run {report.run_id}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")  # paths are copied from here: never cut them
    status = report.status + (f" ({report.stop_reason})" if report.stop_reason else "")
    table.add_row("status", status)
    table.add_row(
        "pipelines",
        f"succeeded {c.get('pipelines_succeeded', 0)}  failed {c.get('pipelines_failed', 0)}"
        f"  interrupted {c.get('pipelines_interrupted', 0)}  skipped {c.get('skipped', 0)}",
    )
    handoffs = f"  handoffs {c['handoffs']}" if c.get("handoffs") else ""
    ops = handoff_operations(c)
    if handoffs and set(ops) - {"forward"}:  # the split once a backward move is among them
        handoffs += " (" + " ".join(f"{op} {n}" for op, n in sorted(ops.items())) + ")"
    table.add_row("attempts", f"total {c.get('attempts', 0)}  retries {c.get('retries', 0)}{handoffs}")
    seconds = report.duration_ms / 1000
    done = c.get("pipelines_succeeded", 0) + c.get("pipelines_failed", 0)
    rate = f"  ({done / seconds:.1f} pipelines/s)" if seconds > 0 and done else ""
    table.add_row("duration", f"{seconds:.2f}s{rate}")
    for pool in pools:
        for row in pool.snapshot():
            events = health.counts.get((pool.name, row["id"]), {})
            notes = "  ".join(f"{k} x{v}" for k, v in sorted(events.items()))
            table.add_row(
                f"{pool.name}/{row['id']}",
                f"{row['state']}  leases {row['leases']}  failed {row['failed']}"
                + (f"  ({notes})" if notes else ""),
            )
    if c.get("leases_leaked"):
        table.add_row("leases leaked", str(c["leases_leaked"]))
    if c.get("repair_failures"):
        table.add_row("repair failures", str(c["repair_failures"]))
    if report.producer_error:
        table.add_row("source error", report.producer_error)
    table.add_row("store", "(on the line below)" if store_below else str(report.store))
    table.add_row("exit code", str(report.exit_code))
    return table


def _store_fits(table: Any, store: str, width: int) -> bool:
    """Whether the store path fits its cell whole: a path folded over two lines is broken
    when copied, so one that does not fit is printed on its own line instead."""
    labels = max((len(str(cell)) for cell in table.columns[0].cells), default=0)
    return labels + len(store) + 7 <= width  # "│ " + label + " │ " + value + " │"


def finish(
    report: RunReport,
    health: HealthLog,
    pools: list[Any],
    store: str,
    summary_format: str,
    shard: tuple[int, int] | None = None,
) -> None:
    """Print the summary and exit with the report's code.

    The JSON summary is ``RunReport.to_dict()`` plus ``store``, ``shard`` (``"I/N"`` of
    ``--shard``, else null) and ``repair_failures`` (the count of ``counters.repair_failures``
    at the top level, where the CLI reference names it)."""
    if summary_format == "json":
        data = report.to_dict()
        data["store"] = store
        data["shard"] = f"{shard[0]}/{shard[1]}" if shard is not None else None
        data["repair_failures"] = report.repair_failures
        out(json.dumps(data, default=str, sort_keys=True))
    else:
        from rich.console import Console  # start-up: only a text summary loads rich

        store_text = str(report.store)
        table = summary_table(report, health, pools)
        below = not _store_fits(table, store_text, Console(file=sys.stdout).width)
        if below:
            table = summary_table(report, health, pools, store_below=True)
        print_rich(table)
        if below:
            out(f"store: {store_text}")
        if report.exit_code == ExitCode.INTERRUPTED:
            warn(
                "interrupted: every unfinished pipeline is resumable"
                " (run `pyattacker resume` with the same flags)"
            )
        if report.producer_error:
            warn(f"the source failed: {report.producer_error}")
    sys.exit(report.exit_code)
