"""``watch``: plain snapshots into a pipe, run selection, metrics, per-attempt latency on resume."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from pyattacker import Pool, Resource, Runner, pipeline
from pyattacker.plugins.api import StoreBase
from pyattacker.views.common import choose_run, read_only_store
from pyattacker.views.live import LiveDigest, snapshot
from pyattacker.views.watch import bar, watch
from tests.support.views import build_store, fetch, judge


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_store(tmp_path_factory.mktemp("watch") / "a.db", 20)


def _watch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyattacker", "watch", *args], capture_output=True, text=True, timeout=60
    )


def test_cli_into_a_pipe_prints_plain_text(store: str) -> None:
    proc = _watch(store, "--iterations", "1", "--no-clear", "--interval", "0.1")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "\x1b" not in out  # no clear-screen or colour codes into a pipe
    assert "latest started" in out
    assert "total=20" in out and "failed=2" in out
    assert "pool api" in out and "active=0/2" in out
    assert "accuracy=0.75" in out
    assert "ValueError" in out


def test_cli_all_runs_has_no_app_metrics(store: str) -> None:
    proc = _watch(store, "--iterations", "1", "--run-id", "all")
    assert proc.returncode == 0
    assert "all runs (aggregate)" in proc.stdout
    assert "accuracy" not in proc.stdout
    assert "\x1b" not in proc.stdout


def test_render_to_captured_console(store: str) -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=200, force_terminal=False)
    assert watch(store, iterations=2, clear=False, console=console, sleep=lambda s: None) == 0
    text = buf.getvalue()
    assert text.count("pyattacker watch") == 2
    assert "latency (per attempt, ms)" in text


def test_missing_store_exit_2(tmp_path: Path) -> None:
    assert _watch(str(tmp_path / "none.db"), "--iterations", "1").returncode == 2


def test_bar_clamps() -> None:
    assert bar(5, 10, 10) == "[#####.....]"
    assert bar(20, 10, 4) == "[####]"
    assert bar(1, 0, 4) == "[....]"


def test_latency_of_a_resumed_run_counts_its_own_attempts(tmp_path: Path) -> None:
    path = build_store(tmp_path / "r.db", 14)
    pools = [Pool("api", [Resource("llm", id="r1", capacity=2)])]
    with Runner(store=path, pools=pools, concurrency=2, resume=True) as runner:
        runner.run(
            pipeline("p", fetch, judge).map(({"i": i} for i in range(14)), key_of=lambda s: f"k{s['i']}")
        )
    with read_only_store(path) as s:
        choice = choose_run(s, None)
        second = s.stats(choice.run_id)["attempts_total"]
        snap = snapshot(s, choice, LiveDigest(choice.run_id))
        assert snap["latency_ms"]["count"] == second
        assert second < s.stats(None)["attempts_total"]
        assert snap["reported_metrics"] is not None


class _SlowStats:
    """A store whose statistics take ``cost`` seconds of a fake clock, counting the reads."""

    def __init__(self, clock: list[float], cost: float) -> None:
        self.clock, self.cost, self.reads = clock, cost, 0

    def stats(self, run_id: str | None) -> dict[str, object]:
        self.reads += 1
        self.clock[0] += self.cost
        return {"pipelines": {"total": self.reads}}


def test_dear_store_statistics_are_reused_for_ten_times_their_cost() -> None:
    clock = [100.0]
    store = _SlowStats(clock, cost=1.0)  # like 200,000 pipelines
    digest = LiveDigest("r", clock=lambda: clock[0])
    first, _ = digest.store_stats(store)  # type: ignore[arg-type]
    assert store.reads == 1 and first["pipelines"]["total"] == 1
    clock[0] += 8.0  # 9 s after the read started: still within 10 x 1 s
    again, _ = digest.store_stats(store)  # type: ignore[arg-type]
    assert store.reads == 1 and again is first
    clock[0] += 1.0
    fresh, _ = digest.store_stats(store)  # type: ignore[arg-type]
    assert store.reads == 2 and fresh["pipelines"]["total"] == 2


def test_dear_statistics_read_before_the_run_ended_are_read_again_once() -> None:
    """A view that shows the run ended must not show counts read while it ran (the dashboard
    showed `completed` beside the counts of a poll before the run's last rows): counts read
    before ``ended_at`` are read again whatever they cost, once; later refreshes keep them."""
    clock = [100.0]
    store = _SlowStats(clock, cost=1.0)
    digest = LiveDigest("r", clock=lambda: clock[0])
    _, read_at = digest.store_stats(store)  # type: ignore[arg-type]
    ended = read_at + 0.001  # the run ended after that read
    while time.time() <= ended:  # (the next read starts after it)
        pass
    final, _ = digest.store_stats(store, ended_at=ended)  # type: ignore[arg-type]
    assert store.reads == 2 and final["pipelines"]["total"] == 2
    kept, _ = digest.store_stats(store, ended_at=ended)  # type: ignore[arg-type]
    assert store.reads == 2 and kept is final


def test_cheap_store_statistics_are_read_at_every_refresh() -> None:
    clock = [100.0]
    store = _SlowStats(clock, cost=0.01)
    digest = LiveDigest("r", clock=lambda: clock[0])
    for n in range(1, 4):
        stats, _ = digest.store_stats(store)  # type: ignore[arg-type]
        assert store.reads == n and stats["pipelines"]["total"] == n


def test_snapshot_says_how_old_its_counts_are(store: str) -> None:
    with read_only_store(store) as st:
        choice = choose_run(st, None)
        snap = snapshot(st, choice, LiveDigest(choice.run_id))
    assert 0.0 <= snap["stats_age_s"] < 60.0
    out = io.StringIO()
    from pyattacker.views.watch import render_snapshot

    Console(file=out, width=200).print(render_snapshot({**snap, "stats_age_s": 12.0}))
    assert "(counts 12 s old)" in out.getvalue()
    out = io.StringIO()
    Console(file=out, width=200).print(render_snapshot(snap))
    assert "old)" not in out.getvalue()


def test_digest_from_summaries_equals_the_one_from_whole_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SQLite store hands a live view four columns per attempt and per event
    (``attempt_summaries``, ``event_summaries``); the figures must be those built from whole
    rows, for one run and for all runs, read in one go or in several updates (pages of 7 rows
    here), and the recent events and errors the same whole rows."""
    import pyattacker.views.live as view_live
    from pyattacker_plugins.store_sqlite import SqliteStore

    path = build_store(tmp_path / "d.db", 14)
    pools = [Pool("api", [Resource("llm", id="r1", capacity=2)])]
    with Runner(store=path, pools=pools, concurrency=2, resume=True) as runner:
        runner.run(
            pipeline("p", fetch, judge).map(({"i": i} for i in range(20)), key_of=lambda s: f"k{s['i']}")
        )

    def figures(digest: LiveDigest) -> tuple[object, ...]:
        return (
            digest.latency(),
            digest.histogram_rows(),
            digest.throughput(),
            digest.recent_rate(),
            digest.attempts_seen,
            digest.last_ended,
            digest.event_counts,
            digest.parked,
            digest.recent_events,
            digest.recent_errors,
        )

    monkeypatch.setattr(view_live, "_PAGE", 7)
    with read_only_store(path) as s:
        for run_id in (choose_run(s, None).run_id, None):
            fast = LiveDigest(run_id, recent=4)
            fast.update(s)
            with monkeypatch.context() as m:
                m.setattr(SqliteStore, "attempt_summaries", StoreBase.attempt_summaries)
                m.setattr(SqliteStore, "event_summaries", StoreBase.event_summaries)
                slow = LiveDigest(run_id, recent=4)
                slow.update(s)
            assert figures(fast) == figures(slow)
            assert fast.attempts_seen == s.stats(run_id)["attempts_total"] > 7
            assert sum(fast.event_counts.values()) == s.count_rows("events", run_id) > 7
            assert len(fast.recent_events) == len(fast.recent_errors) == 4
            assert all(isinstance(r["data"], dict) for r in fast.recent_events + fast.recent_errors)


def test_recent_events_and_errors_are_the_last_ones_as_rows(store: str) -> None:
    with read_only_store(store) as s:
        choice = choose_run(s, None)
        digest = LiveDigest(choice.run_id, recent=5)
        digest.update(s)
        events = []
        after = None
        while page := s.page("events", run_id=choice.run_id, after=after, limit=100):
            events += page
            after = (page[-1].event_id,)
    assert [r["event_id"] for r in digest.recent_events] == [e.event_id for e in events[-5:]]
    from pyattacker.views.live import _ERROR_KINDS

    errors = [e for e in events if e.kind in _ERROR_KINDS]
    assert errors, "the fixture has failures"
    rows = digest.recent_errors
    assert [r["event_id"] for r in rows] == [e.event_id for e in errors[-5:]]
    assert all(isinstance(r["data"], dict) and r["run_id"] == choice.run_id for r in rows)


def test_attempt_fold_matches_its_per_row_definition() -> None:
    """The page-at-a-time fold gives what folding row by row defines: bucket i holds
    edge[i-1] < ms <= edge[i], per wall second the attempts ended / succeeded / failed."""
    import bisect
    import random

    from pyattacker.views.live import HISTOGRAM_EDGES_MS

    rnd = random.Random(7)
    values = [*HISTOGRAM_EDGES_MS, 0.0, 0.5, 1.0000001, 299999.9, 300000.0, 300000.1, 9e9]
    rows = [
        (
            i,
            rnd.choice(values) if i % 3 else rnd.uniform(0, 4000),
            1000.0 + rnd.uniform(0, 30),
            rnd.choice(["succeeded", "failed", "succeeded"]),
        )
        for i in range(1, 2500)
    ]
    digest = LiveDigest("r")
    for start in range(0, len(rows), 600):  # several pages, the last one short
        digest._add_attempts(rows[start : start + 600])
    histogram = [0] * (len(HISTOGRAM_EDGES_MS) + 1)
    seconds: dict[int, list[int]] = {}
    for _id, ms, ended, outcome in rows:
        histogram[bisect.bisect_left(HISTOGRAM_EDGES_MS, ms)] += 1
        slot = seconds.setdefault(int(ended), [0, 0, 0])
        slot[0] += 1
        slot[1 if outcome == "succeeded" else 2] += 1
    assert digest.histogram == histogram
    assert digest.seconds == seconds
    assert digest.attempts_seen == len(rows) and digest.last_ended == max(r[2] for r in rows)
    assert digest.latency()["count"] == len(rows)
    assert list(digest._durations) == sorted(r[1] for r in rows)

    ascending = LiveDigest("r")  # pages already in order are never sorted again
    ascending._add_attempts([(1, 1.0, 1.0, "succeeded"), (2, 2.0, 1.0, "succeeded")])
    ascending._add_attempts([(3, 2.0, 1.0, "succeeded")])
    assert ascending._sorted
    ascending._add_attempts([(4, 1.5, 1.0, "failed")])
    assert not ascending._sorted and ascending.latency()["max"] == 2.0


def test_recent_events_stay_the_last_ones_across_updates(tmp_path: Path) -> None:
    """A later update reads whole rows only for the events added since, and the view still
    shows the last ones of the store, errors included."""
    from pyattacker.views.live import _ERROR_KINDS

    path = build_store(tmp_path / "u.db", 14)

    def last_events(s: object) -> list[object]:
        events, after = [], None
        while page := s.page("events", after=after, limit=100):  # type: ignore[attr-defined]
            events += page
            after = (page[-1].event_id,)
        return events

    digest = LiveDigest(None, recent=4)
    with read_only_store(path) as s:
        digest.update(s)
        before = [r["event_id"] for r in digest.recent_events]
    pools = [Pool("api", [Resource("llm", id="r1", capacity=2)])]
    with Runner(store=path, pools=pools, concurrency=2, resume=True) as runner:
        runner.run(
            pipeline("p", fetch, judge).map(({"i": i} for i in range(30)), key_of=lambda s: f"n{s['i']}")
        )
    with read_only_store(path) as s:
        digest.update(s)
        events = last_events(s)
    shown = [r["event_id"] for r in digest.recent_events]
    assert shown == [e.event_id for e in events[-4:]] and shown != before
    errors = [e.event_id for e in events if e.kind in _ERROR_KINDS][-4:]
    assert [r["event_id"] for r in digest.recent_errors] == errors and errors
    assert len(digest._records) <= 8  # only what is shown is kept whole


def test_the_panel_says_when_leases_wait_for_something_that_may_never_come() -> None:
    """The wait hints are counted per run and said in words; none, no line."""
    from pyattacker.views.watch import _wait_hints

    assert _wait_hints({}) == []
    lines = [t.plain for t in _wait_hints({"acquire.waiting_unmatched": 3, "acquire.suspected_deadlock": 1})]
    assert len(lines) == 2
    assert lines[0].startswith("warning: 3 lease request(s) matched no resource") and "selector" in lines[0]
    assert lines[1].startswith("warning: 1 suspected deadlock(s)")


# -- how long a run has left ----------------------------------------------------------------------


def test_a_run_stores_how_many_pipelines_it_expects(tmp_path: Path) -> None:
    """Seeds with a length are counted (times the repeats); a generator is not (unknown);
    `expected=` wins."""
    from pyattacker import task

    tpl = pipeline("p", task(lambda x: x, name="same"))
    db = str(tmp_path / "e.db")
    with Runner(store=db, concurrency=2) as r:
        r.run(tpl.map([{"i": i} for i in range(4)], repeats=2))
        first = r.run_id
        r.run(tpl.map(({"i": i} for i in range(3)), repeats=2))
        second = r.run_id
        r.run(iter(tpl.map([{"i": 9}])), expected=7)
        third = r.run_id
        expected = {run: r.store.get_run(run).config["expected_pipelines"] for run in (first, second, third)}
    assert expected == {first: 8, second: None, third: 7}


def test_the_cli_stores_the_count_of_a_source_that_knows_it(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run: {store: r.db}\npipeline: {tasks: [{use: echo}]}\nsource: {kind: range, n: 6}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pyattacker", "run", "-c", str(cfg)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    with read_only_store(str(tmp_path / "r.db")) as s:
        assert s.runs()[-1].config["expected_pipelines"] == 6


def test_eta_is_what_is_left_at_the_rate_so_far_from_the_last_heartbeat() -> None:
    from pyattacker.model import RunRecord
    from pyattacker.views.live import _eta

    run = RunRecord(run_id="r", started_at=1000.0, heartbeat_at=1100.0, config={"expected_pipelines": 1000})
    counters = {"pipelines_done": 100, "skipped": 50}
    # 850 left at 1 pipeline/s as of the heartbeat, 10 s ago
    assert _eta(run, counters, 1110.0) == (1000, 840.0)
    assert _eta(run, {"pipelines_done": 0}, 1110.0) == (1000, None)  # no rate yet
    assert _eta(run, {"pipelines_done": 1000}, 1110.0) == (1000, 0.0)
    finished = RunRecord(run_id="r", status="completed", started_at=1000.0, config={"expected_pipelines": 9})
    assert _eta(finished, counters, 1110.0) == (9, None)
    unknown = RunRecord(run_id="r", started_at=1000.0, config={"expected_pipelines": None})
    assert _eta(unknown, counters, 1110.0) == (None, None)
    assert _eta(None, counters, 1110.0) == (None, None)


def test_the_panel_shows_the_eta_in_words() -> None:
    from pyattacker.views.watch import duration_text, render_snapshot

    assert [duration_text(s) for s in (0, 45.4, 750, 3720, 90061)] == [
        "0s",
        "45s",
        "12m 30s",
        "1h 02m",
        "25h 01m",
    ]
    snap = {
        "run_selected": "latest",
        "run_id": "r1",
        "run": {"status": "running", "label": ""},
        "elapsed_s": 10.0,
        "in_flight": 1,
        "pipelines": {"total": 5, "by_state": {"succeeded": 5}},
        "parked": 0,
        "waiting": 0,
        "latency_ms": {"p50": 1.0, "p95": 1.0, "p99": 1.0, "max": 1.0, "count": 5},
        "throughput": {"attempts_per_s_recent": 1.0, "pipelines_per_s": 0.5},
        "tasks": {},
        "pools": [],
        "counters": {},
        "attempts_total": 5,
        "events_total": 1,
        "reported_metrics": None,
        "recent_errors": [],
        "eta_s": 750.0,
        "expected_pipelines": 20000,
    }
    out = io.StringIO()
    Console(file=out, width=250).print(render_snapshot(snap))
    assert "eta 12m 30s (of 20,000 expected)" in out.getvalue()
    assert "pipelines [....................] total=5" in out.getvalue()  # 5 of 20,000 done
    snap["eta_s"] = None
    out = io.StringIO()
    Console(file=out, width=250).print(render_snapshot(snap))
    assert "eta" not in out.getvalue()


def test_a_row_damaged_by_hand_exits_2_naming_it(tmp_path: Path) -> None:
    """watch folds attempts and events from narrow reads: a text duration is named, not a
    ValueError from ``float()`` deep in the fold."""
    import sqlite3

    path = build_store(tmp_path / "hand.db", 4)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("UPDATE attempts SET duration_ms = 'slow' WHERE attempt_id = 2")
    conn.close()
    proc = _watch(path, "--iterations", "1", "--no-clear", "--interval", "0.1")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "table attempts, row attempt_id=2: column duration_ms holds 'slow'" in proc.stderr
