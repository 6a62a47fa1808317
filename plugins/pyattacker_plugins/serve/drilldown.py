"""The viewer's drill-down: one pipeline in full, failures grouped by error class, task logs
(paged JSON, and a Server-Sent Events stream that resumes after ``Last-Event-ID``).

Everything here reads through ``StoreBase`` methods (never whole tables): a pipeline's rows by
its id, logs after an offset. Stored text goes out as JSON strings; the pages render it as
text nodes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from pyattacker.plugins.store_base import StoreBase, iter_rows
from pyattacker.views.common import to_plain
from pyattacker.views.export_visits import ledger_rows
from pyattacker.views.failures import group_failures, last_frame

__all__ = ["SSE_HOLD_S", "SSE_POLL_S", "failure_groups", "log_page", "log_stream", "pipeline_detail"]

#: how long one Server-Sent Events response stays open; the browser reconnects after it
#: (``retry``) with ``Last-Event-ID``, so a stream holds a handler thread only this long at a time
SSE_HOLD_S = 15.0
#: how often an open stream looks for new log rows
SSE_POLL_S = 0.25
#: log rows a detail page or a stream reads at a time
LOG_PAGE = 200
#: the attempts a detail page lists (the newest ones when a pipeline has more)
MAX_ATTEMPTS = 500
_KEY_PROBE = 5000


def _artifact(a: Any) -> dict[str, Any]:
    """An artifact's facts without its payload: what a user checks (size, digest, codec)."""
    return {
        "seq": a.seq,
        "task_name": a.task_name,
        "type_name": a.type_name,
        "codec": a.codec,
        "size": a.size,
        "digest": a.digest,
        "is_final": a.is_final,
        "blob_ref": a.blob_ref,
        "available": a.payload is not None or a.blob_ref is not None,
        "created_at": a.created_at,
    }


def log_row(row: Any) -> dict[str, Any]:
    """A log row as JSON: its lines as ``{"ts", "stream", "text"}`` objects."""
    out = to_plain(row)
    out["lines"] = [{"ts": ts, "stream": stream, "text": text} for ts, stream, text in row.lines]
    return out


def pipeline_detail(store: StoreBase, p: Any) -> dict[str, Any]:
    """Pipeline row ``p`` with every attempt (retry decision, duration, error, leases), its tasks,
    ledger, metrics and curve keys, artifacts (sizes and digests) and the first page of logs."""
    pid = p.pipeline_id
    row = to_plain(p)
    row["last_frame"] = last_frame(p.traceback)
    row["n_tasks_done"] = p.cursor
    row["tasks"] = [to_plain(t) for t in iter_rows(store, "tasks", pipeline_id=pid)]
    row["handoffs"] = ledger_rows(store.rows_by_pipeline("handoffs", [pid]).get(pid, []), p.n_tasks_total)
    attempts = list(iter_rows(store, "attempts", pipeline_id=pid))
    row["attempts_shown"] = min(len(attempts), MAX_ATTEMPTS)
    row["attempts"] = [to_plain(a) for a in attempts[-MAX_ATTEMPTS:]]
    row["metrics"] = [to_plain(m) for m in store.metrics(pipeline_id=pid)]
    probe = store.metric_points(p.run_id, pid, None, -1, _KEY_PROBE)
    row["curve_keys"] = sorted({pt.key for pt in probe if pt.step == 0})
    row["artifacts"] = [_artifact(a) for a in iter_rows(store, "artifacts", pipeline_id=pid)]
    logs = store.logs(pipeline_id=pid, limit=LOG_PAGE + 1)
    row["logs"] = [log_row(r) for r in logs[:LOG_PAGE]]
    row["logs_next"] = logs[LOG_PAGE - 1].log_id if len(logs) > LOG_PAGE else None
    row["keeps_logs"] = store.keeps_logs
    return row


def failure_groups(store: StoreBase, run_id: str | None) -> dict[str, Any]:
    """The run's failed pipelines grouped by error class, largest group first."""
    groups = group_failures(store, run_id)
    return {"run_id": run_id, "total": sum(g["count"] for g in groups), "groups": groups}


def log_page(
    store: StoreBase,
    pipeline_id: str | None,
    run_id: str | None,
    task: str | None,
    after: int | None,
    limit: int,
) -> dict[str, Any]:
    """A page of log rows after ``after`` and the cursor of the next page (None: no more)."""
    rows = store.logs(run_id=run_id, pipeline_id=pipeline_id, task=task, after=after, limit=limit + 1)
    page = rows[:limit]
    nxt = str(page[-1].log_id) if len(rows) > limit and page else None
    return {"rows": [log_row(r) for r in page], "limit": limit, "next": nxt}


def _event(row: Any) -> bytes:
    data = json.dumps(log_row(row), ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    return f"id: {row.log_id}\nevent: log\ndata: {data}\n\n".encode()


def log_stream(
    store: StoreBase,
    filters: dict[str, str | None],
    after: int | None,
    *,
    hold_s: float = SSE_HOLD_S,
    poll_s: float = SSE_POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[bytes]:
    """The chunks of one Server-Sent Events response: the rows after ``after`` (each event's id
    is its ``log_id``, what ``Last-Event-ID`` resumes after), then new rows as they are committed,
    for ``hold_s`` seconds. A comment every few polls finds a client that went away."""
    yield b"retry: 1000\n\n"
    end = clock() + hold_s
    polls = 0
    while True:
        rows = store.logs(after=after, limit=LOG_PAGE, **filters)  # each read sees new commits
        for row in rows:
            yield _event(row)
            after = row.log_id
        if len(rows) >= LOG_PAGE:
            continue
        if clock() >= end:
            return
        polls += 1
        if polls % 8 == 0:
            yield b": waiting\n\n"
        sleep(poll_s)
