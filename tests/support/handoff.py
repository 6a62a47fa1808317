"""The handoff tests' shared pipeline (fetch, ask, judge, report, publish), its call log, and
``Where``: one store of each kind for several runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from pyattacker import FatalError, Handoff, pipeline, task
from pyattacker.store.location import open_store
from pyattacker_plugins.store_memory import MemoryStore
from tests.support.runner import rows, vrunner

CALLS: list[tuple[str, int]] = []
#: which behaviour the tasks below take this time (tests set it)
MODE: dict[str, Any] = {}


def reset_calls(**mode: Any) -> None:
    CALLS.clear()
    MODE.clear()
    MODE.update(mode)


@task
def fetch(x: dict[str, int]) -> dict[str, int]:
    CALLS.append(("fetch", x["i"]))
    return {"i": x["i"]}


@task
def ask(d: dict[str, int]) -> Any:
    """i % 3 == 0: to report with a value; 1: end with its own input; 2: answer normally."""
    CALLS.append(("ask", d["i"]))
    route = MODE.get("route", d["i"] % 3)
    if route == 0:
        return Handoff.to(MODE.get("target", "report"), {"cached": d["i"]}, reason="cache hit")
    if route == 1:
        return Handoff.end(reason="trivial")
    if route == "end_value":
        return Handoff.end({"short": d["i"]})
    if route == "reuse":
        return Handoff.to("report")
    return {"asked": d["i"]}


@task
def judge(d: dict[str, Any]) -> dict[str, Any]:
    CALLS.append(("judge", 0))
    return {"judged": d}


@task
def report(d: dict[str, Any]) -> dict[str, Any]:
    CALLS.append(("report", 0))
    if MODE.pop("report_fails", False):
        raise FatalError("report is down")
    return {"report": d}


@task
def publish(d: dict[str, Any]) -> dict[str, Any]:
    CALLS.append(("publish", 0))
    if MODE.pop("publish_fails", False):
        raise FatalError("publish is down")
    return {"published": d}


EDGES = {"edges": {"ask": ["report", "end"]}}
QA = pipeline("qa", fetch, ask, judge, report, control=EDGES)


def final_values(store: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for a in rows(store, "artifacts"):
        if a.is_final:
            out.setdefault(a.pipeline_id, []).append(msgspec.json.decode(a.payload))
    return out


def ledger_of(store: Any, pid: str) -> list[Any]:
    return list(store.handoffs(pid))


class Where:
    """One store for several runs (a runner closes the store it ran on) and reads between them."""

    def __init__(self, kind: str, tmp: Path) -> None:
        self.memory = MemoryStore() if kind == "memory" else None
        self.path = f"jsonl:{tmp / 'h'}" if kind == "jsonl" else str(tmp / "h.db")

    def runner(self, **kwargs: Any) -> Any:
        if self.memory is not None:
            self.memory.closed = False
        return vrunner(self.memory if self.memory is not None else self.path, **kwargs)

    def read(self) -> Any:
        return self.memory if self.memory is not None else open_store(self.path, read_only=True)
