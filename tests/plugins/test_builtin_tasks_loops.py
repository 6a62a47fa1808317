"""Every built-in task runs through a real run on both event loops, many times over.

``run.event_loop: auto`` picks uvloop whenever it is installed, so each built-in task must behave
the same on uvloop as on asyncio's loop. ``shell_run`` once failed at random under uvloop for a
command that does not read its stdin (``true``, ``echo hi``): the repeats below are enough that
such a flaky failure shows up on every run of the suite.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pyattacker import Pool, Resource, Runner, pipeline
from pyattacker.plugins.manager import get_plugins

pytest.importorskip("uvloop", reason="the test extra installs uvloop (not on Windows)")

LOOPS = ("asyncio", "uvloop")
REPEATS = 24

#: built-in task name -> the kwargs of each case (``None``: the task is not a factory)
CASES: dict[str, list[dict[str, Any] | None]] = {
    "echo": [None],
    "simulate_llm": [{"latency_ms": 1}],
    "shell_run": [
        {"command": "true"},
        {"command": ["echo", "hi"]},
        {"command": "sleep 0.05"},
        {"command": "cat"},
        {"command": ["head", "-c", "1"]},
    ],
    "delay": [{"seconds": 0.01}],
    "fanout": [{"tasks": ["echo", {"use": "delay", "name": "wait", "kwargs": {"seconds": 0.01}}]}],
    "leaky": [{"pool": "p"}],
    "write_jsonl": [{"path": "{tmp}/out.jsonl"}],
    # the reference's failing tasks: they must fail the same way on both loops
    "boom": [{"error": "fatal"}],
    "flaky": [{"fail_times": 1}],
}
#: tasks whose pipelines all fail (the others all succeed)
FAILING = {"boom"}
#: tasks that keep their own retry policy (flaky's allows exactly ``fail_times + 1`` attempts)
OWN_RETRY = {"flaky"}


def _builtin_tasks() -> dict[str, Any]:
    tasks = get_plugins().tasks
    return {name: tasks.get(name) for name in tasks.names() if tasks.provider(name).builtin}  # type: ignore[union-attr]


def _spec(name: str, kwargs: dict[str, Any] | None, tmp_path: Path) -> Any:
    obj = _builtin_tasks()[name]
    if kwargs is not None:
        kwargs = {k: v.format(tmp=tmp_path) if isinstance(v, str) else v for k, v in kwargs.items()}
    spec = obj if kwargs is None else obj(**kwargs)
    assert hasattr(spec, "with_overrides"), spec
    if name in OWN_RETRY:
        return spec
    return spec.with_overrides(retry={"max_attempts": 1})  # a failure must fail, not be retried away


def test_every_builtin_task_has_a_case() -> None:
    assert sorted(_builtin_tasks()) == sorted(CASES), "add the new built-in task to CASES"


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize(
    ("name", "kwargs"),
    [(name, kwargs) for name, cases in CASES.items() for kwargs in cases],
    ids=lambda v: v if isinstance(v, str) else repr(v)[:40] if v is not None else "task",
)
def test_builtin_task_behaves_the_same_on_every_loop(
    tmp_path: Path, loop: str, name: str, kwargs: dict[str, Any] | None
) -> None:
    """Every pipeline succeeds (or, for a task that fails on purpose, fails with its own error),
    on asyncio's loop and on uvloop alike."""
    spec = _spec(name, kwargs, tmp_path)
    store = tmp_path / "loops.db"
    pools = [Pool("p", [Resource("r", capacity=4)])] if name == "leaky" else []
    with Runner(
        store=str(store), pools=pools, concurrency=4, event_loop=loop, handle_signals=False
    ) as runner:
        report = runner.run(pipeline("loops", spec).map({"i": i} for i in range(REPEATS)))
        rows = runner.store.page("pipelines", limit=REPEATS + 1)
    assert report.status == "completed" and len(rows) == REPEATS
    if name in FAILING:
        assert report.failed == REPEATS
        assert {(row.state, row.error_class) for row in rows} == {("failed", "fatal")}  # the retry class
    else:
        assert [(row.pipeline_id, row.error_message) for row in rows if row.state != "succeeded"] == []
        assert report.succeeded == REPEATS
    if name == "write_jsonl":
        assert len((tmp_path / "out.jsonl").read_text().splitlines()) == REPEATS
