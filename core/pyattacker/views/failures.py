"""A failed pipeline's traceback, as the views show it.

The runner keeps the whole traceback of the error that failed a pipeline on its row
(``pipelines.traceback``, the last 8,000 characters). A report holds no traceback in memory
while it folds rows (there may be many failures); the few it lists are read back here by id.
``last_frame`` picks the line that says where the error was raised; exports attach the
traceback to every row that shows the failure (the pipeline, its failed task, the attempt that
ended it, and its ``task.failed`` and ``pipeline.failed`` events).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from pyattacker.plugins.store_base import StoreBase
from pyattacker.views.common import read_only_store

__all__ = ["attach_tracebacks", "group_failures", "last_frame", "last_frame_text", "with_tracebacks"]

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<function>.*)$')
#: the events that show a pipeline's failure (the task's last failed attempt, the pipeline's end)
_FAILURE_EVENTS = frozenset({"task.failed", "pipeline.failed"})
#: rows looked up together when an export attaches tracebacks
_PAGE = 256


def last_frame(traceback: str | None) -> dict[str, Any] | None:
    """``{"file", "line", "function", "code"}`` of the innermost frame of the error that was
    raised last (the frame printed last), or None when the text holds no frame."""
    if not traceback:
        return None
    lines = traceback.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        match = _FRAME.match(lines[i])
        if match is None:
            continue
        code = ""
        if i + 1 < len(lines) and not _FRAME.match(lines[i + 1]) and lines[i + 1].startswith("    "):
            code = lines[i + 1].strip()
        return {
            "file": match["file"],
            "line": int(match["line"]),
            "function": match["function"].strip(),
            "code": code,
        }
    return None


def last_frame_text(traceback: str | None) -> str | None:
    """``file:line in function: code`` of ``last_frame`` (one line), or None."""
    frame = last_frame(traceback)
    if frame is None:
        return None
    text = f"{frame['file']}:{frame['line']} in {frame['function']}"
    return f"{text}: {frame['code']}" if frame["code"] else text


def with_tracebacks(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``errors`` (a report's ``errors()``) with ``traceback`` and ``last_frame`` read back from
    the store each error was shown from (one lookup per store)."""
    by_store: dict[str, list[str]] = {}
    for e in errors:
        by_store.setdefault(e["store"], []).append(e["pipeline_id"])
    found: dict[tuple[str, str], str | None] = {}
    for location, ids in by_store.items():
        with read_only_store(location) as store:
            for pid, row in store.lookup_pipelines(ids).items():
                found[(location, pid)] = row.traceback
    out = []
    for e in errors:
        tb = found.get((e["store"], e["pipeline_id"]))
        out.append({**e, "last_frame": last_frame(tb), "traceback": tb})
    return out


def group_failures(store: StoreBase, run_id: str | None) -> list[dict[str, Any]]:
    """The failed pipelines of ``run_id`` (None: every run) grouped by the class of the error
    that failed them (``error_type``, with the runner's ``error_class`` for it), largest group
    first: ``{"error_type", "error_class", "count", "tasks": {task: count}, "example": {...}}``;
    the example is the group's first failure in page order, with its last frame. Counted by
    the store (``failure_counts``): only the examples' rows are read."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for c in sorted(store.failure_counts(run_id), key=lambda c: (c.first_created_at, c.first_id)):
        name = (c.error_type or "unknown", c.error_class or "unknown")
        group = groups.get(name)
        if group is None:
            group = groups[name] = {
                "error_type": name[0],
                "error_class": name[1],
                "count": 0,
                "tasks": {},
                "example": c.first_id,
            }
        group["count"] += c.count
        task = c.failed_task or "?"
        group["tasks"][task] = group["tasks"].get(task, 0) + c.count
    examples = store.lookup_pipelines([g["example"] for g in groups.values()])
    for group in groups.values():
        p = examples.get(group["example"])
        if p is None:  # (gone between the two reads: a writer rewrote it)
            group["example"] = None
            continue
        group["example"] = {
            "pipeline_id": p.pipeline_id,
            "key": p.key,
            "run_id": p.run_id,
            "failed_task": p.failed_task,
            "error_message": p.error_message,
            "last_frame": last_frame_text(p.traceback),
        }
    return sorted(groups.values(), key=lambda g: (-g["count"], g["error_type"], g["error_class"]))


def _ends_the_pipeline(kind: str, row: dict[str, Any], p: Any) -> bool:
    """Whether export row ``row`` shows the failure that pipeline row ``p`` records."""
    if p.state != "failed" or p.run_id != row.get("run_id"):
        return False
    if kind == "tasks":
        return bool(row.get("state") == "failed" and row.get("name") == p.failed_task)
    if kind == "attempts":
        decision = row.get("decision") or {}
        return bool(
            row.get("outcome") != "succeeded"
            and row.get("task_name") == p.failed_task
            and not decision.get("retry")
        )
    if row.get("kind") == "pipeline.failed":
        return True
    data = row.get("data") or {}
    return data.get("task") == p.failed_task and not (data.get("decision") or {}).get("retry")


def _is_candidate(kind: str, row: dict[str, Any]) -> bool:
    if kind == "tasks":
        return row.get("state") == "failed"
    if kind == "attempts":
        return row.get("outcome") != "succeeded"
    return row.get("kind") in _FAILURE_EVENTS


def attach_tracebacks(
    store: StoreBase, kind: str, rows: Iterable[dict[str, Any]]
) -> Iterator[dict[str, Any]]:
    """Export rows of ``kind`` (tasks, attempts or events), each with a ``traceback`` key: the
    failed pipeline's traceback on the row that shows its failure, else None. Pipelines are
    looked up a page at a time, and only for rows that may show a failure."""
    page: list[dict[str, Any]] = []
    for row in rows:
        page.append(row)
        if len(page) >= _PAGE:
            yield from _attach_page(store, kind, page)
            page = []
    yield from _attach_page(store, kind, page)


def _attach_page(store: StoreBase, kind: str, page: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ids = sorted({r["pipeline_id"] for r in page if r.get("pipeline_id") and _is_candidate(kind, r)})
    found = store.lookup_pipelines(ids) if ids else {}
    for row in page:
        p = found.get(row.get("pipeline_id") or "") if _is_candidate(kind, row) else None
        row["traceback"] = p.traceback if p is not None and _ends_the_pipeline(kind, row, p) else None
    return page
