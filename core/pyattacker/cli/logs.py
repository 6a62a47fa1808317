"""``logs``: the lines tasks wrote (``ctx.log``, ``logging`` in task bodies, ``shell_run``
output), once or followed while a run writes them.

The store is opened read-only (safe beside a live run). Stored text is echoed literally
(``click.echo``), never interpreted as markup.
"""

from __future__ import annotations

import sys

import rich_click as click

from pyattacker.model import LogRecord
from pyattacker.views.common import encode_json, open_view
from pyattacker.views.logs import LogFilter, follow_logs, line_dicts, line_texts

__all__ = ["logs_command"]


@click.command("logs")
@click.argument("store")
@click.argument("pipeline", required=False)
@click.option("--task", "task", default=None, metavar="NAME", help="Only the logs of this task.")
@click.option("--run-id", default=None, help="Only the logs written by this run (default: every run).")
@click.option(
    "--follow", "-f", is_flag=True, help="Keep printing new lines as the run writes them (Ctrl+C stops)."
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05),
    default=0.5,
    show_default=True,
    help="Seconds between polls of the store with --follow.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line (JSON Lines).")
def logs_command(
    store: str,
    pipeline: str | None,
    task: str | None,
    run_id: str | None,
    follow: bool,
    interval: float,
    as_json: bool,
) -> None:
    """Task logs of STORE (of one PIPELINE id when given), oldest first.

    Each attempt's lines are stored with its commit, so a line appears once its attempt has
    ended. An attempt keeps its first `run.log_bytes_per_attempt` bytes; a last line says how
    many were dropped. Exit 0; a missing store, run or pipeline is exit 2.
    """
    which = LogFilter(run_id=run_id, pipeline_id=pipeline, task=task)
    out = sys.stdout

    def emit(row: LogRecord) -> None:
        if as_json:
            for line in line_dicts(row):
                out.write(encode_json(line).decode() + "\n")
        else:
            for text in line_texts(row):
                click.echo(text)
        out.flush()

    try:
        follow_logs(lambda: open_view(store), which, emit, interval=interval, rounds=None if follow else 1)
    except KeyboardInterrupt:
        return
