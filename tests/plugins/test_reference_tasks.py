"""The reference's built-in tasks: boom, flaky, delay, fanout, leaky, write_jsonl (one plugin
each), run through a real Runner on an in-memory store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import pyattacker
from pyattacker import ConfigError, Pool, Runner, pipeline, task
from pyattacker.plugins.manager import get_plugins


def _factory(name: str) -> Any:
    obj = get_plugins().tasks.get(name)
    assert obj is not None, f"built-in task {name!r} is not registered"
    return obj


def _run(
    *specs: Any, seeds: Any = ({"i": 0},), pools: Any = (), **config: Any
) -> tuple[Any, list[Any], list[Any]]:
    """The report, each pipeline's row and each pipeline's final value (None if it failed)."""
    with Runner(store=":memory:", pools=list(pools), handle_signals=False, **config) as runner:
        report = runner.run(pipeline("p", *specs).map(seeds))
        rows = runner.store.page("pipelines", limit=1000)
        values = []
        for row in rows:
            art = runner.store.get_artifact(row.pipeline_id, row.n_tasks_total - 1)
            done = row.state == "succeeded" and art is not None and art.payload is not None
            values.append(runner.codecs.decode(art.codec, art.type_name, art.payload) if done else None)
    return report, rows, values


def test_each_reference_task_is_its_own_builtin_plugin() -> None:
    rows = {row.name: row for row in get_plugins().listing()}
    for name in ("boom", "flaky", "delay", "fanout", "leaky", "write_jsonl"):
        row = rows[f"task-{name.replace('_', '-')}"]
        assert row.builtin and row.status == "active" and row.provides == {"tasks": [name]}


@pytest.mark.parametrize(
    ("error", "error_type", "attempts"),
    [("retryable", "RetryableError", 3), ("fatal", "FatalError", 1), ("invalid", "ValueError", 1)],
)
def test_boom_always_fails_the_way_it_is_told(error: str, error_type: str, attempts: int) -> None:
    spec = _factory("boom")(message="kaput", error=error).with_overrides(retry={"max_attempts": 3, "base": 0})
    report, rows, _ = _run(spec)
    assert report.failed == 1
    assert rows[0].error_type == error_type and "kaput" in rows[0].error_message
    assert rows[0].attempts_total == attempts  # retryable is retried; fatal and invalid are not


def test_flaky_fails_its_first_attempts_then_succeeds_within_its_own_policy() -> None:
    report, rows, values = _run(_factory("flaky")(fail_times=2), seeds=[{"i": 0}, {"i": 1}])
    assert report.succeeded == 2 and [r.attempts_total for r in rows] == [3, 3]
    assert sorted(v["value"]["i"] for v in values) == [0, 1]
    assert all(v["attempts"] == 3 and v["resource"] is None for v in values)
    report, rows, _ = _run(_factory("flaky")(fail_times=1, error="fatal"))
    assert report.failed == 1 and rows[0].error_type == "FatalError" and rows[0].attempts_total == 1


def test_delay_returns_its_input() -> None:
    report, _, values = _run(_factory("delay")(seconds=0.001), seeds=[{"q": "x"}])
    assert report.succeeded == 1 and values == [{"q": "x"}]


def test_leaky_leaks_a_lease_that_the_runner_reclaims() -> None:
    pool = Pool("apis", [{"id": "a", "capacity": 1}])
    report, _, values = _run(_factory("leaky")(pool="apis"), seeds=[{"i": i} for i in range(3)], pools=[pool])
    assert report.succeeded == 3 and values == [{"leaked": "a"}] * 3
    assert report.counters["leases_leaked"] == 3 and pool.stats().active == 0
    strict, _, _ = _run(
        _factory("leaky")(pool="apis"), pools=[Pool("apis", [{"id": "a"}])], strict_leases=True
    )
    assert strict.failed == 1


def test_write_jsonl_appends_one_line_per_pipeline(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "out.jsonl"
    seeds = [{"i": i, "text": "é"} for i in range(50)]
    report, _, values = _run(_factory("write_jsonl")(path=str(path)), seeds=seeds, concurrency=16)
    assert report.succeeded == 50
    lines = path.read_text(encoding="utf-8").splitlines()
    assert sorted(json.loads(line)["i"] for line in lines) == list(range(50))  # whole lines, each once
    assert {v["written"] for v in values} == {str(path)} and all(v["bytes"] > 0 for v in values)
    _run(_factory("write_jsonl")(path=str(path), mode="w"), seeds=[{"last": True}])
    assert path.read_text(encoding="utf-8") == '{"last": true}\n'


def test_fanout_task_runs_its_children_and_the_python_fanout_still_works() -> None:
    group = _factory("fanout")(tasks=["echo", {"use": "delay", "name": "slow", "kwargs": {"seconds": 0}}])
    report, _, values = _run(group, seeds=[{"i": 7}])
    assert report.succeeded == 1 and values == [{"echo": {"i": 7}, "slow": {"i": 7}}]
    collected = _factory("fanout")(tasks=["echo", {"use": "boom", "args": ["no"]}], on_error="collect")
    _, _, values = _run(collected)
    assert values[0]["echo"] == {"i": 0} and values[0]["boom"]["error"].startswith("RetryableError")

    @task(name="double")
    def double(value: int) -> int:
        return value * 2

    @task(name="square")
    def square(value: int) -> int:
        return value * value

    # ``pyattacker.fanout`` (the Python function) is untouched by the task of the same name
    _, _, values = _run(pyattacker.fanout(double, square), seeds=[3])
    assert values == [{"double": 6, "square": 9}]


@pytest.mark.parametrize(
    ("name", "kwargs", "needle"),
    [
        ("boom", {"error": "nope"}, "error must be one of"),
        ("flaky", {"fail_times": -1}, "fail_times"),
        ("flaky", {"error": "nope"}, "error must be one of"),
        ("delay", {"seconds": -1}, "seconds"),
        ("delay", {"seconds": float("inf")}, "seconds"),
        ("leaky", {"pool": ""}, "pool"),
        ("write_jsonl", {"path": ""}, "path"),
        ("write_jsonl", {"path": "x.jsonl", "mode": "r"}, "mode"),
        ("fanout", {"tasks": []}, "non-empty list"),
        ("fanout", {"tasks": ["nosuchtask"]}, "unknown task 'nosuchtask'"),
        ("fanout", {"tasks": ["echo"], "on_error": "ignore"}, "on_error"),
    ],
)
def test_arguments_are_checked_when_the_task_is_built(name: str, kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        _factory(name)(**kwargs)
