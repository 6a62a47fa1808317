"""Task logs: ``ctx.log``, Python ``logging`` inside a task body, per attempt, bounded, stored with
the attempt's commit (one row per attempt that logged, none for attempts that log nothing)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from pyattacker import RetryableError, Runner, pipeline, task
from pyattacker.model import LogRecord
from pyattacker_plugins.store_sqlite import SqliteStore
from tests.support.runner import RecordingStore, seeds, vrunner


def _texts(rows: list[LogRecord]) -> list[tuple[str, str]]:
    return [(stream, text) for r in rows for _ts, stream, text in r.lines]


def test_ctx_log_and_logging_are_kept_per_attempt_with_the_retry() -> None:
    @task(retry={"max_attempts": 3, "base": 0.0})
    async def work(value: Any, ctx: Any) -> Any:
        ctx.log("value %s attempt %d", value["i"], ctx.attempt)
        logging.getLogger("user.code").warning("careful: %s", value["i"])
        await asyncio.sleep(0)
        if ctx.attempt == 1:
            raise RetryableError("flaky")
        return value

    store = RecordingStore()
    report = vrunner(store).run(pipeline("p", work).map(seeds(2)))
    assert report.succeeded == 2
    rows = store.logs()
    assert sorted((r.attempt, r.task_name) for r in rows) == [
        (1, "work"),
        (1, "work"),
        (2, "work"),
        (2, "work"),
    ]
    first = next(r for r in rows if r.attempt == 1 and r.pipeline_id == rows[0].pipeline_id)
    texts = _texts([first])
    assert texts[0][0] == "log" and texts[0][1].endswith("attempt 1")
    assert ("WARNING", "user.code: careful: " + texts[0][1].split()[1]) in texts
    # stored with the commits, never a commit of its own per line
    assert all(len(b.logs) <= len(b.attempts) + len(b.tasks) for b in store.batches if b.logs)


def test_tasks_that_log_nothing_store_no_log_rows() -> None:
    @task
    def quiet(value: Any) -> Any:
        return value

    store = RecordingStore()
    assert vrunner(store).run(pipeline("p", quiet).map(seeds(5))).succeeded == 5
    assert store.logs() == [] and all(not b.logs for b in store.batches)


def test_an_attempt_keeps_its_first_bytes_and_marks_what_it_dropped() -> None:
    @task
    def chatty(value: Any, ctx: Any) -> Any:
        for i in range(100):
            ctx.log(f"line {i:03d} " + "x" * 90)
        return value

    store = RecordingStore()
    vrunner(store, log_bytes_per_attempt=1000).run(pipeline("p", chatty).map(seeds(1)))
    (row,) = store.logs()
    kept = [text for _ts, stream, text in row.lines if stream == "log"]
    assert kept == [f"line {i:03d} " + "x" * 90 for i in range(len(kept))] and 0 < len(kept) < 100
    assert sum(len(t) for t in kept) <= 1000
    assert row.dropped_lines == 100 - len(kept) and row.dropped_bytes == row.dropped_lines * 99
    marker = row.lines[-1]
    assert marker[1] == "pyattacker" and f"{row.dropped_lines} more lines" in marker[2]


def test_a_ctx_kept_past_its_attempt_logs_nothing() -> None:
    kept: list[Any] = []

    @task
    def first(value: Any, ctx: Any) -> Any:
        kept.append(ctx)
        return value

    @task
    def second(value: Any, ctx: Any) -> Any:
        assert kept[0].log("late") is False
        ctx.log("mine")
        return value

    store = RecordingStore()
    vrunner(store).run(pipeline("p", first, second).map(seeds(1)))
    assert [(r.task_name, _texts([r])) for r in store.logs()] == [("second", [("log", "mine")])]


def test_logging_outside_task_bodies_is_not_captured_and_the_handler_goes() -> None:
    @task
    def body(value: Any) -> Any:
        return value

    def finished(*_: Any) -> None:
        logging.getLogger("outside").warning("a pipeline finished")  # the runner's code, not a body

    store = RecordingStore()
    vrunner(store, on_pipeline_finished=finished).run(pipeline("p", body).map(seeds(2)))
    assert store.logs() == []
    assert not [h for h in logging.getLogger().handlers if type(h).__name__ == "LogCapture"]


def test_logs_reach_a_sqlite_store(tmp_path: Path) -> None:
    @task
    def body(value: Any, ctx: Any) -> Any:
        ctx.log("to <sqlite>\nsecond line", stream="stdout")
        return value

    path = str(tmp_path / "s.db")
    with Runner(store=SqliteStore.open_writer(path), handle_signals=False) as runner:
        runner.run(pipeline("p", body).map(seeds(3)))
    reader = SqliteStore.open_reader(path)
    try:
        rows = reader.logs()
        assert len(rows) == 3 and {r.seq for r in rows} == {0}
        assert _texts(rows[:1]) == [("stdout", "to <sqlite>"), ("stdout", "second line")]
    finally:
        reader.close()


def test_shell_run_streams_its_output_to_the_attempts_log() -> None:
    from pyattacker.plugins.manager import get_plugins

    shell = get_plugins().tasks.get("shell_run")
    assert shell is not None
    spec = shell(command="echo out1; echo err1 >&2; printf 'no newline'; exit 3", check=True)
    store = RecordingStore()
    report = vrunner(store).run(pipeline("p", spec).map(seeds(1)))
    assert report.failed == 1
    (row,) = store.logs()
    texts = _texts([row])
    assert ("stdout", "out1") in texts and ("stderr", "err1") in texts and ("stdout", "no newline") in texts
    assert row.task_name == "shell_run" and row.attempt == 1


def test_two_runners_in_one_process_keep_their_own_logging_lines() -> None:
    import threading

    def make(tag: str) -> Any:
        @task(name=f"t_{tag}")
        async def body(value: Any) -> Any:
            for _ in range(3):
                logging.getLogger("both").warning("%s %s", tag, value["i"])
                await asyncio.sleep(0)
            return value

        return body

    stores = {tag: RecordingStore() for tag in ("a", "b")}

    def go(tag: str) -> None:
        Runner(store=stores[tag], handle_signals=False).run(pipeline(f"p{tag}", make(tag)).map(seeds(20)))

    threads = [threading.Thread(target=go, args=(tag,)) for tag in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for tag, store in stores.items():
        texts = [text for _s, text in _texts(store.logs())]
        assert len(texts) == 60 and all(text.startswith(f"both: {tag} ") for text in texts), (tag, texts[:5])
