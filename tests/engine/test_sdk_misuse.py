"""Hostile task code and SDK misuse: a task body may do anything, the run records it and goes on.

Whatever a body raises or does with its ``ctx``, the run records that task's failure (attempt
row, pipeline row), keeps running the other pipelines, returns every lease and stays resumable.
Misuse of the API itself is refused at the call site with an error naming the argument.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from pyattacker import (
    ConfigError,
    FatalError,
    Pool,
    Resource,
    RetryableError,
    Runner,
    VirtualClock,
    fanout,
    pipeline,
    task,
)
from pyattacker.engine.signals import SignalGuard
from pyattacker.errors import PipelineBuildError
from pyattacker.flow.chain import PipelineSpec
from tests.support.runner import events, rows, seeds, vrunner


class _CustomBase(BaseException):
    """Not an Exception: task code that raises it must still only fail its task."""


def _pool(clock: VirtualClock, **options: Any) -> Pool:
    """One slot: a lease that is not returned would stall every later pipeline."""
    return Pool("p", [Resource.create("p", id="r1", capacity=1, options=options)], clock=clock)


@task(name="good", resource="p")
async def _good(value: Any, ctx: Any) -> Any:
    async with ctx.acquire():
        return value


def _specs(bad: Any) -> list[Any]:
    """The hostile pipeline first, then three good ones that need the same single slot."""
    return [*pipeline("badp", bad).map([{"i": -1}]), *pipeline("goodp", _good).map(seeds(3))]


def _resume_resends_nothing_durable(store: str, bad: Any) -> None:
    """A resume skips every succeeded pipeline; only the failed one gets another attempt."""
    clock = VirtualClock()
    with vrunner(store=store, clock=clock, pools=[_pool(clock)], concurrency=1) as r:
        again = r.run(_specs(bad))
    assert again.counters["attempts"] == 1 and again.counters["skipped"] == 3


def _failed_alone(store: str, bad: Any, error_type: str) -> None:
    """Run ``bad`` beside good pipelines at concurrency 1; only ``bad`` fails, nothing leaks."""
    clock = VirtualClock()
    pool = _pool(clock)
    with vrunner(store=store, clock=clock, pools=[pool], concurrency=1) as r:
        rep = r.run(_specs(bad))
        attempts = [a for a in rows(r.store, "attempts") if a.task_name == "bad"]
        failed = [p for p in rows(r.store, "pipelines") if p.state == "failed"]
    assert rep.status == "completed"
    assert (rep.failed, rep.succeeded) == (1, 3)
    assert pool.stats().active == 0
    assert [(a.outcome, a.error_type) for a in attempts] == [("failed", error_type)]
    assert [(p.name, p.failed_task, p.error_type) for p in failed] == [("badp", "bad", error_type)]
    _resume_resends_nothing_durable(store, bad)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "exc",
    [
        SystemExit(3),
        GeneratorExit(),
        _CustomBase("boom"),
        BaseExceptionGroup("g", [ValueError(1), _CustomBase()]),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_base_exception_from_a_body_fails_only_its_task(tmp_path: Path, exc: BaseException) -> None:
    @task(name="bad", resource="p")
    async def bad(value: Any, ctx: Any) -> Any:
        await ctx.acquire()  # held, never released: the runner must reclaim it
        raise exc

    _failed_alone(str(tmp_path / "s.db"), bad, type(exc).__name__)


@pytest.mark.timeout(60)
def test_cancelled_error_raised_by_a_body_is_its_failure_not_a_dead_worker(tmp_path: Path) -> None:
    @task(name="bad", resource="p")
    async def bad(value: Any, ctx: Any) -> Any:
        await ctx.acquire()
        raise asyncio.CancelledError()  # task code, not a cancel of the worker

    _failed_alone(str(tmp_path / "s.db"), bad, "CancelledError")


async def _cancel_then_return(value: Any, ctx: Any) -> Any:
    await ctx.acquire()
    asyncio.current_task().cancel()  # type: ignore[union-attr]
    return value  # the cancel would land on the runner's checkpoint wait


async def _cancel_then_await(value: Any, ctx: Any) -> Any:
    await ctx.acquire()
    asyncio.current_task().cancel()  # type: ignore[union-attr]
    await asyncio.sleep(1)
    return value


def _cancel_in_a_sync_body(value: Any) -> Any:
    asyncio.current_task().cancel()  # type: ignore[union-attr]
    return value


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "body", [_cancel_then_return, _cancel_then_await, _cancel_in_a_sync_body], ids=lambda f: f.__name__
)
def test_a_body_that_cancels_its_own_worker_fails_only_its_task(tmp_path: Path, body: Any) -> None:
    """``asyncio.current_task().cancel()`` in a body cancels the runner's worker: it used to die
    as if the run had been cancelled, and at concurrency 1 nothing took the next pipeline (the
    run hung). Now it is that task's failure, naming the task."""
    bad = task(name="bad", resource="p")(body)
    _failed_alone(str(tmp_path / "s.db"), bad, "RuntimeError")
    clock = VirtualClock()
    with vrunner(store=str(tmp_path / "t.db"), clock=clock, pools=[_pool(clock)], concurrency=1) as r:
        rep = r.run(_specs(bad))
        (failed,) = [p for p in rows(r.store, "pipelines") if p.state == "failed"]
    assert "task 'bad' cancelled its own worker" in (failed.error_message or "")
    assert (rep.status, rep.exit_code) == ("completed", 1)


@pytest.mark.timeout(60)
def test_a_cancel_of_a_worker_that_lands_in_a_body_fails_that_attempt(tmp_path: Path) -> None:
    """A cancel the runner did not ask for (here one the body scheduled for later) that arrives
    while the body runs is that attempt's failure; the worker goes on."""

    @task(name="bad", resource="p")
    async def bad(value: Any, ctx: Any) -> Any:
        await ctx.acquire()
        asyncio.get_running_loop().call_soon(asyncio.current_task().cancel)  # type: ignore[union-attr]
        await asyncio.sleep(1)
        return value

    _failed_alone(str(tmp_path / "s.db"), bad, "RuntimeError")


@pytest.mark.timeout(60)
def test_a_cancel_of_a_worker_between_tasks_leaves_the_pipeline_resumable(tmp_path: Path) -> None:
    """A cancel the runner did not ask for that arrives after the body ended, while its worker
    waits for the checkpoint of the task's failure, cannot be any task's failure: the pipeline
    is left interrupted, a new worker takes the cancelled one's place and the run finishes."""

    @task(name="bad", resource="p")
    async def bad(value: Any, ctx: Any) -> Any:
        asyncio.get_running_loop().call_soon(asyncio.current_task().cancel)  # type: ignore[union-attr]
        if value["i"] < 0:
            raise FatalError("the body failed; the cancel lands on the wait for its checkpoint")
        return value

    store = str(tmp_path / "s.db")
    clock = VirtualClock()
    pool = _pool(clock)
    with vrunner(store=store, clock=clock, pools=[pool], concurrency=1) as r:
        rep = r.run(_specs(bad))
        (cancelled,) = events(r.store, "runner.worker_cancelled")
        (left,) = [p for p in rows(r.store, "pipelines") if p.state == "interrupted"]
    assert (rep.status, rep.succeeded, rep.interrupted, rep.exit_code) == ("completed", 3, 1, 130)
    assert (left.name, cancelled.pipeline_id, cancelled.data["task"]) == ("badp", left.pipeline_id, "bad")
    assert pool.stats().active == 0
    clock = VirtualClock()
    with vrunner(store=store, clock=clock, pools=[_pool(clock)], concurrency=1) as r:
        again = r.run(_specs(bad))
    assert again.counters["skipped"] == 3 and again.counters["attempts"] == 1


@pytest.mark.timeout(60)
def test_a_cancel_after_a_last_task_returned_costs_nothing(tmp_path: Path) -> None:
    """A worker does not wait for the checkpoint of a pipeline's last task (the pipeline
    succeeds once its group commit is durable): a stray cancel that arrives after the body
    returned finds a worker holding no pipeline. Nothing is lost, the worker is replaced."""

    @task(name="bad", resource="p")
    async def bad(value: Any, ctx: Any) -> Any:
        asyncio.get_running_loop().call_soon(asyncio.current_task().cancel)  # type: ignore[union-attr]
        return value

    clock = VirtualClock()
    with vrunner(store=str(tmp_path / "s.db"), clock=clock, pools=[_pool(clock)], concurrency=1) as r:
        rep = r.run(_specs(bad))
        (cancelled,) = events(r.store, "runner.worker_cancelled")
        states = sorted(p.state for p in rows(r.store, "pipelines"))
    assert (rep.status, rep.succeeded, rep.exit_code) == ("completed", 4, 0)
    assert states == ["succeeded"] * 4
    assert (cancelled.pipeline_id, cancelled.data["task"]) == (None, None)
    assert "it held no pipeline: nothing lost" in cancelled.data["hint"]


@pytest.mark.timeout(60)
def test_keyboard_interrupt_from_a_body_fails_its_task_when_the_runner_owns_sigint(tmp_path: Path) -> None:
    """With the runner's own SIGINT handler installed, a KeyboardInterrupt it did not raise
    comes from task code."""
    assert threading.current_thread() is threading.main_thread()

    @task(name="bad")
    def bad(value: Any) -> Any:
        raise KeyboardInterrupt

    store = str(tmp_path / "s.db")
    clock = VirtualClock()
    with vrunner(store=store, clock=clock, pools=[_pool(clock)], concurrency=1, handle_signals=True) as r:
        rep = r.run(_specs(bad))
        failed = [p for p in rows(r.store, "pipelines") if p.state == "failed"]
    assert (rep.status, rep.failed, rep.succeeded) == ("completed", 1, 3)
    assert [(p.name, p.error_type) for p in failed] == [("badp", "KeyboardInterrupt")]


@pytest.mark.timeout(60)
def test_keyboard_interrupt_without_the_runners_handler_stops_the_run_resumably(tmp_path: Path) -> None:
    """Without the runner's handlers a KeyboardInterrupt may be a real Ctrl-C: the run stops,
    the lease is returned and the pipeline is resumable (not failed)."""
    calls = []

    @task(name="bad", resource="p")
    async def bad(value: Any, ctx: Any) -> Any:
        calls.append(value)
        await ctx.acquire()
        if len(calls) == 1:
            raise KeyboardInterrupt
        return value

    store = str(tmp_path / "s.db")
    clock = VirtualClock()
    pool = _pool(clock)
    with (
        vrunner(store=store, clock=clock, pools=[pool], concurrency=1) as r,
        pytest.raises(KeyboardInterrupt),
    ):
        r.run(_specs(bad))
    assert pool.stats().active == 0
    clock = VirtualClock()
    with vrunner(store=store, clock=clock, pools=[_pool(clock)], concurrency=1) as r:
        rep = r.run(_specs(bad))
        states = {p.name: p.state for p in rows(r.store, "pipelines")}
    assert rep.succeeded == 4 and set(states.values()) == {"succeeded"}


@pytest.mark.timeout(60)
def test_a_real_ctrl_c_leaves_the_other_running_pipelines_interrupted_not_failed(tmp_path: Path) -> None:
    """A KeyboardInterrupt out of one worker leaves the loop, and its teardown cancels the other
    workers: those cancels are the run going down (supervision has stopped the run before they
    arrive), not stray cancels that fail their tasks."""

    @task(name="slow")
    async def slow(value: Any) -> Any:
        if value["i"] == 0:
            await asyncio.sleep(0.1)
            raise KeyboardInterrupt
        await asyncio.sleep(10)
        return value

    clock = VirtualClock()
    with vrunner(store=str(tmp_path / "s.db"), clock=clock, concurrency=3) as r:
        with pytest.raises(KeyboardInterrupt):
            r.run(pipeline("p", slow).map(seeds(3)))
        states = sorted(p.state for p in rows(r.store, "pipelines"))
        (run,) = r.store.runs()
    assert states == ["interrupted"] * 3 and run.status == "interrupted"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("on_error", ["raise", "collect"])
def test_sys_exit_in_a_fanout_child_fails_only_its_pipeline(tmp_path: Path, on_error: str) -> None:
    """asyncio re-raises a child task's SystemExit out of the loop: it used to end the run."""

    @task
    async def one(value: Any) -> Any:
        return 1

    @task
    async def leaves(value: Any) -> Any:
        raise SystemExit(2)

    bad = fanout(one, leaves, name="bad", on_error=on_error)
    clock = VirtualClock()
    with vrunner(store=str(tmp_path / "s.db"), clock=clock, pools=[_pool(clock)]) as r:
        rep = r.run(_specs(bad))
        artifacts = [a for a in rows(r.store, "artifacts") if a.task_name == "bad"]
    assert rep.status == "completed" and rep.succeeded == 3 + (on_error == "collect")
    assert len(artifacts) == (on_error == "collect")


class _BadStr(RetryableError):
    def __str__(self) -> str:
        raise RuntimeError("__str__ failed")


class _NonStr(Exception):
    def __str__(self) -> Any:
        return 42


@pytest.mark.timeout(60)
def test_an_exception_whose_str_fails_is_still_recorded_and_retried(tmp_path: Path) -> None:
    @task(name="bad", retry={"max_attempts": 2, "base": 0.01})
    async def bad(value: Any, ctx: Any) -> Any:
        if ctx.attempt == 1:
            raise _BadStr()
        raise _NonStr()

    clock = VirtualClock()
    with vrunner(store=str(tmp_path / "s.db"), clock=clock, pools=[_pool(clock)]) as r:
        rep = r.run(_specs(bad))
        attempts = [a for a in rows(r.store, "attempts") if a.task_name == "bad"]
    assert (rep.failed, rep.succeeded, rep.counters["retries"]) == (1, 3, 1)
    assert [(a.error_type, a.error_message) for a in attempts] == [
        ("_BadStr", "<_BadStr.__str__ failed: RuntimeError>"),
        ("_NonStr", "<_NonStr.__str__ failed: TypeError>"),
    ]


@pytest.mark.timeout(60)
def test_emit_with_data_json_cannot_hold_keeps_the_run_and_its_rows(tmp_path: Path) -> None:
    @task(name="bad")
    async def bad(value: Any, ctx: Any) -> Any:
        ctx.emit("custom.note", lock=threading.Lock(), nan=float("nan"), keys={1: "one"})
        return value

    clock = VirtualClock()
    with vrunner(store=str(tmp_path / "s.db"), clock=clock, pools=[_pool(clock)]) as r:
        rep = r.run(_specs(bad))
        (note,) = events(r.store, "custom.note")
    assert (rep.status, rep.succeeded) == ("completed", 4)
    assert note.data["lock"].startswith("<unlocked _thread.lock") and note.data["keys"] == {"1": "one"}


@pytest.mark.timeout(60)
def test_emit_without_a_string_kind_fails_the_task_naming_the_argument(tmp_path: Path) -> None:
    @task(name="bad")
    async def bad(value: Any, ctx: Any) -> Any:
        ctx.emit(None)
        return value

    clock = VirtualClock()
    with vrunner(store=str(tmp_path / "s.db"), clock=clock, pools=[_pool(clock)]) as r:
        rep = r.run(_specs(bad))
        (failed,) = [p for p in rows(r.store, "pipelines") if p.state == "failed"]
    assert rep.succeeded == 3 and "ctx.emit(kind)" in (failed.error_message or "")


@pytest.mark.timeout(60)
def test_a_ctx_kept_past_its_attempt_cannot_take_a_lease(tmp_path: Path) -> None:
    """A background task that leases through an ended attempt's ctx gets an error and the slot
    goes back: before, the lease was never reclaimed and the pool's only slot was lost."""
    late: list[Any] = []

    @task(name="bad", resource="p")
    async def bad(value: Any, ctx: Any) -> Any:
        async def later() -> None:
            await asyncio.sleep(0.5)
            try:
                late.append(await ctx.acquire())
            except RuntimeError as exc:
                late.append(exc)

        late.append(asyncio.ensure_future(later()))
        return value

    @task(name="good", resource="p")
    async def slow(value: Any, ctx: Any) -> Any:
        async with ctx.acquire():
            await asyncio.sleep(1)
            return value

    clock = VirtualClock()
    pool = _pool(clock)
    specs = [*pipeline("badp", bad).map([{"i": -1}]), *pipeline("goodp", slow).map(seeds(3))]
    with vrunner(store=str(tmp_path / "s.db"), clock=clock, pools=[pool], concurrency=2) as r:
        rep = r.run(specs)
    assert rep.succeeded == 4 and pool.stats().active == 0
    assert isinstance(late[1], RuntimeError) and "after its attempt ended" in str(late[1])


@pytest.mark.timeout(60)
def test_a_resource_holding_a_live_object_in_its_options_is_stored(tmp_path: Path) -> None:
    clock = VirtualClock()
    pool = _pool(clock, client=threading.Lock())
    with vrunner(store=str(tmp_path / "s.db"), clock=clock, pools=[pool]) as r:
        rep = r.run(pipeline("goodp", _good).map(seeds(2)))
        (row,) = r.store.resources(rep.run_id)
    assert rep.succeeded == 2 and "_thread.lock" in row.spec["options"]["client"]


@pytest.mark.timeout(60)
def test_a_second_concurrent_run_on_one_runner_is_refused() -> None:
    @task
    async def slow(value: Any) -> Any:
        await asyncio.sleep(1)
        return value

    async def both(r: Runner) -> tuple[Any, Any]:
        first = asyncio.ensure_future(r.run_async(pipeline("a", slow).map(seeds(3))))
        await asyncio.sleep(0.1)
        with pytest.raises(ConfigError, match="already running run"):
            await r.run_async(pipeline("b", slow).map(seeds(3)))
        return await first, None

    clock = VirtualClock()
    with vrunner(clock=clock) as r:
        loop = clock.new_event_loop()
        try:
            report, _ = loop.run_until_complete(both(r))
        finally:
            loop.close()
        assert report.succeeded == 3
        assert r.run(pipeline("c", slow).map([{"c": 1}])).succeeded == 1  # free again afterwards


def _gen(value: Any) -> Any:
    yield value


async def _agen(value: Any) -> Any:
    yield value


@pytest.mark.parametrize("fn", [_gen, _agen, functools.partial(_gen)], ids=["gen", "agen", "partial"])
def test_a_generator_function_is_refused_as_a_task(fn: Any) -> None:
    with pytest.raises(PipelineBuildError, match="generator function"):
        task(fn)


@pytest.mark.parametrize("bad", [float("nan"), -1, 0])
def test_timeout_s_must_be_a_positive_number(bad: float) -> None:
    with pytest.raises(ConfigError, match="timeout_s must be a positive number"):
        task(timeout_s=bad)(lambda v: v)


def test_an_infinite_timeout_s_is_refused_when_the_pipeline_is_built() -> None:
    """A task may declare it (a config entry can clear it); a pipeline's identity may not."""
    with pytest.raises(ConfigError, match="non-finite"):
        pipeline("p", task(timeout_s=float("inf"))(lambda v: v))


def test_task_misuse_is_refused_at_the_call_site() -> None:
    with pytest.raises(ConfigError, match="resource must be a pool name"):
        task(resource=5)(lambda v: v)
    with pytest.raises(TypeError, match="@task takes a function or a name"):
        task(5)


def _make_body() -> Any:
    def body(value: Any, k: int) -> Any:
        return value

    return body


def test_a_partial_task_has_its_functions_name_and_a_stable_identity() -> None:
    """Two equal partials of equal code (another process: other addresses) are the same task;
    the digest used to hold the function's address, so every resume was a conflict."""
    one, two = task(functools.partial(_make_body(), k=1)), task(functools.partial(_make_body(), k=1))
    assert one.name == "body" and one.target.endswith("_make_body.<locals>.body")
    assert one.fingerprint() == two.fingerprint()
    assert task(functools.partial(_make_body(), k=2)).fingerprint() != one.fingerprint()


def test_a_tasks_source_is_read_once_when_its_identity_is_first_needed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading a body's source costs milliseconds, and a process discovers every task its
    plugins offer: a task reads it when its fingerprint is first made (a pipeline built from
    it), once, and a copy with overrides keeps it; the fingerprint is the one it always was."""
    import pyattacker.flow.taskspec as task_module

    reads: list[Any] = []
    real = task_module._source_digest
    monkeypatch.setattr(task_module, "_source_digest", lambda fn: reads.append(fn) or real(fn))

    def body(value: Any) -> Any:
        return value

    spec = task(body, name="lazy")
    tuned = spec.with_overrides(timeout_s=5)
    assert reads == []
    pipeline("p", spec)
    assert reads == [body] and spec.source_digest == real(body)
    retuned = spec.with_overrides(timeout_s=7)
    assert retuned.fingerprint()["source"] == spec.fingerprint()["source"] and reads == [body]
    assert tuned.fingerprint()["source"] == real(body) and reads == [body, body]
    assert spec.fingerprint() == {**tuned.fingerprint(), "timeout_s": None}


def test_pool_and_runner_misuse_is_refused_at_the_call_site() -> None:
    with pytest.raises(ConfigError, match="cooldown_s"):
        Resource.create("k", cooldown_s=float("nan"))
    with pytest.raises(ConfigError, match="tags"):
        Resource.create("k", tags=5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="tags must be strings"):
        Resource.create("k", tags=[1])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="expected Pool objects, got str"):
        Runner(pools=["a"])
    with pytest.raises(ConfigError, match="store: expected a path"):
        Runner(store=5)  # type: ignore[arg-type]


def _runner_task(name: str) -> asyncio.Task[Any]:
    (found,) = [t for t in asyncio.all_tasks() if t.get_name() == name]
    return found


@pytest.mark.timeout(60)
@pytest.mark.parametrize("victim", ["pyattacker-pump", "pyattacker-producer"])
def test_a_body_that_cancels_the_runners_pump_or_producer_stops_the_run_resumably(
    tmp_path: Path, victim: str
) -> None:
    """Cancelling the pump used to leave every pipeline waiting for a retry parked forever (the
    run hung); cancelling the producer ended a 'completed' run that never admitted the rest of
    the pipelines. Either now stops the run as cancelled (exit 130), and a resume finishes all."""
    state = {"done": False}

    @task(name="bad", retry={"max_attempts": 2, "base": 0.0})
    async def bad(value: Any, ctx: Any) -> Any:
        if value["i"] == 0 and not state["done"]:
            state["done"] = True
            _runner_task(victim).cancel()
            raise RetryableError("parked for a retry")
        await asyncio.sleep(0)
        return value

    store = str(tmp_path / "s.db")
    template = pipeline("p", bad)
    with vrunner(store=store, concurrency=1) as r:
        rep = r.run(template.map(seeds(6)))
    assert (rep.status, rep.stop_reason, rep.exit_code) == ("interrupted", "cancelled", 130)
    assert rep.succeeded < 6
    with vrunner(store=store, concurrency=1) as r:
        again = r.run(template.map(seeds(6)))
        final = {p.state for p in rows(r.store, "pipelines")}
    assert (again.exit_code, final, again.succeeded + again.counters["skipped"]) == (0, {"succeeded"}, 6)


def _second_signal(r: Runner) -> None:
    """What a second Ctrl-C does to the run in progress (the runner's handlers are not installed)."""
    SignalGuard(r._run).on_signal(signal.SIGINT)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["stop", "second_stop"])
def test_a_body_that_swallows_the_stops_cancel_does_not_hang_the_stop(tmp_path: Path, how: str) -> None:
    """A body that catches the CancelledError of a stop and goes on (a retry loop that catches
    everything): the runner cancelled each worker once and then waited for it forever, and
    no later Ctrl-C could end the run. It now cancels again until the body gives up."""
    caught: list[int] = []
    started: set[int] = set()
    holder: dict[str, Runner] = {}

    @task(name="stubborn")
    async def stubborn(value: Any) -> Any:
        loop = asyncio.get_running_loop()
        started.add(value["i"])
        if len(started) == 2:  # both bodies run: stop now (not after a wall-clock delay)
            loop.call_soon(holder["r"].stop, "user")
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                caught.append(value["i"])
                if how == "second_stop" and len(caught) == 2:  # each swallowed the first cancel
                    loop.call_soon(_second_signal, holder["r"])
                if caught.count(value["i"]) > 1:
                    raise

    async def go(r: Runner) -> Any:
        holder["r"] = r
        return await r.run_async(pipeline("p", stubborn).map(seeds(2)))

    with vrunner(store=str(tmp_path / "s.db"), concurrency=2, grace_s=0.1) as r:
        rep = asyncio.run(go(r))
        final = {p.state for p in rows(r.store, "pipelines")}
    assert (rep.status, final) == ("interrupted", {"interrupted"})
    assert sorted(caught) == [0, 0, 1, 1]


def test_run_refuses_what_is_not_a_spec_and_takes_a_specs_subclass(tmp_path: Path) -> None:
    """``run()`` checks each chunk of what it is given before admitting any of it (one ``type``
    per item): a stray value ends the run as a source error that names its type, and nothing of
    its chunk runs; a subclass of ``PipelineSpec`` is a spec."""
    template = pipeline("p", _good)

    class Tagged(PipelineSpec):
        pass

    store = str(tmp_path / "s.db")
    clock = VirtualClock()
    with vrunner(store=store, clock=clock, pools=[_pool(clock)], concurrency=1) as r:
        refused = r.run([*template.map(seeds(2)), "not a spec"])
        assert refused.producer_error == (
            "ConfigError: run() takes PipelineSpecs (template.map(...)), got str"
        )
        assert (refused.counters["pipelines_admitted"], rows(r.store, "pipelines")) == (0, [])
        first = template.bind({"i": 7})
        tagged = Tagged(*(getattr(first, f) for f in PipelineSpec.__struct_fields__))
        rep = r.run([tagged, *template.map(seeds(1))])
    assert (rep.status, rep.counters["pipelines_succeeded"]) == ("completed", 2)
