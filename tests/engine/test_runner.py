"""The runner's scheduling, checkpoints, resume, stops and failure handling (virtual clock)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

from pyattacker import ConfigError, FatalError, RetryableError, fanout, pipeline, task
from pyattacker.engine.checkpoint import Checkpointer
from pyattacker.errors import PipelineIdentityConflict, WorkerCrashed
from pyattacker.flow.taskspec import UNSET
from tests.support.runner import events, rows, seeds, states, vrunner


def _add_then_double() -> Any:
    """``p``: an async task (one suspension) that adds 1, then a sync task that doubles."""

    @task
    async def add(x: dict[str, int]) -> int:
        await asyncio.sleep(0)
        return x["i"] + 1

    @task
    def double(x: int) -> int:
        return x * 2

    return pipeline("p", add, double)


def test_chain_runs_and_checkpoints_every_task() -> None:
    tpl = _add_then_double()
    with vrunner(concurrency=4) as r:
        rep = r.run(tpl.map(seeds(10)))
        store = r.store
        assert rep.succeeded == 10 and rep.exit_code == 0
        arts = rows(store, "artifacts")
        assert len(arts) == 30  # seed + 2 tasks per pipeline
        finals = [a for a in arts if a.is_final]
        assert len(finals) == 10 and all(a.seq == 1 for a in finals)
        decoded = sorted(r.codecs.decode(a.codec, a.type_name, a.payload) for a in finals)
        assert decoded == [2 * (i + 1) for i in range(10)]
        assert all(p.cursor == 2 for p in rows(store, "pipelines"))
        assert {a.outcome for a in rows(store, "attempts")} == {"succeeded"}


def test_no_write_behind_keeps_every_row_of_a_success() -> None:
    """Without write-behind the success path commits its attempt row at once (the checkpoint's
    own rows then go into the next batch): nothing of a task is lost between the two."""
    tpl = _add_then_double()
    with vrunner(concurrency=4, write_behind=False) as r:
        rep = r.run(tpl.map(seeds(10)))
        store = r.store
        assert rep.succeeded == 10
        assert len(rows(store, "artifacts")) == 30
        assert len(rows(store, "tasks")) == 20
        assert len(rows(store, "attempts")) == 20
        assert all(p.cursor == 2 and p.state == "succeeded" for p in rows(store, "pipelines"))


def test_resume_never_reruns_a_durable_task() -> None:
    calls: dict[str, int] = {"a": 0, "b": 0}
    fail = {"on": True}

    @task
    def a(x: Any) -> Any:
        calls["a"] += 1
        return x

    @task
    def b(x: Any) -> Any:
        calls["b"] += 1
        if fail["on"]:
            raise ValueError("downstream broke")
        return x

    tpl = pipeline("p", a, b)
    with vrunner() as r:
        rep = r.run(tpl.map(seeds(5)))
        assert rep.failed == 5 and rep.exit_code == 1
        fail["on"] = False
        rep2 = r.run(tpl.map(seeds(5)), resume=True)
        assert rep2.succeeded == 5
        assert calls == {"a": 5, "b": 10}
        assert len(events(r.store, "pipeline.resumed")) == 5
        rep3 = r.run(tpl.map(seeds(5)))
        assert rep3.skipped == 5 and calls == {"a": 5, "b": 10}


def test_retry_parks_and_frees_the_worker() -> None:
    """Concurrency 1, one pipeline in a long backoff: the others still complete meanwhile."""
    order: list[int] = []

    @task(retry={"max_attempts": 2, "base": 1000.0, "jitter": "none"})
    async def slow_retry(x: dict[str, int], ctx: Any) -> int:
        if x["i"] == 0 and ctx.attempt == 1:
            raise RetryableError("try later")
        order.append(x["i"])
        return x["i"]

    with vrunner(concurrency=1) as r:
        rep = r.run(pipeline("p", slow_retry).map(seeds(4)))
        assert rep.succeeded == 4
        assert order == [1, 2, 3, 0]
        assert len(events(r.store, "pipeline.deferred")) == 1
        assert rep.counters["retries"] == 1


def test_retry_after_is_honoured() -> None:
    seen: list[float] = []

    @task(retry={"max_attempts": 2})
    async def limited(x: Any, ctx: Any) -> Any:
        seen.append(ctx.clock.now())
        if ctx.attempt == 1:
            raise RetryableError("429", error_class="rate_limit", retry_after=42.0)
        return x

    with vrunner() as r:
        r.run(pipeline("p", limited).map(seeds(1)))
        decisions = [a.decision for a in rows(r.store, "attempts")]
    assert seen[1] - seen[0] == pytest.approx(42.0)
    assert decisions[0]["reason"] == "retryable" and decisions[0]["retry_after"] == 42.0
    assert decisions[0]["error_class"] == "rate_limit"


def test_every_attempt_records_its_decision() -> None:
    @task(retry={"max_attempts": 3, "base": 0.1})
    async def flaky(x: Any) -> Any:
        raise TimeoutError("slow upstream")

    with vrunner() as r:
        rep = r.run(pipeline("p", flaky).map(seeds(1)))
        atts = rows(r.store, "attempts")
    assert rep.failed == 1
    assert [a.outcome for a in atts] == ["timeout"] * 3
    assert [a.decision["reason"] for a in atts] == ["retryable", "retryable", "attempts_exhausted"]
    assert all(
        set(a.decision)
        >= {"retry", "reason", "delay_s", "error_class", "attempt", "max_attempts", "retry_after"}
        for a in atts
    )


def test_timeout_s_fails_the_attempt_as_timeout() -> None:
    @task(timeout_s=5)
    async def hang(x: Any) -> Any:
        await asyncio.sleep(3600)

    with vrunner() as r:
        rep = r.run(pipeline("p", hang).map(seeds(1)))
        atts = rows(r.store, "attempts")
    assert rep.failed == 1 and atts[0].outcome == "timeout" and atts[0].error_class == "timeout"


def test_fatal_error_is_never_retried() -> None:
    @task(retry={"max_attempts": 5})
    def boom(x: Any) -> Any:
        raise FatalError("no")

    with vrunner() as r:
        rep = r.run(pipeline("p", boom).map(seeds(1)))
        atts = rows(r.store, "attempts")
    assert rep.failed == 1 and len(atts) == 1 and atts[0].decision["reason"] == "policy_declined"


def test_identity_conflict_is_refused_and_old_rows_kept() -> None:
    @task
    def one(x: Any) -> Any:
        return 1

    @task
    def two(x: Any) -> Any:
        return 2

    with vrunner() as r:
        r.run(pipeline("p", one).map(seeds(3), key_of=lambda s: f"k{s['i']}"))
        before = rows(r.store, "pipelines")
        with pytest.raises(PipelineIdentityConflict, match="different task chain"):
            r.run(pipeline("p", two).map(seeds(3), key_of=lambda s: f"k{s['i']}"))
        after = [p for p in rows(r.store, "pipelines")]
        assert [(p.pipeline_id, p.state, p.spec_digest) for p in after] == [
            (p.pipeline_id, p.state, p.spec_digest) for p in before
        ]
        assert events(r.store, "pipeline.identity_conflict")


def test_stop_after_failures_stops_admitting() -> None:
    @task
    def bad(x: Any) -> Any:
        raise ValueError("x")

    with vrunner(concurrency=1, stop_after_failures=2, max_admitted=1) as r:
        rep = r.run(pipeline("p", bad).map(seeds(50)))
    assert rep.stop_reason == "stop_after_failures"
    assert rep.failed == 2
    assert rep.exit_code == 1


def test_stop_after_s_leaves_the_rest_resumable() -> None:
    @task
    async def slow(x: Any) -> Any:
        await asyncio.sleep(10)
        return x

    with vrunner(concurrency=2, stop_after_s=25, grace_s=100) as r:
        rep = r.run(pipeline("p", slow).map(seeds(20)))
        assert rep.stop_reason == "stop_after_s" and rep.status == "interrupted"
        st = states(r.store)
        assert set(st.values()) <= {"succeeded", "interrupted"}
        assert list(st.values()).count("succeeded") == rep.succeeded >= 4
        r.config = r.config.replace(stop_after_s=None)
        rep2 = r.run(pipeline("p", slow).map(seeds(20)))
        assert rep2.skipped == rep.succeeded and rep2.succeeded == 20 - rep.succeeded


def test_stop_interrupts_parked_pipelines() -> None:
    @task(retry={"max_attempts": 3, "base": 500, "cap": 1000, "jitter": "none"})
    async def always(x: Any) -> Any:
        raise RetryableError("later")

    with vrunner(concurrency=2, stop_after_s=100) as r:
        rep = r.run(pipeline("p", always).map(seeds(3)))
        assert rep.status == "interrupted"
        assert set(states(r.store).values()) == {"interrupted"}
        assert len(events(r.store, "pipeline.deferred_interrupted")) == 3


def test_admission_budget_bounds_what_is_pulled_from_the_source() -> None:
    pulled = {"n": 0}

    def source() -> Any:
        for s in seeds(10_000):
            pulled["n"] += 1
            yield s

    @task(retry={"max_attempts": 2, "base": 10_000, "cap": 10_000, "jitter": "none"})
    async def park_first(x: Any, ctx: Any) -> Any:
        if ctx.attempt == 1:
            raise RetryableError("long backoff")
        return x

    tpl = pipeline("p", park_first)

    async def main() -> None:
        r = vrunner(concurrency=2, max_admitted=8)
        task_ = asyncio.ensure_future(r.run_async(tpl.map(source())))
        for _ in range(200):
            await asyncio.sleep(0)
        # every admitted pipeline is parked; the producer waits for budget
        assert r.stats()["admitted_pipelines"] <= 8
        assert pulled["n"] <= 8 + 512  # at most one lookup chunk ahead
        r.stop("user")
        await task_

    from pyattacker import VirtualClock

    with asyncio.Runner(loop_factory=VirtualClock().new_event_loop) as runner:
        runner.run(main())


def test_cancelling_run_async_leaves_pipelines_interrupted() -> None:
    @task
    async def forever(x: Any) -> Any:
        await asyncio.sleep(10**6)

    tpl = pipeline("p", forever)
    r = vrunner(concurrency=3)

    async def main() -> None:
        t = asyncio.ensure_future(r.run_async(tpl.map(seeds(5))))
        await asyncio.sleep(1)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    from pyattacker import VirtualClock

    with asyncio.Runner(loop_factory=VirtualClock().new_event_loop) as runner:
        runner.run(main())
    st = states(r.store)
    assert st and set(st.values()) == {"interrupted"}
    assert {a.outcome for a in rows(r.store, "attempts")} == {"cancelled"}
    assert r.store.runs()[-1].status == "interrupted"


def test_worker_crash_outside_task_code_stops_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    @task
    def ok(x: Any) -> Any:
        return x

    r = vrunner()

    def broken(*args: Any, **kwargs: Any) -> None:
        raise SystemError("framework bug")

    with monkeypatch.context() as patch:
        patch.setattr(Checkpointer, "stage", broken)
        rep = r.run(pipeline("p", ok).map(seeds(3)))
    # an ordinary exception outside task code is an internal error: pipeline failed, run goes on
    assert rep.failed == 3
    assert events(r.store, "runner.internal_error")

    class Boom(BaseException):
        pass

    def crash(*args: Any, **kwargs: Any) -> None:
        raise Boom("escaped")

    monkeypatch.setattr(Checkpointer, "stage", crash)
    with pytest.raises(WorkerCrashed, match="Boom"):
        r.run(pipeline("p2", ok).map(seeds(3)))
    assert r.store.get_run(r.run_id).status == "interrupted"
    assert events(r.store, "runner.worker_crashed")


def test_fanout_runs_children_on_the_same_input() -> None:
    @task
    async def left(x: Any) -> Any:
        return x["i"] + 1

    @task
    def right(x: Any) -> Any:
        return x["i"] * 10

    with vrunner() as r:
        rep = r.run(pipeline("p", fanout(left, right)).map(seeds(3)))
        finals = [a for a in rows(r.store, "artifacts") if a.is_final]
        values = sorted(
            (r.codecs.decode(a.codec, a.type_name, a.payload) for a in finals), key=lambda d: d["left"]
        )
    assert rep.succeeded == 3
    assert values == [{"left": i + 1, "right": i * 10} for i in range(3)]


def test_with_overrides_keeps_clears_and_refuses() -> None:
    @task(resource="apis", timeout_s=3, version="v1")
    def t(x: Any) -> Any:
        return x

    same = t.with_overrides(resource=UNSET)
    assert same.resource == "apis" and same.timeout_s == 3
    cleared = t.with_overrides(resource=None, version=None)
    assert cleared.resource is None and cleared.version is None and cleared.timeout_s == 3
    with pytest.raises(ConfigError):
        t.with_overrides(name=None)
    assert t.fingerprint() != cleared.fingerprint()


def test_task_signature_is_checked() -> None:
    from pyattacker.errors import PipelineBuildError

    with pytest.raises(PipelineBuildError, match="3 required positional"):
        task(lambda a, b, c: a)


def test_pipeline_key_is_the_same_in_another_process() -> None:
    code = (
        "from pyattacker import pipeline\n"
        "from pyattacker_plugins.task_echo import echo\n"
        "print(pipeline('p', echo).bind({'q': 'what is 2+2', 'n': [1, 2.5]}).key)\n"
    )
    from pyattacker_plugins.task_echo import echo

    here = pipeline("p", echo).bind({"n": [1, 2.5], "q": "what is 2+2"}).key
    there = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert here == there


def test_key_changes_with_seed_chain_and_repeat() -> None:
    from pyattacker_plugins.task_echo import echo

    @task(version="v2")
    def other(x: Any) -> Any:
        return x

    a = pipeline("p", echo)
    assert a.bind(1).key != a.bind(2).key
    assert a.bind(1).key != a.bind(1, repeat=1).key
    assert a.bind(1).key != pipeline("p", other).bind(1).key
    keys = [s.key for s in a.map([{"id": "x"}], repeats=3, key_of=lambda s: s["id"])]
    assert keys == ["x#0", "x#1", "x#2"]


def test_key_derivation_is_unchanged() -> None:
    """Stores written by earlier versions are found again only if the formula never changes:
    key = digest(spec_digest | seed_digest | repeat), seed_digest = digest(encoded seed)."""
    from pyattacker.digest import digest_bytes
    from pyattacker_plugins.task_echo import echo

    template = pipeline("p", echo)
    seeds: list[Any] = ["in-1", {"q": "x", "n": [1, 2.5]}, 7, None, ["a", "b"]]
    for repeat in (0, 3):
        for seed in seeds:
            spec = template.bind(seed, repeat=repeat)
            assert spec.seed_digest == digest_bytes(spec.seed_bytes)
            formula = f"{template.spec_digest}|{spec.seed_digest}|{repeat}".encode()
            assert spec.key == digest_bytes(formula)
    mapped = [s.key for s in template.map(seeds)]
    assert mapped == [template.bind(seed).key for seed in seeds]
    assert [s.key for s in template.map(seeds, repeats=2)][1::2] == [
        template.bind(s, repeat=1).key for s in seeds
    ]


def test_duplicate_keys_in_one_run_run_once() -> None:
    calls = {"n": 0}

    @task
    def count(x: Any) -> Any:
        calls["n"] += 1
        return x

    with vrunner() as r:
        rep = r.run(pipeline("p", count).map([1, 1, 2]))
    assert calls["n"] == 2 and rep.skipped == 1


def test_a_key_given_twice_with_different_seeds_is_refused_not_dropped() -> None:
    """Two source rows under one explicit key (``key_field``: ``1`` and ``"1"`` both give "1"),
    close enough to be in flight together: the second row's data was skipped in silence
    (``duplicate_key``), while the same rows further apart were an identity conflict. Both
    are now the conflict, naming the key."""
    from pyattacker.errors import PipelineIdentityConflict

    calls = {"n": 0}

    @task
    def count(x: Any) -> Any:
        calls["n"] += 1
        return x

    tpl = pipeline("p", count)
    rows_in = [(str(r["id"]), r) for r in ({"id": 1, "v": "a"}, {"id": "1", "v": "b"})]
    with vrunner() as r, pytest.raises(PipelineIdentityConflict, match="'1' is given twice in this run"):
        r.run(tpl.map_keyed(rows_in))
    assert calls["n"] <= 1


@pytest.mark.parametrize("where", ["memory", "sqlite"])
def test_a_key_given_again_after_it_finished_is_a_counted_skip_and_never_reruns(
    tmp_path: Any, where: str
) -> None:
    """The same rows again after their pipelines finished in this run (a lookup chunk later):
    a succeeded one was passed over without being counted, and a failed one ran all its tasks
    again within the same run. Both are a ``duplicate_key`` skip now."""
    n = 600  # more than one lookup chunk (512): k0 and k1 have finished when they come again
    calls: dict[int, int] = {}

    @task
    async def flaky(x: Any) -> Any:
        calls[x["i"]] = calls.get(x["i"], 0) + 1
        if x["i"] == 0:
            raise ValueError("k0 fails")
        return x

    keyed = [(f"k{i}", {"i": i}) for i in range(n)] + [("k0", {"i": 0}), ("k1", {"i": 1})]
    store = None if where == "memory" else str(tmp_path / "s.db")
    with vrunner(store=store, concurrency=4) as r:
        rep = r.run(pipeline("p", flaky).map_keyed(keyed))
        skipped = events(r.store, "pipeline.skipped")
    assert calls[0] == 1 and calls[1] == 1 and rep.failed == 1 and rep.succeeded == n - 1
    assert rep.skipped == 2 and [e.data["reason"] for e in skipped] == ["duplicate_key"] * 2


def test_on_pipeline_finished_sees_durable_rows() -> None:
    seen: list[tuple[str, str]] = []

    @task
    def ok(x: Any) -> Any:
        return x

    def cb(runner: Any, record: Any, artifact: Any) -> None:
        stored = runner.store.lookup_pipelines([record.pipeline_id])[record.pipeline_id]
        seen.append((stored.state, artifact.artifact_id.split(":")[-1]))
        raise RuntimeError("callbacks never change outcomes")

    with vrunner(on_pipeline_finished=cb) as r:
        rep = r.run(pipeline("p", ok).map(seeds(2)))
    assert seen == [("succeeded", "0"), ("succeeded", "0")]
    assert rep.succeeded == 2 and rep.counters["monitor_callback_errors"] == 2


def test_source_error_is_reported_not_hidden() -> None:
    def bad_source() -> Any:
        yield {"i": 0}
        raise OSError("disk went away")

    @task
    def ok(x: Any) -> Any:
        return x

    with vrunner() as r:
        rep = r.run(pipeline("p", ok).map(bad_source()))
    assert rep.producer_error == "OSError: disk went away"
    assert rep.exit_code == 2


def test_sync_run_inside_a_running_loop_uses_a_thread() -> None:
    @task
    def ok(x: Any) -> Any:
        return x

    async def main() -> int:
        r = vrunner()
        return r.run(pipeline("p", ok).map(seeds(3))).succeeded

    assert asyncio.run(main()) == 3


def test_concurrency_bounds_attempts_in_flight_not_workers() -> None:
    """Workers waiting for their checkpoint's commit hold no attempt slot, and at most
    `concurrency` task bodies ever run at once."""
    running = {"now": 0, "max": 0}

    @task
    async def body(x: Any) -> Any:
        running["now"] += 1
        running["max"] = max(running["max"], running["now"])
        await asyncio.sleep(1)
        running["now"] -= 1
        return x

    with vrunner(concurrency=3) as r:
        rep = r.run(pipeline("p", body, body.with_overrides(name="again")).map(seeds(20)))
    assert rep.succeeded == 20 and running["max"] == 3


def _worker_count() -> int:
    return sum(1 for t in asyncio.all_tasks() if t.get_name().startswith("pyattacker-worker-"))


def test_workers_start_as_work_arrives_not_up_front() -> None:
    """A run of five pipelines at concurrency 10,000 starts at most five workers (it used to
    start ten thousand coroutines before the first pipeline was admitted)."""
    seen: list[int] = []

    @task
    async def body(x: Any) -> Any:
        seen.append(_worker_count())
        await asyncio.sleep(1)
        return x

    with vrunner(concurrency=10_000) as r:
        rep = r.run(pipeline("p", body).map(seeds(5)))
    assert rep.succeeded == 5
    assert seen and max(seen) <= 5


def test_idle_workers_are_reused_before_new_ones_start() -> None:
    """Pipelines that arrive one after another reuse the idle worker; concurrency still bounds
    how many run at once when they all arrive together."""
    seen: list[int] = []
    running = {"now": 0, "max": 0}

    @task
    def quick(x: Any) -> Any:
        seen.append(_worker_count())
        return x

    @task
    async def slow(x: Any) -> Any:
        running["now"] += 1
        running["max"] = max(running["max"], running["now"])
        await asyncio.sleep(1)
        running["now"] -= 1
        return x

    with vrunner(concurrency=64, max_admitted=1) as r:
        assert r.run(pipeline("q", quick).map(seeds(30))).succeeded == 30
    assert max(seen) == 1  # one pipeline admitted at a time: one worker did all of them
    with vrunner(concurrency=4) as r:
        assert r.run(pipeline("s", slow).map(seeds(40))).succeeded == 40
    assert running["max"] == 4


def test_a_run_with_nothing_to_do_starts_no_worker_and_ends() -> None:
    with vrunner(concurrency=8) as r:
        rep = r.run(pipeline("p", task(lambda x: x, name="id")).map([]))
    assert rep.succeeded == 0 and rep.exit_code == 0


def test_a_resume_of_finished_pipelines_counts_each_skip_in_one_event(tmp_path: Any) -> None:
    """Re-running finished pipelines skips every one (more than a lookup chunk of 512, so the
    skips span chunks), counts each, and closes the run with one ``run.skipped`` event carrying
    the count instead of an event per pipeline; pipelines new to the store run beside them."""

    @task
    async def echo(x: Any) -> Any:
        return x

    store = str(tmp_path / "s.db")
    with vrunner(store=store, concurrency=8) as r:
        r.run(pipeline("p", echo).map(seeds(600)))
    with vrunner(store=store, concurrency=8) as r:
        again = r.run(pipeline("p", echo).map(seeds(603)))
        closing = [e for e in events(r.store, "run.skipped") if e.run_id == again.run_id]
        per_pipeline = events(r.store, "pipeline.skipped")
    assert (again.skipped, again.succeeded, again.counters["pipelines_admitted"]) == (600, 3, 3)
    assert [e.data for e in closing] == [{"count": 600, "reason": "succeeded"}] and per_pipeline == []
