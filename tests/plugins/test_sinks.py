"""Event sinks: ``console`` prints notable events to stderr, ``jsonl`` appends every event."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from pyattacker import ConfigError, Pool, Resource, Runner, pipeline, task
from pyattacker.model import EventRecord
from pyattacker.plugins.manager import get_plugins
from pyattacker.store.base import iter_rows
from pyattacker.store.location import open_store
from pyattacker_plugins.sink_console import ConsoleSink
from pyattacker_plugins.sink_jsonl import JsonlSink
from tests.support.views import XSS, fetch, judge


def _run(store: str, sinks: list[Any]) -> None:
    pools = [Pool("api", [Resource("llm", id="r1", capacity=2)])]
    with Runner(store=store, pools=pools, concurrency=2, event_sinks=sinks) as runner:
        runner.run(
            pipeline("p", fetch, judge).map(({"i": i} for i in range(10)), key_of=lambda s: f"k{s['i']}")
        )


def test_registered_by_name() -> None:
    names = get_plugins().event_sinks.names()
    assert "console" in names and "jsonl" in names


def test_jsonl_sink_gets_every_event(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    log = tmp_path / "logs" / "events.jsonl"
    _run(store, [{"name": "jsonl", "path": str(log)}])
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    s = open_store(store, read_only=True)
    try:
        stored = [e.kind for e in iter_rows(s, "events")]
    finally:
        s.close()
    assert [e["kind"] for e in lines] == stored
    assert any(e["kind"] == "pipeline.failed" and XSS in str(e["data"]) for e in lines)


def test_console_sink_prints_only_notable_events(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run(str(tmp_path / "c.db"), ["console"])
    err = capsys.readouterr().err
    kinds = {line.split()[1] for line in err.splitlines() if line.strip()}
    assert "task.failed" in kinds and "pipeline.failed" in kinds and "task.retry_scheduled" in kinds
    assert "resource.leased" not in kinds and "task.succeeded" not in kinds


def test_console_format_is_one_line() -> None:
    buf = io.StringIO()
    sink = ConsoleSink(stream=buf)
    sink.handle(
        [
            EventRecord(
                ts=0.0,
                kind="resource.degraded",
                scope="resource",
                pool="api",
                resource_id="r1",
                data={"consecutive_failures": 3, "error": "boom\nsecond line"},
            ),
            EventRecord(ts=0.0, kind="resource.leased", scope="resource", pool="api", resource_id="r1"),
        ]
    )
    sink.close()
    lines = buf.getvalue().splitlines()
    assert len(lines) == 1
    assert "api/r1" in lines[0] and "consecutive_failures=3" in lines[0] and "boom second line" in lines[0]


def test_console_prints_the_wait_hints_with_their_pool_and_sentence() -> None:
    """A pool-wide event has no resource: the line names the pool (not `api/None`), the
    waiting pipeline when the data names it, and the hint."""
    buf = io.StringIO()
    sink = ConsoleSink(stream=buf)
    hint = "none of the 1 resource(s) of pool 'api' matches region='mars': this lease waits"
    sink.handle(
        [
            EventRecord(
                ts=0.0,
                kind="acquire.waiting_unmatched",
                scope="resource",
                pool="api",
                data={"pipeline_id": "k1", "task": "ask", "hint": hint},
            ),
            EventRecord(ts=0.0, kind="acquire.suspected_deadlock", scope="resource", pool="api", data={}),
        ]
    )
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2 and "None" not in buf.getvalue()
    assert "acquire.waiting_unmatched k1 task=ask" in lines[0] and hint in lines[0]
    assert lines[1].endswith("acquire.suspected_deadlock api")


def test_jsonl_sink_needs_a_path() -> None:
    with pytest.raises(TypeError, match="path"):
        JsonlSink()  # type: ignore[call-arg]
    with pytest.raises(ConfigError):
        JsonlSink("")


def test_sink_options_are_checked_when_built_from_python() -> None:
    """The SDK gets the same checks as ``validate``: a ConfigError naming the option, not a
    TypeError from deep inside the sink (or a console sink watching single letters)."""
    with pytest.raises(ConfigError, match=r"event sink 'jsonl': path: must be a non-empty path"):
        JsonlSink(5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"fsync: must be true or false, got 'no'"):
        JsonlSink("e.jsonl", fsync="no")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"event sink 'console': kinds: must be a list of event kinds"):
        ConsoleSink(kinds="task.failed")
    assert ConsoleSink(kinds=("task.failed",)).kinds == frozenset({"task.failed"})


@task
def _same(x: Any) -> Any:
    return x


class _Exiting:
    """A sink whose plugin code calls ``sys.exit()`` on every batch that has ``kind``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.batches = 0

    def handle(self, events: list[EventRecord]) -> None:
        self.batches += 1
        if any(e.kind == self.kind for e in events):
            raise SystemExit(3)

    def close(self) -> None:
        raise SystemExit(4)


@pytest.mark.parametrize(("kind", "write_behind"), [("pipeline.succeeded", False), ("run.finished", True)])
def test_a_sink_that_calls_sys_exit_never_breaks_the_run(
    tmp_path: Path, kind: str, write_behind: bool
) -> None:
    """``SystemExit`` is not an ``Exception``: from a sink it aborted a run committing each event
    (pipelines left interrupted), or escaped from the final commit (no report). It is a sink
    failure like any other now: counted, the run and its rows complete, the next sink served."""
    store = str(tmp_path / "s.db")
    bad, log = _Exiting(kind), tmp_path / "events.jsonl"
    with Runner(
        store=store,
        concurrency=2,
        sinks=[bad],
        event_sinks=[{"name": "jsonl", "path": str(log)}],
        write_behind=write_behind,
    ) as runner:
        rep = runner.run(pipeline("p", _same).map({"i": i} for i in range(10)))
    assert rep.succeeded == 10 and rep.counters["sink_errors"] >= 2  # its batches and its close()
    s = open_store(store, read_only=True)
    try:
        stored = [e.kind for e in iter_rows(s, "events")]
        assert [p.state for p in iter_rows(s, "pipelines")] == ["succeeded"] * 10
        assert [r.status for r in s.runs()] == ["completed"]
    finally:
        s.close()
    assert [json.loads(line)["kind"] for line in log.read_text().splitlines()] == stored


@pytest.mark.parametrize("where", ["a directory", "under a file"])
def test_a_jsonl_sink_path_that_cannot_be_written_stops_the_run_before_it_starts(
    tmp_path: Path, where: str
) -> None:
    """The run used to go on with one warning and no event file at all; it is refused when the
    run starts, naming the entry, and no pipeline runs."""
    (tmp_path / "taken").mkdir()
    (tmp_path / "file").write_text("x")
    path = tmp_path / ("taken" if where == "a directory" else "file/events.jsonl")
    store = str(tmp_path / "s.db")
    calls = {"n": 0}

    @task
    def counted(x: Any) -> Any:
        calls["n"] += 1
        return x

    with (
        Runner(store=store, event_sinks=["console", {"name": "jsonl", "path": str(path)}]) as runner,
        pytest.raises(
            ConfigError,
            match=r"run\.event_sinks\[1\]: event sink 'jsonl': path: .*(is a directory|is not a directory)",
        ),
    ):
        runner.run(pipeline("p", counted).map([{"i": 0}]))
    assert calls["n"] == 0
