"""Sharding: the shard function, store naming, capacity sharing, the executor loop, and the
``--shard`` / ``--shards`` CLI through real child processes (merged report, SIGINT + resume,
failing shards, report/export over shard stores)."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pyattacker import ConfigError
from pyattacker.cli.shard import _exit_code, _Merge, _outcome, capacity_plan, child_argv
from pyattacker.config.build import build, load_config
from pyattacker.shard.executor import ShardJob, ShardStatus, get_executor, run_shards
from pyattacker.shard.plan import (
    capacity_share,
    in_shard,
    parse_shard,
    shard_index,
    shard_keeper,
    shard_specs,
    shard_store_path,
    split_capacity,
)
from pyattacker.views.merge import merge_stores
from pyattacker_plugins.executor_local import LocalExecutor, LocalHandle
from pyattacker_plugins.local_fork import ForkedHandle
from tests.support.cli import cli, cli_env
from tests.support.runner import count_succeeded

AUDIT = """
import asyncio, os, signal, time
from pyattacker import task

def _note(value, name):
    with open(os.environ["AUDIT_LOG"], "a") as fh:
        fh.write(f"{value['i']} {name} {os.environ.get('PYATACKER_SHARD', '-')}\\n")

@task(name="first")
async def first(value):
    await asyncio.sleep(0.005)
    _note(value, "first")
    return value

@task(name="record")
async def record(value):
    await asyncio.sleep(0.01)
    _note(value, "second")
    return {"i": value["i"], "done": True}

@task(name="slow")
async def slow(value):
    await asyncio.sleep(0.03)
    _note(value, "slow")
    return {"i": value["i"]}

@task(name="fail_in_shard_1")
def fail_in_shard_1(value):
    if os.environ.get("PYATACKER_SHARD") == "1/2":
        raise ValueError(f"bad row {value['i']}")
    return value

@task(name="stubborn")
def stubborn(value):
    # a shard that no signal stops: it notes each SIGINT/SIGTERM and keeps blocking its loop
    def note(signum, frame):
        with open(os.environ["AUDIT_LOG"] + ".signals", "a") as fh:
            fh.write(f"{os.getpid()}\\n")
    signal.signal(signal.SIGINT, note)
    signal.signal(signal.SIGTERM, note)
    with open(os.environ["AUDIT_LOG"] + ".stuck", "a") as fh:
        fh.write(f"{os.getpid()}\\n")
    while True:
        time.sleep(1)

@task(name="die_in_shard_1")
def die_in_shard_1(value):
    if os.environ.get("PYATACKER_SHARD") == "1/2":
        os.kill(os.getpid(), signal.SIGKILL)
    return value
"""

CONFIG = """
run: {store: runs/s.db, concurrency: 4, grace_s: 5}
pools:
  api:
    resources:
      - {id: api-1, capacity: 8}
      - {id: api-2, capacity: 3}
pipeline:
  name: sharded
  tasks:
    - {use: "audit_mod:first"}
    - {use: "audit_mod:record", resource: api}
source: {kind: range, n: N}
"""


@pytest.fixture
def env(tmp_path: Path, _isolated_home: Path) -> dict[str, str]:
    (tmp_path / "audit_mod.py").write_text(AUDIT)
    out = cli_env(_isolated_home, tmp_path, AUDIT_LOG=str(tmp_path / "audit.log"))
    out.pop("PYATACKER_SHARD", None)
    return out


def _config(tmp_path: Path, n: int, body: str = CONFIG, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(body.replace("n: N}", f"n: {n}}}"))
    return path


def _audit(tmp_path: Path) -> list[str]:
    log = tmp_path / "audit.log"
    return log.read_text().splitlines() if log.exists() else []


# -- the shard function -------------------------------------------------------------------------
def test_shard_index_is_blake2b_of_the_key() -> None:
    for key in ["a", "pipeline-1", "ünïcode", "x" * 300]:
        want = int(hashlib.blake2b(key.encode(), digest_size=16).hexdigest()[:16], 16)
        for n in (1, 2, 3, 7, 64):
            assert shard_index(key, n) == want % n
            assert in_shard(key, shard_index(key, n), n)
            # a shard's keeper is the same test, with the count and index fixed once
            assert [shard_keeper(i, n)(key) for i in range(n)] == [i == want % n for i in range(n)]
    assert all(in_shard(k, 0, 1) for k in ["a", "b"])  # one shard holds everything
    with pytest.raises(ConfigError):
        shard_index("a", 0)
    with pytest.raises(ConfigError, match="shard count must be >= 1, got 0"):
        shard_keeper(0, 0)


def test_shard_of_every_key_is_the_same_in_another_process(tmp_path: Path) -> None:
    """Never Python's salted ``hash``: other processes (other hash seeds) agree on every key."""
    from pyattacker import pipeline, task

    @task(name="noop")
    def noop(value: Any) -> Any:
        return value

    template = pipeline("keys", noop)
    keys = [spec.pipeline_id for spec in template.map({"i": i} for i in range(300))] + ["k1", "k2"]
    (tmp_path / "keys.json").write_text(json.dumps(keys))
    here = [shard_index(k, n) for k in keys for n in (2, 3, 5)]
    code = (
        "import json, sys\n"
        "from pyattacker.shard.plan import shard_index\n"
        "keys = json.load(open(sys.argv[1]))\n"
        "print(json.dumps([shard_index(k, n) for k in keys for n in (2, 3, 5)]))\n"
    )
    for seed in ("1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / "keys.json")],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert json.loads(out.stdout) == here
    assert 100 < sum(1 for k in keys[:300] if shard_index(k, 2) == 0) < 200  # both shards get work


def test_shard_specs_is_lazy_and_partitions() -> None:
    class Spec:
        def __init__(self, i: int) -> None:
            self.pipeline_id = f"key-{i}"

    endless = (Spec(i) for i in itertools.count())  # never materialised
    first = list(itertools.islice(shard_specs(endless, 1, 3), 5))
    assert len(first) == 5 and all(shard_index(s.pipeline_id, 3) == 1 for s in first)
    specs = [Spec(i) for i in range(200)]
    parts = [[s.pipeline_id for s in shard_specs(specs, i, 3)] for i in range(3)]
    assert sorted(itertools.chain(*parts)) == sorted(s.pipeline_id for s in specs)
    assert len(set(parts[0]) & set(parts[1])) == 0
    assert [s.pipeline_id for s in shard_specs(specs, 0, 1)] == [s.pipeline_id for s in specs]


def test_a_shard_binds_only_the_seeds_of_its_own_given_keys() -> None:
    """With ``keep``, a given key is tested before its seed is bound: another shard's seed is
    never encoded here (one no codec can encode raises nothing), while a content-addressed key,
    known only from its bound seed, is bound and then tested. Repeats are kept one by one."""
    from pyattacker import pipeline, task
    from pyattacker.errors import ArtifactCodecError

    @task(name="noop")
    def noop(value: Any) -> Any:
        return value

    template = pipeline("keyed", noop)
    keys = [f"row-{i}" for i in range(60)]
    mine = [k for k in keys if shard_index(k, 2) == 0]
    unencodable = object()
    pairs = [(k, {"i": k} if k in mine else unencodable) for k in keys]
    with pytest.raises(ArtifactCodecError):
        list(template.map_keyed(pairs))  # every seed bound: the foreign ones fail
    kept = list(template.map_keyed(pairs, keep=shard_keeper(0, 2)))
    assert [s.key for s in kept] == mine and [s.seed for s in kept] == [{"i": k} for k in mine]
    assert all(s.seed_key == s.key for s in kept)
    # repeats: each key#r belongs to its own shard; the specs are those of the unfiltered stream
    good = [(k, {"i": k}) for k in keys] + [(None, {"i": i}) for i in range(40)]
    for index in range(3):
        for repeats in (1, 2):
            want = shard_specs(template.map_keyed(good, repeats=repeats), index, 3)
            got = template.map_keyed(good, repeats=repeats, keep=shard_keeper(index, 3))
            assert [(s.key, s.repeat, s.seed_key, s.seed_digest) for s in got] == [
                (s.key, s.repeat, s.seed_key, s.seed_digest) for s in want
            ]


def test_a_config_shard_keeps_its_keys_after_the_limit(tmp_path: Path, env: dict[str, str]) -> None:
    """``built.specs(keep)``: without a limit the shard's own specs; with one, the limit counts
    the dataset's first specs (every shard's) and the shard keeps its part of them."""
    body = CONFIG.replace('"audit_mod:first"', "echo").replace('"audit_mod:record"', "echo")
    loaded = load_config(_config(tmp_path, 50, body))
    whole, limited = build(loaded), build(loaded, limit=20)
    every = [s.key for s in whole.specs()]
    for index in range(2):
        keep = shard_keeper(index, 2)
        assert [s.key for s in whole.specs(keep)] == [k for k in every if keep(k)]
        assert [s.key for s in limited.specs(keep)] == [k for k in every[:20] if keep(k)]
    assert [s.key for s in limited.specs()] == every[:20]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0/1", (0, 1)), ("0/2", (0, 2)), ("3/4", (3, 4)), (" 1/2 ", (1, 2)), ("9/10", (9, 10))],
)
def test_parse_shard_accepts(text: str, expected: tuple[int, int]) -> None:
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["1", "", "a/b", "1/x", "2/2", "3/2", "-1/2", "0/0", "1/-1", "1.0/2", "/2"])
def test_parse_shard_rejects_naming_the_flag(text: str) -> None:
    with pytest.raises(ConfigError, match="--shard"):
        parse_shard(text)


@pytest.mark.parametrize(
    ("base", "i", "n", "expected"),
    [
        ("runs/qa.db", 0, 4, "runs/qa.shard0of4.db"),
        ("runs/qa.db", 3, 4, "runs/qa.shard3of4.db"),
        ("runs/qa", 1, 2, "runs/qa.shard1of2.db"),  # no suffix: .db
        ("/abs/dir.v2/qa.sqlite", 1, 2, "/abs/dir.v2/qa.shard1of2.sqlite"),
        ("runs/qa.jsonl", 0, 2, "runs/qa.shard0of2.jsonl"),
        ("runs/qa.db", 0, 1, "runs/qa.db"),  # one shard: unchanged
        (":memory:", 0, 2, ":memory:"),  # memory: unchanged (the CLI refuses it)
        ("s3://bucket/runs/qa", 1, 2, "s3://bucket/runs/qa.shard1of2"),  # a plugin's location: no .db
        ("s3://bucket/runs.v2/qa", 0, 2, "s3://bucket/runs.v2/qa.shard0of2"),
    ],
)
def test_shard_store_path(base: str, i: int, n: int, expected: str) -> None:
    assert shard_store_path(base, i, n) == expected


# -- capacity sharing ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("capacity", "slots", "shares"),
    [
        (8, 2, [4, 4]),
        (8, 3, [3, 3, 2]),
        (7, 4, [2, 2, 2, 1]),
        (4, 4, [1, 1, 1, 1]),
        (5, 1, [5]),
        (1, 2, [1, 1]),  # below the slot count: still 1 each (the sum exceeds the capacity)
        (2, 3, [1, 1, 1]),
    ],
)
def test_split_capacity(capacity: int, slots: int, shares: list[int]) -> None:
    assert split_capacity(capacity, slots) == shares
    assert [capacity_share(capacity, s, slots) for s in range(slots)] == shares
    if capacity >= slots:
        assert sum(shares) == capacity
    else:
        assert sum(shares) == slots > capacity


def _pools_config(tmp_path: Path) -> Path:
    """The CLI config's pools with a built-in task (importable in this process)."""
    body = CONFIG.replace('"audit_mod:first"', "echo").replace('"audit_mod:record"', "echo")
    return _config(tmp_path, 10, body, name="pools.yaml")


def test_capacity_plan_lines_and_oversubscription(tmp_path: Path, env: dict[str, str]) -> None:
    checked = build(load_config(_pools_config(tmp_path))).checked
    plans = capacity_plan(checked.pools, 2)
    assert [p.describe() for p in plans] == [
        "capacity of api-1 (8) split across 2 concurrent shards: 4+4",
        "capacity of api-2 (3) split across 2 concurrent shards: 2+1",
    ]
    assert not any(p.oversubscribed for p in plans)
    over = capacity_plan(checked.pools, 4)[1]
    assert over.shares == [1, 1, 1, 1] and over.oversubscribed
    assert "more than the capacity" in over.describe()
    full = capacity_plan(checked.pools, 2, full=True)
    assert all(p.shares == [] for p in full) and "not split" in full[0].describe()


def test_build_applies_the_capacity_share(tmp_path: Path, env: dict[str, str]) -> None:
    loaded = load_config(_pools_config(tmp_path))

    def capacities(share: tuple[int, int] | None) -> list[int]:
        pool = build(loaded, capacity_share=share).pools[0]
        return [r.capacity for r in pool.resources()]

    assert capacities(None) == [8, 3]
    assert capacities((0, 2)) == [4, 2]
    assert capacities((1, 2)) == [4, 1]
    assert capacities((2, 3)) == [2, 1]


def test_child_argv_forwards_every_run_flag() -> None:
    flags: dict[str, Any] = {
        "limit": 50,
        "concurrency": 3,
        "max_admitted": 9,
        "journal": "summary",
        "label": "lbl",
        "stop_after_failures": 2,
        "artifact_backend": "null",
        "resume": True,
        "retry_succeeded": True,
        "fresh_restart": True,
        "strict_leases": True,
        "no_write_behind": True,
        "no_signals": True,
        "strict_env": True,
    }
    argv = child_argv(flags, command="run", config="/c.yaml", index=1, count=4, store="/s.db", share=(0, 2))
    assert argv[:9] == [
        "run",
        "-c",
        "/c.yaml",
        "--shard",
        "1/4",
        "--store",
        "/s.db",
        "--summary-format",
        "json",
    ]
    for pair in (
        ["--limit", "50"],
        ["--concurrency", "3"],
        ["--max-admitted", "9"],
        ["--journal", "summary"],
        ["--label", "lbl"],
        ["--stop-after-failures", "2"],
        ["--artifact-backend", "null"],
        ["--capacity-share", "0/2"],
    ):
        i = argv.index(pair[0])
        assert argv[i : i + 2] == pair
    for switch in (
        "--resume",
        "--retry-succeeded",
        "--fresh-restart",
        "--strict-leases",
        "--no-write-behind",
        "--no-signals",
        "--strict-env",
    ):
        assert switch in argv
    bare = child_argv(
        dict.fromkeys(flags), command="resume", config="c", index=0, count=2, store="s", share=None
    )
    assert bare == ["resume", "-c", "c", "--shard", "0/2", "--store", "s", "--summary-format", "json"]


# -- the executor loop --------------------------------------------------------------------------
class FakeHandle:
    def __init__(self, owner: FakeExecutor, job: ShardJob) -> None:
        self.owner, self.job, self.ticks = owner, job, 0
        self.interrupts = 0
        self.cancelled = False

    def poll(self) -> ShardStatus | None:
        self.ticks += 1
        if self.cancelled or self.ticks >= 3 + self.job.index % 3:
            return self._done()
        return None

    def _done(self) -> ShardStatus:
        self.owner.running.discard(self.job.index)
        code = 130 if self.interrupts else 0
        return ShardStatus(index=self.job.index, exit_code=code, stdout="{}")

    def wait(self, timeout: float | None = None) -> ShardStatus:
        return self._done()

    def interrupt(self) -> None:
        self.interrupts += 1

    def cancel(self) -> ShardStatus:
        self.cancelled = True
        return self._done()


class FakeExecutor:
    """In-process stand-in for a cluster: records which slots run at the same time."""

    def __init__(self) -> None:
        self.running: set[int] = set()
        self.slots_seen: list[set[tuple[int, int]]] = []
        self.handles: list[FakeHandle] = []
        self.max_parallel = 0

    def submit(self, job: ShardJob) -> FakeHandle:
        self.running.add(job.index)
        self.max_parallel = max(self.max_parallel, len(self.running))
        handle = FakeHandle(self, job)
        self.handles.append(handle)
        return handle


def test_run_shards_bounds_parallelism_and_never_shares_a_slot() -> None:
    ex = FakeExecutor()
    live: dict[int, int] = {}
    clashes: list[tuple[int, int]] = []

    def make_job(index: int, slot: int) -> ShardJob:
        if slot in live.values():
            clashes.append((index, slot))
        return ShardJob(index=index, count=7, argv=["run", "--capacity-share", f"{slot}/3"])

    def started(index: int, slot: int) -> None:
        live[index] = slot

    def finished(status: ShardStatus) -> None:
        live.pop(status.index)

    run = run_shards(
        ex, 7, 3, make_job, on_start=started, on_finish=finished, forward_signals=False, poll_interval=0
    )
    assert sorted(run.statuses) == list(range(7)) and not run.not_started
    assert ex.max_parallel == 3 and not clashes
    assert set(run.slots.values()) == {0, 1, 2}


def test_run_shards_cancels_running_shards_when_the_parent_fails() -> None:
    ex = FakeExecutor()

    def make_job(index: int, slot: int) -> ShardJob:
        if index == 3:
            raise RuntimeError("parent broke")
        return ShardJob(index=index, count=5, argv=[])

    with pytest.raises(RuntimeError, match="parent broke"):
        run_shards(ex, 5, 3, make_job, forward_signals=False, poll_interval=0)
    leftover = [h for h in ex.handles if not h.cancelled and h.job.index in ex.running]
    assert not leftover and not ex.running


def test_run_shards_forwards_sigint_and_starts_nothing_more() -> None:
    ex = FakeExecutor()

    def make_job(index: int, slot: int) -> ShardJob:
        if index == 1:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the first two shards start
        return ShardJob(index=index, count=6, argv=[])

    run = run_shards(ex, 6, 2, make_job, poll_interval=0)
    assert run.interrupts == 1
    assert sorted(run.slots) == [0, 1] and run.not_started == [2, 3, 4, 5]
    assert all(h.interrupts == 1 for h in ex.handles)
    assert {s.exit_code for s in run.statuses.values()} == {130}


def test_exit_code_rules() -> None:
    def status(code: int | None, sig: int | None = None, out: str = '{"counters": {}}') -> ShardStatus:
        return ShardStatus(index=0, exit_code=code, signal=sig, stdout=out, stderr_tail="Error: boom\n")

    def codes(*statuses: ShardStatus | None) -> int:
        return _exit_code([_outcome(i, 3, "s", 0 if s else None, s) for i, s in enumerate(statuses)])

    assert codes(status(0), status(0)) == 0
    assert codes(status(0), status(1)) == 1
    assert codes(status(1), status(2, out="")) == 2
    assert codes(status(2, out=""), status(130)) == 130  # an interrupted shard wins
    assert codes(status(0), None) == 130  # never started because of the interrupt
    killed = _outcome(1, 2, "s", 0, status(None, signal.SIGKILL, out=""))
    assert killed.code == 2 and "SIGKILL" in (killed.problem or "")
    garbled = _outcome(1, 2, "s", 0, status(0, out="not json"))
    assert garbled.code == 2 and "JSON" in (garbled.problem or "")
    config_error = _outcome(1, 2, "s", 0, status(2, out=""))
    assert config_error.code == 2 and config_error.problem == "Error: boom"


@pytest.mark.parametrize("fork", [False, True])
def test_merged_report_folds_shard_stores_as_they_end(tmp_path: Path, fork: bool) -> None:
    """The sharded run folds each shard's store when that shard ends (in whatever order they
    end); the report equals ``merge_stores`` over the stores that exist. A store that cannot be
    read makes the report unavailable with the reason, and never raises into the shard loop.
    With ``fork``, each store is read by a forked child while the loop goes on."""
    from tests.support.views import build_store

    if fork and not hasattr(os, "fork"):
        pytest.skip("needs fork")
    stores = [str(tmp_path / f"m.shard{i}of3.db") for i in range(3)]
    build_store(stores[0], 6)
    build_store(stores[2], 6, start=6)  # shard 1 wrote no store
    merge = _Merge(stores, None, fork=fork)
    merge.add(2)  # shard 2 ended first
    merge.add(1)
    assert sorted(merge.reading) == ([2] if fork else [])  # still being read, by a child
    merged, why = merge.result()  # shard 0's store is read here (it ended last)
    assert why is None and not merge.reading
    assert merged.to_dict(20) == merge_stores([stores[0], stores[2]]).to_dict(20)
    assert [s.store for s in merged.sources] == [stores[0], stores[2]]
    nothing = _Merge([str(tmp_path / "none.shard0of1.db")], None, fork=fork)
    assert nothing.result() == (None, "no shard store was written")
    Path(stores[1]).write_bytes(b"not a database, " * 64)
    broken = _Merge(stores, None, fork=fork)
    broken.add(1)  # no exception: the other shards keep running
    broken.add(0)
    merged, why = broken.result()
    assert merged is None and why is not None and stores[1] in why
    assert why.startswith("ConfigError: ")  # the same line whichever process read the store
    assert not broken.reading  # the read of shard 0 was collected or stopped


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked reads are Linux-only")
def test_merge_decides_to_fork_at_each_read(tmp_path: Path) -> None:
    """A spawning executor starts relay threads after the merge is set up: a read that starts
    while another thread runs is done in-process (forking then is unsafe)."""
    from pyattacker.shard.forking import single_threaded
    from tests.support.views import build_store

    if not single_threaded():
        # a pytest-xdist worker runs an I/O thread: the same test in a process of its own
        node = f"{Path(__file__).resolve()}::test_merge_decides_to_fork_at_each_read"
        argv = ["-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'own'}"]
        done = subprocess.run(
            [sys.executable, *argv, node], capture_output=True, text=True, timeout=300, cwd=tmp_path
        )
        assert done.returncode == 0, done.stdout[-3000:]
        if "1 passed" not in done.stdout:
            pytest.skip("the test process runs other threads")
        return
    stores = [str(tmp_path / f"m.shard{i}of2.db") for i in range(2)]
    for i, store in enumerate(stores):
        build_store(store, 6, start=6 * i)
    merge = _Merge(stores, None)
    merge.add(0)
    assert list(merge.reading) == [0]  # forked
    release = threading.Event()
    thread = threading.Thread(target=release.wait)
    thread.start()
    try:
        merge.add(1)
    finally:
        release.set()
        thread.join()
    assert list(merge.reading) == [0] and 1 in merge.parts  # read here, not forked
    merged, why = merge.result()
    assert why is None and merged.to_dict(20) == merge_stores(stores).to_dict(20)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_read_that_fails_in_its_child_is_done_again_in_the_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forked read is only a faster way: when the child cannot hand its result back (here it
    does not pickle), the parent reads the store itself and the report is the same."""
    import pyattacker.views.shard_report as shard_report
    from tests.support.views import build_store

    stores = [str(tmp_path / f"m.shard{i}of2.db") for i in range(2)]
    for i, store in enumerate(stores):
        build_store(store, 6, start=6 * i)
    parent = os.getpid()
    real = shard_report.shard_part

    def only_here(location: str, run_id: Any, **options: Any) -> Any:
        return real(location, run_id, **options) if os.getpid() == parent else threading.Lock()

    monkeypatch.setattr(shard_report, "shard_part", only_here)
    merge = _Merge(stores, None, fork=True)
    merge.add(1)
    assert list(merge.reading) == [1]
    merged, why = merge.result()
    assert why is None and merged.to_dict(20) == merge_stores(stores).to_dict(20)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_halves_of_a_read_that_saw_different_runs_are_read_again_whole(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store's task counts are read beside the rest of it; counts of another run than the one
    the other half shows (the store changed between them) are not used: the store is read
    again in-process, so the report is what a single read says."""
    import pyattacker.views.shard_report as shard_report

    cfg = _config(tmp_path, 12)
    stores = [str(tmp_path / "runs" / f"s.shard{i}of2.db") for i in range(2)]
    for i in range(2):
        assert cli(["run", "-c", str(cfg), "--shard", f"{i}/2"], env).returncode == 0
    real = shard_report.shard_task_counts

    def other_run(location: str, run_id: Any) -> Any:
        _run, counts = real(location, run_id)
        return "another-run", {name: {"succeeded": 99} for name in counts}

    monkeypatch.setattr(shard_report, "shard_task_counts", other_run)
    merge = _Merge(stores, None, fork=True)
    merge.add(0)
    merge.add(1)
    combined, why = merge.result()
    assert why is None and type(combined) is shard_report.ShardsReport
    assert combined.to_dict(100) == merge_stores(stores).to_dict(100)
    assert all(n != 99 for states in combined.task_counts.values() for n in states.values())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_an_interrupted_merge_leaves_no_reader_behind(tmp_path: Path) -> None:
    from tests.support.views import build_store

    stores = [str(tmp_path / f"m.shard{i}of2.db") for i in range(2)]
    for i, store in enumerate(stores):
        build_store(store, 6, start=6 * i)
    merge = _Merge(stores, None, fork=True)
    merge.add(0)
    merge.add(1)
    pids = [call.pid for calls in merge.reading.values() for call in calls]
    assert len(pids) == 4  # two readers per store: its task counts, and the rest
    merge.close()  # what run_sharded does when the command is interrupted
    assert not merge.reading
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reaped: no zombie, no orphan


@pytest.mark.timeout(60)
def test_the_shard_loop_pause_returns_on_output_or_an_ending_shard() -> None:
    """``_pause`` with an hour's timeout returns at once when a handle's pipe is readable, and
    soon when a handle's output is closed (its shard is exiting); a handle without
    ``wait_fds`` makes it sleep the timeout (here 0). Without these, the test would hang."""
    from pyattacker.shard.executor import _pause

    class Offers:
        def __init__(self, fds: list[int]) -> None:
            self.fds = fds

        def wait_fds(self) -> list[int]:
            return self.fds

    r, w = os.pipe()
    try:
        os.write(w, b"x")
        _pause([Offers([r])], 3600)  # readable
        _pause([Offers([r]), Offers([])], 3600)  # one shard is exiting
        _pause([object()], 0)  # no wait_fds: sleeps the (zero) timeout
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.timeout(60)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked shards are Linux-only")
def test_the_shard_loop_wakes_when_a_forked_shard_ends(tmp_path: Path) -> None:
    """The loop waits on a forked shard's pipes instead of sleeping its poll interval, so it
    sees the end at once (with an hour's interval this would hang without it)."""
    executor = get_executor("local", relay_stderr=False, grace_s=30.0, start="fork")
    ended: list[int] = []

    def make_job(index: int, slot: int) -> ShardJob:
        return ShardJob(index=index, count=2, argv=["--version"], cwd=str(tmp_path))

    run = run_shards(
        executor,
        2,
        1,
        make_job,
        on_finish=lambda status: ended.append(status.index),
        forward_signals=False,
        poll_interval=3600,
    )
    assert ended == [0, 1] and all(s.exit_code == 0 for s in run.statuses.values())


def test_report_of_shard_stores_combines_their_aggregates(env: dict[str, str], tmp_path: Path) -> None:
    """Stores that provably hold one shard each (every run says ``shard I/N`` and every key is
    of shard I) are reported from their aggregates, with the output of the fold; a store that
    only claims a shard, or holds two, is folded."""
    import shutil

    from pyattacker.views.fold import MergedReport
    from pyattacker.views.merge import report_stores
    from pyattacker.views.shard_report import ShardsReport, shard_part

    body = CONFIG.replace('- {use: "audit_mod:first"}', '- {use: "audit_mod:fail_in_shard_1"}')
    cfg = _config(tmp_path, 40, body)
    stores = [str(tmp_path / "runs" / f"s.shard{i}of2.db") for i in range(2)]
    for i in range(2):
        assert cli(["run", "-c", str(cfg), "--shard", f"{i}/2"], env).returncode in (0, 1)
    again = cli(["resume", "-c", str(cfg), "--shard", "1/2"], env)  # a second run in shard 1
    assert again.returncode in (0, 1), again.stderr
    for order in (stores, stores[::-1]):
        for selection in (None, "all"):
            shown = report_stores(order, selection)
            assert type(shown) is ShardsReport and shown.rows == {}  # nothing folded
            folded = merge_stores(order, selection)
            assert shown.to_dict(100) == folded.to_dict(100), (order, selection)
    assert report_stores(stores, "all").to_dict(100)["errors"]  # shard 1's failures, whole rows
    merge = _Merge(stores, None)
    merge.add(1)
    combined, why = merge.result()
    assert why is None and type(combined) is ShardsReport
    assert combined.to_dict(100) == merge_stores(stores).to_dict(100)
    if hasattr(os, "fork"):  # each store read in two forked halves, or whole here: the same report
        for selection in (None, "all"):
            forked = _Merge(stores, selection, fork=True)
            for i in range(2):
                forked.add(i)
            assert sorted(forked.reading) == [0, 1] and not forked.parts
            with pytest.MonkeyPatch.context() as m:  # no half fails and is read again here
                m.setattr(_Merge, "_read_here", lambda self, index: pytest.fail(f"store {index} read here"))
                halves, why = forked.result()
            whole, _ = _Merge(stores, selection, fork=False).result()
            assert why is None and type(halves) is ShardsReport and halves.task_counts
            assert halves.to_dict(100) == whole.to_dict(100) == merge_stores(stores, selection).to_dict(100)

    liar_cfg = _config(
        tmp_path, 40, body.replace("grace_s: 5}", 'grace_s: 5, meta: {shard: "1/2"}}'), "l.yaml"
    )
    liar = str(tmp_path / "liar.db")  # says shard 1/2, holds every key
    assert cli(["run", "-c", str(liar_cfg), "--store", liar], env).returncode in (0, 1)
    both = str(tmp_path / "both.db")  # runs of shard 0/2 and of 1/2 in one store
    shutil.copy(stores[0], both)
    assert cli(["run", "-c", str(cfg), "--shard", "1/2", "--store", both], env).returncode in (0, 1)
    assert shard_part(liar, None) is None and shard_part(both, None) is None
    assert shard_part(stores[1], None) is not None
    for pair in ([stores[0], liar], [stores[1], both], [stores[0], stores[0]]):
        shown = report_stores(pair, "all")
        assert type(shown) is MergedReport
        assert shown.to_dict(100) == merge_stores(pair, "all").to_dict(100)
    mixed = _Merge([stores[0], liar], "all")
    folded_instead, why = mixed.result()
    assert why is None and type(folded_instead) is MergedReport and folded_instead.duplicates > 0

    # export: shard stores are concatenated without a winner map; the others are merged
    import pyattacker.views.export as export
    from pyattacker.views.shard_report import shard_stores

    assert shard_stores(stores) and shard_stores(stores[::-1])
    assert not shard_stores([stores[0], liar]) and not shard_stores([stores[1], both])
    assert not shard_stores([stores[0], stores[0]])
    merged_calls: list[int] = []
    real_winners = export._winners

    def spy(locations: Any, run_id: Any) -> Any:
        merged_calls.append(len(locations))
        return real_winners(locations, run_id)

    for kind in ("pipelines", "results"):
        fast = tmp_path / f"fast_{kind}.jsonl"
        export.export_stores(stores, str(fast), rows=kind)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(export, "shard_stores", lambda locations, run_id=None: False)
            m.setattr(export, "_winners", spy)
            slow = tmp_path / f"slow_{kind}.jsonl"
            export.export_stores(stores, str(slow), rows=kind)
        assert fast.read_bytes() == slow.read_bytes() and fast.stat().st_size > 0
    assert merged_calls == [2, 2]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(export, "_winners", spy)
        export.export_stores([stores[0], liar], str(tmp_path / "l.jsonl"), rows="pipelines")
    assert merged_calls == [2, 2, 2]  # a store that only claims its shard is merged


def _run_ids(store: str) -> list[str]:
    con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        return [row[0] for row in con.execute("select run_id from runs order by started_at")]
    finally:
        con.close()


def test_the_run_a_shard_reported_is_read_without_checking_each_key(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store whose only run is the one its shard process reported to the ``--shards`` parent
    is read from its SQL totals: every row of that run was admitted by its shard filter. The
    report is the one the per-key check gives; any other run in the store, or another
    selection, or no report from the shard, and every key is checked as before."""
    import pyattacker.views.shard_report as shard_report
    from pyattacker.cli.shard import _reported_run
    from pyattacker.views.shard_report import ShardsReport, shard_part

    body = CONFIG.replace('- {use: "audit_mod:first"}', '- {use: "audit_mod:fail_in_shard_1"}')
    cfg = _config(tmp_path, 40, body)
    stores = [str(tmp_path / "runs" / f"s.shard{i}of2.db") for i in range(2)]
    for i in range(2):
        assert cli(["run", "-c", str(cfg), "--shard", f"{i}/2"], env).returncode in (0, 1)
    runs = [_run_ids(store) for store in stores]
    assert all(len(ids) == 1 for ids in runs)
    checked = [shard_part(store, None) for store in stores]
    assert all(part is not None for part in checked)

    real = shard_report._shard_totals
    key_checks: list[str] = []

    def counted(store: Any, run_id: Any, shard: int, shards: int) -> Any:
        key_checks.append(run_id)
        return real(store, run_id, shard, shards)

    monkeypatch.setattr(shard_report, "_shard_totals", counted)
    for store, (rid,), part in zip(stores, runs, checked, strict=True):
        trusted = shard_part(store, None, written_by=rid)
        assert trusted is not None and trusted.report.to_dict(100) == part.report.to_dict(100)
        assert (trusted.shard, trusted.shards) == (part.shard, part.shards)
        assert key_checks == []  # the SQL totals, no key read one by one
        for selection, reported in (("all", rid), (None, "another-run"), (None, None)):
            again = shard_part(store, selection, written_by=reported)
            assert len(key_checks) == 1, (selection, reported)  # checked as without it
            plain = shard_part(store, selection)
            assert again is not None and plain is not None
            assert again.report.to_dict(100) == plain.report.to_dict(100)
            key_checks.clear()

    # the parent's merge hands each store the run its shard reported: no key is read
    merge = _Merge(stores, None, fork=False)
    for i, (rid,) in enumerate(runs):
        merge.add(i, rid)
    combined, why = merge.result()
    assert why is None and type(combined) is ShardsReport and key_checks == []
    assert combined.to_dict(100) == merge_stores(stores).to_dict(100)
    assert combined.to_dict(100)["errors"]  # shard 1's failed rows, read whole

    # a second run in the store: the one reported is no longer all it holds, so keys are read
    again = cli(["resume", "-c", str(cfg), "--shard", "1/2"], env)
    assert again.returncode in (0, 1), again.stderr
    latest = _run_ids(stores[1])[-1]
    assert latest != runs[1][0]
    assert shard_part(stores[1], None, written_by=latest) is not None and len(key_checks) == 1
    key_checks.clear()
    # what the trust rests on: a store that only claims its shard is caught by the key check
    liar_cfg = _config(
        tmp_path, 40, body.replace("grace_s: 5}", 'grace_s: 5, meta: {shard: "1/2"}}'), "l.yaml"
    )
    liar = str(tmp_path / "liar.db")  # says shard 1/2, holds every key
    assert cli(["run", "-c", str(liar_cfg), "--store", liar], env).returncode in (0, 1)
    assert shard_part(liar, None) is None and shard_part(liar, None, written_by="another-run") is None
    assert shard_part(liar, None, written_by=_run_ids(liar)[0]) is not None  # only a shard's run

    def status(out: str, code: int | None = 0, sig: int | None = None) -> ShardStatus:
        return ShardStatus(index=0, exit_code=code, signal=sig, stdout=out)

    summary = json.dumps({"run_id": "r-1", "counters": {}})
    assert _reported_run(status("warming up\n" + summary)) == "r-1"
    assert _reported_run(status(summary, code=1)) == "r-1"
    assert _reported_run(status(summary, code=None, sig=signal.SIGKILL)) is None
    assert _reported_run(status("not json")) is None
    assert _reported_run(status('{"run_id": 7}')) is None
    assert _reported_run(status('["r-1"]')) is None


def test_a_sharded_run_reads_its_fresh_stores_without_checking_keys(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process parent (spawned shards): the stores of a fresh ``run --shards 2`` are read
    without one key check; a second run into the same stores has each store's keys checked.
    The merged report is the fold's either way."""
    from click.testing import CliRunner

    import pyattacker.views.shard_report as shard_report
    from pyattacker.cli.main import cli as command

    cfg = _config(tmp_path, 30)
    for key, value in env.items():
        if os.environ.get(key) != value:
            monkeypatch.setenv(key, value)
    monkeypatch.setenv("PYATTACKER_SHARD_START", "spawn")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    real = shard_report._shard_totals
    key_checks: list[str] = []

    def counted(store: Any, run_id: Any, shard: int, shards: int) -> Any:
        key_checks.append(str(store.path))
        return real(store, run_id, shard, shards)

    monkeypatch.setattr(shard_report, "_shard_totals", counted)
    monkeypatch.setattr("pyattacker.cli.shard.fork_safe", lambda: False)  # reads here, counted
    stores = [str(tmp_path / "runs" / f"s.shard{i}of2.db") for i in range(2)]
    args = ["run", "-c", str(cfg), "--shards", "2", "--summary-format", "json"]
    for expected_checks, shown in ((0, {"succeeded": 30}), (2, {})):  # the re-run skips all 30
        key_checks.clear()
        result = CliRunner().invoke(command, args)
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        assert doc["merged_error"] is None and len(key_checks) == expected_checks, key_checks
        assert doc["merged"]["pipelines"]["by_state"] == shown
        folded = merge_stores(stores).to_dict(20)
        for part in ("pipelines", "tasks", "run_ids", "attempts_total"):
            assert doc["merged"][part] == folded[part], part


def test_unknown_executor_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"no shard executor named 'ray'.*local"):
        get_executor("ray")


@pytest.mark.parametrize("start", ["spawn", "fork"])
def test_local_executor_runs_a_job_and_cancels_by_pid(
    tmp_path: Path, env: dict[str, str], start: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))  # a forked child keeps this process's sys.path
    executor = get_executor("local", relay_stderr=False, grace_s=30.0, start=start)
    ok = executor.submit(ShardJob(index=0, count=1, argv=["--version"], cwd=str(tmp_path)))
    status = ok.wait(timeout=60)
    assert status.exit_code == 0 and status.signal is None and "pyattacker" in status.stdout
    body = 'run: {store: spin.db, concurrency: 2}\npipeline: {tasks: [{use: "audit_mod:slow"}]}\n'
    cfg = _config(tmp_path, 2000, body + "source: {kind: range, n: N}\n")
    keep = ("PYTHONPATH", "AUDIT_LOG", "PYATTACKER_HOME", "PYATTACKER_ONLY_PLUGINS")
    job = ShardJob(
        index=0,
        count=1,
        argv=["run", "-c", str(cfg), "--summary-format", "json"],
        env={k: env[k] for k in keep},
        cwd=str(tmp_path),
    )
    handle = executor.submit(job)
    assert isinstance(handle, LocalHandle if start == "spawn" else ForkedHandle)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and count_succeeded(tmp_path / "spin.db") < 2:
            time.sleep(0.05)
        assert handle.poll() is None, "the job ended on its own"
        ended = handle.cancel()  # SIGINT by pid: the run stops gracefully, resumable
    finally:
        if handle.poll() is None:
            os.kill(handle.pid, signal.SIGKILL)
            handle.wait(timeout=30)
    assert ended.exit_code == 130 and ended.signal is None
    assert json.loads(ended.stdout)["status"] == "interrupted"
    if start == "spawn":  # forked from pytest, the child logs through pytest's log capture
        assert "SIGINT received" in ended.stderr_tail


def _forked(body: Any) -> int:
    """Fork a child that runs ``body()`` and leaves through ``os._exit`` (never into pytest)."""
    pid = os.fork()
    if pid == 0:
        try:
            body()
        finally:
            os._exit(70)
    return pid


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_handle_reads_every_byte_without_threads() -> None:
    big = b"x" * 1_000_000  # far beyond a pipe's buffer: the handle must read while it waits
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()

    def child() -> None:
        os.close(out_r)
        os.close(err_r)
        os.write(err_w, b"line one\nbad \xff byte\npart")
        view = memoryview(big)
        while view:
            view = view[os.write(out_w, view) :]
        os.write(err_w, b"ial\nno newline at the end")
        os._exit(3)

    pid = _forked(child)
    os.close(out_w)
    os.close(err_w)
    relayed = io.StringIO()
    threads = threading.active_count()
    handle = ForkedHandle(
        ShardJob(index=1, count=2, argv=[]),
        pid,
        out_r,
        err_r,
        grace_s=5.0,
        tail_lines=10,
        relay=relayed,
        relay_lock=threading.Lock(),
    )
    status = handle.wait(timeout=60)
    assert threading.active_count() == threads
    assert status.exit_code == 3 and status.signal is None
    assert status.stdout == big.decode()
    lines = ["line one\n", "bad \ufffd byte\n", "partial\n", "no newline at the end"]
    assert status.stderr_tail == "".join(lines)  # as the stream ended, like a spawned shard's
    assert relayed.getvalue() == "".join(f"[shard 1/2] {line.rstrip()}\n" for line in lines)
    assert handle.poll() == status  # reaped once; later polls return the same status


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_handle_cancel_escalates_to_sigkill() -> None:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()

    def child() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a shard that ignores its grace period
        os.write(out_w, b"ready")
        time.sleep(120)

    pid = _forked(child)
    os.close(out_w)
    os.close(err_w)
    job = ShardJob(index=0, count=1, argv=[])
    handle = ForkedHandle(
        job, pid, out_r, err_r, grace_s=0.5, tail_lines=5, relay=None, relay_lock=threading.Lock()
    )
    try:
        deadline = time.monotonic() + 30
        while "ready" not in "".join(handle._output.stdout) and time.monotonic() < deadline:
            assert handle.poll() is None
            time.sleep(0.01)
        with pytest.raises(TimeoutError):
            handle.wait(timeout=0.1)
        status = handle.cancel()
    finally:
        if handle._rc is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    assert status.signal == signal.SIGKILL and status.code == 2 and status.stdout == "ready"


def test_auto_start_forks_only_when_it_is_safe(monkeypatch: pytest.MonkeyPatch) -> None:
    job = ShardJob(index=0, count=2, argv=[], env={"PYATACKER_SHARD": "0/2"})
    monkeypatch.setattr("pyattacker_plugins.executor_local.single_threaded", lambda: True)
    auto = LocalExecutor(start="auto")
    assert auto.forks(job) == sys.platform.startswith("linux")
    changed = ShardJob(index=0, count=2, argv=[], env={"PYTHONPATH": "/elsewhere"})
    assert not auto.forks(changed)  # a forked child has read its environment already
    assert not LocalExecutor(start="auto", python="/usr/bin/python3-other").forks(job)
    assert not LocalExecutor(start="spawn").forks(job)
    monkeypatch.setattr("pyattacker_plugins.executor_local.single_threaded", lambda: False)
    assert not auto.forks(job)
    monkeypatch.setenv("PYATTACKER_SHARD_START", "spawn")
    assert LocalExecutor().start == "spawn"
    monkeypatch.setenv("PYATTACKER_SHARD_START", "threads")
    with pytest.raises(ConfigError, match=r"PYATTACKER_SHARD_START: .*auto, fork, spawn.*'threads'"):
        LocalExecutor()


IMPORTS_MOD = """
import os, sys
from pyattacker import task

with open(os.environ["IMPORT_LOG"], "a") as fh:
    fh.write(f"{os.getpid()}\\n")
said = []

@task(name="echo")
def echo(value):
    if not said:
        said.append(print("echo in", os.environ["PYATACKER_SHARD"], file=sys.stderr))
    return value
"""


@pytest.mark.parametrize("start", ["", "spawn"])
def test_sharded_run_forks_its_shards_by_default(env: dict[str, str], tmp_path: Path, start: str) -> None:
    """A forked shard starts from the parent's imports; a spawned one imports everything again."""
    (tmp_path / "imports_mod.py").write_text(IMPORTS_MOD)
    log = tmp_path / "imports.log"
    body = 'run: {store: i.db}\npipeline: {tasks: [{use: "imports_mod:echo"}]}\nsource: {kind: range, n: N}\n'
    cfg = _config(tmp_path, 30, body, name="i.yaml")
    env = {**env, "IMPORT_LOG": str(log), "PYATTACKER_SHARD_START": start}
    result = cli(["run", "-c", str(cfg), "--shards", "2", "--summary-format", "json"], env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["merged"]["pipelines"]["by_state"] == {"succeeded": 30}
    assert [s["code"] for s in doc["shards"]] == [0, 0]
    for i in range(2):  # each shard's stderr is relayed, prefixed
        assert f"[shard {i}/2] echo in {i}/2\n" in result.stderr
    importers = log.read_text().split()
    shard_pids = {pid for s in doc["stores"] for _state, pid in _runs(Path(s))}
    assert len(shard_pids) == 2
    if start == "spawn":
        assert len(importers) == 3 and shard_pids < {int(p) for p in importers}
    elif sys.platform.startswith("linux"):
        assert len(importers) == 1 and int(importers[0]) not in shard_pids  # the parent's only


# -- the CLI ------------------------------------------------------------------------------------
def _report_json(env: dict[str, str], *stores: str) -> dict[str, Any]:
    result = cli(["report", *stores, "--json", "--run-id", "all"], env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _comparable(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "total": doc["pipelines"]["total"],
        "by_state": doc["pipelines"]["by_state"],
        "tasks": doc["tasks"],
        "attempts_total": doc["attempts_total"],
        "duplicates": doc["duplicates"],
    }


def test_sharded_run_equals_a_single_process_run(env: dict[str, str], tmp_path: Path) -> None:
    n = 200
    cfg = _config(tmp_path, n)
    single = cli(["run", "-c", str(cfg), "--store", "one.db", "--summary-format", "json"], env, cwd=tmp_path)
    assert single.returncode == 0, single.stderr
    sharded = cli(
        [
            "run",
            "-c",
            str(cfg),
            "--shards",
            "2",
            "--jobs",
            "2",
            "--store",
            "many.db",
            "--summary-format",
            "json",
        ],
        env,
        cwd=tmp_path,
    )
    assert sharded.returncode == 0, sharded.stderr
    doc = json.loads(sharded.stdout)  # exactly one JSON object
    stores = [str(tmp_path / f"many.shard{i}of2.db") for i in range(2)]
    assert doc["stores"] == stores and all(Path(s).exists() for s in stores)
    assert [s["code"] for s in doc["shards"]] == [0, 0]
    done = [s["summary"]["counters"]["pipelines_succeeded"] for s in doc["shards"]]
    assert sum(done) == n and all(d > 0 for d in done)
    assert doc["merged"]["pipelines"]["by_state"] == {"succeeded": n}
    assert [p["line"] for p in doc["capacity"]] == [
        "capacity of api-1 (8) split across 2 concurrent shards: 4+4",
        "capacity of api-2 (3) split across 2 concurrent shards: 2+1",
    ]
    # the merged view (report over a glob) equals the single-process store
    one = _report_json(env, str(tmp_path / "one.db"))
    many = _report_json(env, str(tmp_path / "many.shard*of2.db"))
    assert _comparable(many) == _comparable(one)
    a = merge_stores([str(tmp_path / "one.db")], "all")
    b = merge_stores(stores, "all")
    assert {k: r.state for k, r in a.rows.items()} == {k: r.state for k, r in b.rows.items()}
    assert {k: r.attempts_total for k, r in a.rows.items()} == {
        k: r.attempts_total for k, r in b.rows.items()
    }
    for i, store in enumerate(stores):  # every pipeline sits in the shard its key names
        assert all(shard_index(pid, 2) == i for pid in merge_stores([store], "all").rows)
    # export over the shard stores gives one merged row per pipeline
    out = tmp_path / "all.jsonl"
    exported = cli(["export", str(tmp_path / "many.shard*of2.db"), str(out)], env)
    assert exported.returncode == 0, exported.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["pipeline_id"] for r in rows) == sorted(a.rows)
    # each shard saw its own PYATACKER_SHARD and recorded it in the run's meta
    shards_seen = {line.split()[2] for line in _audit(tmp_path)}
    assert shards_seen == {"-", "0/2", "1/2"}
    for i, store in enumerate(stores):
        con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
        try:
            meta = json.loads(con.execute("select config_json from runs").fetchone()[0])["meta"]
        finally:
            con.close()
        assert meta["shard"] == f"{i}/2" and meta["capacity_share"] in ("0/2", "1/2")


def test_a_keyed_source_with_repeats_splits_like_a_single_run(env: dict[str, str], tmp_path: Path) -> None:
    """A JSONL source with explicit keys and repeats (each shard binds only its own keys' seeds):
    every ``key#r`` runs once, in the store its key names, as in a single process."""
    rows = [{"id": f"q{i}", "text": "x" * i} for i in range(30)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    body = CONFIG.replace('"audit_mod:first"', "echo").replace('"audit_mod:record"', "echo")
    body = body.replace(
        "source: {kind: range, n: N}", "source: {kind: jsonl, path: rows.jsonl, key_field: id, repeats: 2}"
    )
    cfg = tmp_path / "keyed.yaml"
    cfg.write_text(body)
    sharded = cli(
        ["run", "-c", str(cfg), "--shards", "2", "--store", "k.db", "--summary-format", "json"],
        env,
        cwd=tmp_path,
    )
    assert sharded.returncode == 0, sharded.stderr
    assert json.loads(sharded.stdout)["merged"]["pipelines"]["by_state"] == {"succeeded": 60}
    stores = [str(tmp_path / f"k.shard{i}of2.db") for i in range(2)]
    keys = [set(merge_stores([store], "all").rows) for store in stores]
    assert keys[0] | keys[1] == {f"q{i}#{r}" for i in range(30) for r in range(2)}
    assert all(keys) and not keys[0] & keys[1]
    for i, held in enumerate(keys):
        assert all(shard_index(pid, 2) == i for pid in held)
    single = cli(["run", "-c", str(cfg), "--store", "one.db", "--summary-format", "json"], env, cwd=tmp_path)
    assert single.returncode == 0, single.stderr
    one = merge_stores([str(tmp_path / "one.db")], "all").rows
    both = merge_stores(stores, "all").rows
    assert {k: r.state for k, r in both.items()} == {k: r.state for k, r in one.items()}


def test_text_summary_lines_and_full_capacity_option(env: dict[str, str], tmp_path: Path) -> None:
    cfg = _config(tmp_path, 30)
    result = cli(["run", "-c", str(cfg), "--shards", "2", "--jobs", "1"], env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("shard 0/2: exit 0  succeeded ") and lines[1].startswith("shard 1/2: exit 0")
    assert "capacity of api-1 (8) split across 1 concurrent shard: 8" in result.stdout
    assert "pipelines: total=30 succeeded=30" in result.stdout
    assert lines[-1] == "exit code: 0"
    full = cli(
        ["run", "-c", str(cfg), "--shards", "3", "--full-capacity-per-shard", "--store", "f.db"],
        env,
        cwd=tmp_path,
    )
    assert full.returncode == 0, full.stderr
    assert "capacity of api-1 (8) not split" in full.stdout
    assert "--capacity-share" not in full.stderr
    low = _config(tmp_path, 10, CONFIG.replace("capacity: 3", "capacity: 1"), name="low.yaml")
    warned = cli(
        ["run", "-c", str(low), "--shards", "2", "--jobs", "2", "--store", "w.db"], env, cwd=tmp_path
    )
    assert warned.returncode == 0, warned.stderr
    assert "api-2 allows 1 lease(s) but 2 shards run at once" in warned.stderr
    assert "capacity of api-2 (1) split across 2 concurrent shards: 1+1" in warned.stdout


def test_single_shard_mode_store_naming_and_env(env: dict[str, str], tmp_path: Path) -> None:
    cfg = _config(tmp_path, 40)
    auto = cli(["run", "-c", str(cfg), "--shard", "1/2", "--summary-format", "json"], env)
    assert auto.returncode == 0, auto.stderr
    data = json.loads(auto.stdout)
    assert data["store"] == str(tmp_path / "runs" / "s.shard1of2.db")  # run.store, suffixed
    got = {line.split()[0] for line in _audit(tmp_path)}
    keys = merge_stores([data["store"]], "all").rows
    assert len(got) == len(keys) == data["counters"]["pipelines_succeeded"] > 0
    assert all(shard_index(k, 2) == 1 for k in keys)
    assert {line.split()[2] for line in _audit(tmp_path)} == {"1/2"}
    explicit = cli(
        ["run", "-c", str(cfg), "--shard", "0/2", "--store", "mine.db", "--summary-format", "json"],
        env,
        cwd=tmp_path,
    )
    assert explicit.returncode == 0, explicit.stderr
    assert json.loads(explicit.stdout)["store"] == str(tmp_path / "mine.db")  # verbatim
    both = merge_stores([str(tmp_path / "mine.db"), data["store"]], "all")
    assert both.stats()["pipelines"]["total"] == 40 and both.duplicates == 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--shard", "0/2", "--shards", "2"], "mutually exclusive"),
        (["--shards", "1"], "--shards"),
        (["--shards", "2", "--jobs", "3"], "--jobs"),
        (["--jobs", "2"], "--jobs"),
        (["--executor", "local"], "--executor"),
        (["--full-capacity-per-shard"], "--full-capacity-per-shard"),
        (["--shard", "2/2"], "--shard"),
        (["--shard", "x"], "--shard"),
        (["--shard", "0/2", "--store", ":memory:"], "in memory"),
        (["--shards", "2", "--store", ":memory:"], "in memory"),
        (["--shards", "2", "--executor", "nope"], "no shard executor named 'nope'"),
        (["--shards", "2", "--store", "x.db", "PYATTACKER_SHARD_START=vfork"], "PYATTACKER_SHARD_START"),
    ],
)
def test_bad_shard_flags_exit_2(env: dict[str, str], tmp_path: Path, args: list[str], needle: str) -> None:
    cfg = _config(tmp_path, 5)
    env = {**env, **dict(a.split("=", 1) for a in args if "=" in a)}  # NAME=value: environment
    result = cli(["run", "-c", str(cfg), *(a for a in args if "=" not in a)], env, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert needle in result.stderr and "Traceback" not in result.stderr
    assert not _audit(tmp_path)


def test_a_failing_shard_decides_the_exit_code(env: dict[str, str], tmp_path: Path) -> None:
    body = CONFIG.replace('- {use: "audit_mod:first"}', '- {use: "audit_mod:fail_in_shard_1"}')
    cfg = _config(tmp_path, 40, body)
    result = cli(["run", "-c", str(cfg), "--shards", "2", "--summary-format", "json"], env, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    doc = json.loads(result.stdout)
    assert [s["code"] for s in doc["shards"]] == [0, 1] and doc["exit_code"] == 1
    assert doc["merged"]["failed_total"] == doc["shards"][1]["summary"]["counters"]["pipelines_failed"] > 0

    body = CONFIG.replace('- {use: "audit_mod:first"}', '- {use: "audit_mod:die_in_shard_1"}')
    cfg = _config(tmp_path, 40, body, name="die.yaml")
    crashed = cli(["run", "-c", str(cfg), "--shards", "2", "--store", "d.db"], env, cwd=tmp_path)
    assert crashed.returncode == 2, crashed.stderr
    assert "shard 0/2: exit 0" in crashed.stdout
    assert "shard 1/2: exit 2 (killed by SIGKILL; counts as exit 2)" in crashed.stdout
    assert "shard 1/2 failed: killed by SIGKILL" in crashed.stderr


def test_sigint_to_the_parent_then_resume_finishes_every_shard(env: dict[str, str], tmp_path: Path) -> None:
    n = 300
    cfg = _config(tmp_path, n)
    stores = [tmp_path / "runs" / f"s.shard{i}of2.db" for i in range(2)]
    args = ["-c", str(cfg), "--shards", "2", "--concurrency", "2"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyattacker", "run", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not all(count_succeeded(s) >= 3 for s in stores):
            time.sleep(0.05)
        assert all(count_succeeded(s) >= 3 for s in stores), "the shards made no progress"
        proc.send_signal(signal.SIGINT)  # by pid, to the parent only
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "resumable" in err
    assert "shard 0/2: exit 130" in out and "shard 1/2: exit 130" in out
    first = _audit(tmp_path)
    assert len(first) < 2 * n  # it really stopped early
    resumed = cli(["resume", *args, "--summary-format", "json"], env)
    assert resumed.returncode == 0, resumed.stderr
    doc = json.loads(resumed.stdout)
    assert [s["code"] for s in doc["shards"]] == [0, 0]
    assert sum(s["summary"]["counters"]["skipped"] for s in doc["shards"]) >= 6
    assert doc["merged"]["pipelines"]["by_state"] == {"succeeded": n}
    lines = _audit(tmp_path)
    tasks = sorted(" ".join(line.split()[:2]) for line in lines)
    assert tasks == sorted(f"{i} {t}" for i in range(n) for t in ("first", "second"))  # each once
    for line in lines:  # ... and always in the shard its key belongs to
        assert line.split()[2] in ("0/2", "1/2")


def test_executor_plugin_is_listed_as_active(env: dict[str, str]) -> None:
    result = cli(["plugins", "--json"], env)
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)["plugins"]}
    row = rows["executor-local"]
    assert row["status"] == "active" and row["builtin"]
    assert row["provides"] == {"shard_executors": ["local"]}


def _runs(store: Path) -> list[tuple[str, int]]:
    if not store.exists():
        return []
    try:
        con = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1)
        try:
            return [(str(r[0]), int(r[1])) for r in con.execute("select status, pid from runs")]
        finally:
            con.close()
    except sqlite3.Error:
        return []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_no_shard_outlives_a_killed_parent(env: dict[str, str], tmp_path: Path) -> None:
    """SIGKILL leaves the parent no chance to cancel: the shards notice and stop themselves."""
    cfg = _config(tmp_path, 2000)
    stores = [tmp_path / "runs" / f"s.shard{i}of2.db" for i in range(2)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyattacker", "run", "-c", str(cfg), "--shards", "2", "--concurrency", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not all(count_succeeded(s) >= 1 for s in stores):
            time.sleep(0.05)
        assert all(count_succeeded(s) >= 1 for s in stores), "the shards made no progress"
        pids = [pid for s in stores for _status, pid in _runs(s)]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids), "a shard outlived its parent"
        assert [status for s in stores for status, _pid in _runs(s)] == ["interrupted", "interrupted"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_resume_with_another_shard_count_is_refused(env: dict[str, str], tmp_path: Path) -> None:
    """A shard resumes from its own store only, and a pipeline's shard depends on N: a resume
    with another N (or none) would find nothing and send every task again. It is refused, naming
    the N whose stores are there; a `run` with another N only warns (it is a fresh run)."""
    n = 20
    cfg = _config(tmp_path, n)
    first = cli(["run", "-c", str(cfg), "--shards", "2"], env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    done = sorted(_audit(tmp_path))
    assert len(done) == 2 * n
    for args, asked in (
        (["--shards", "3"], "resume --shards 3: no store of a 3-shard run exists"),
        ([], "resume: store"),
        (["--shard", "1/3"], "resume --shard 1/3: no store of a 3-shard run exists"),
        (["--shards", "3", "--jobs", "1", "--retry-succeeded"], "resume --shards 3"),
    ):
        refused = cli(["resume", "-c", str(cfg), *args], env, cwd=tmp_path)
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
        assert asked in refused.stderr and "Traceback" not in refused.stderr
        assert "a run with --shards 2 (" in refused.stderr and "resume with --shards 2" in refused.stderr
    ran = cli(["run", "-c", str(cfg), "--resume", "--shards", "4"], env, cwd=tmp_path)
    assert ran.returncode == 2 and "resume --shards 4" in ran.stderr, ran.stderr
    assert sorted(_audit(tmp_path)) == done  # nothing was sent again
    stores = sorted(p.name for p in (tmp_path / "runs").glob("s.shard*.db"))
    assert stores == ["s.shard0of2.db", "s.shard1of2.db"]

    again = cli(["resume", "-c", str(cfg), "--shards", "2", "--summary-format", "json"], env, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert sum(s["summary"]["counters"]["skipped"] for s in json.loads(again.stdout)["shards"]) == n
    assert sorted(_audit(tmp_path)) == done

    fresh = cli(["run", "-c", str(cfg), "--shards", "3", "--store", "runs/s.db"], env, cwd=tmp_path)
    assert fresh.returncode == 0, fresh.stderr
    assert "stores of another shard count exist" in fresh.stderr and "`resume --shards 2`" in fresh.stderr


def _pid_lines(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def _wait_for(check: Any, what: str, timeout: float = 90) -> None:
    """Hang guard: poll ``check()`` until true (no timing is asserted)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not check():
        time.sleep(0.05)
    assert check(), what


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_a_third_interrupt_kills_shards_that_ignore_signals(
    env: dict[str, str], tmp_path: Path, start: str
) -> None:
    """A shard that stops on no signal used to keep the parent waiting whatever the user pressed
    (its children are in their own sessions, out of the terminal's reach). The third Ctrl-C
    kills the shards still running; they count as interrupted (130, resumable)."""
    body = CONFIG.replace('- {use: "audit_mod:first"}', '- {use: "audit_mod:stubborn"}')
    cfg = _config(tmp_path, 20, body)
    stuck, signals = tmp_path / "audit.log.stuck", tmp_path / "audit.log.signals"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyattacker", "run", "-c", str(cfg), "--shards", "2", "--concurrency", "1"],
        env={**env, "PYATTACKER_SHARD_START": start},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pids: list[int] = []
    try:
        _wait_for(lambda: len(set(_pid_lines(stuck))) == 2, "both shards should block in the task")
        pids = sorted(set(_pid_lines(stuck)))
        for nth in (1, 2):  # forwarded one by one; each shard notes it and goes on
            proc.send_signal(signal.SIGINT)
            _wait_for(
                lambda nth=nth: all(_pid_lines(signals).count(p) >= nth for p in pids),
                f"interrupt {nth} should reach both shards",
            )
        assert proc.poll() is None and all(_alive(p) for p in pids)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, (out, err)
        for i in range(2):
            assert f"shard {i}/2: exit 130 (killed by SIGKILL at interrupt 3" in out, out
        assert "Traceback" not in err and "failed" not in err
        _wait_for(lambda: not any(_alive(p) for p in pids), "the killed shards should be gone")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_watch_of_a_shard_store_pattern(env: dict[str, str], tmp_path: Path) -> None:
    """`watch` shows one store: a pattern used to be taken as a file name ("does not exist").
    One match is watched; several are refused, naming them and `report` (the merged view)."""
    cfg = _config(tmp_path, 10)
    assert cli(["run", "-c", str(cfg), "--shards", "2"], env, cwd=tmp_path).returncode == 0
    watch = ["watch", "--iterations", "1", "--no-clear"]
    several = cli([*watch, "runs/s.shard*of2.db"], env, cwd=tmp_path)
    assert several.returncode == 2, several.stderr
    assert "matches 2: runs/s.shard0of2.db, runs/s.shard1of2.db" in several.stderr
    assert "pyattacker report 'runs/s.shard*of2.db'" in several.stderr and "Traceback" not in several.stderr
    one = cli([*watch, "runs/s.shard1*.db"], env, cwd=tmp_path)
    assert one.returncode == 0 and "status=completed" in one.stdout, one.stderr
    none = cli([*watch, "runs/s.shard*of3.db"], env, cwd=tmp_path)
    assert none.returncode == 2 and "matches no file" in none.stderr, none.stderr


def test_ctrl_c_while_the_merged_report_is_read_still_says_how_the_shards_ended(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Once every shard has ended, a Ctrl-C during the merged report lost the per-shard lines
    ("Aborted.", exit 130). The shards' outcome and exit code stand; the report says how to get
    the merged view. (The interrupt is injected where the merge is read, in the parent only.)"""
    (tmp_path / "sitecustomize.py").write_text(
        "import os\n"
        "if os.environ.get('INTERRUPT_MERGE') and not os.environ.get('PYATACKER_SHARD'):\n"
        "    import pyattacker.cli.shard as m\n"
        "    def _interrupted(self):\n"
        "        raise KeyboardInterrupt\n"
        "    m._Merge.result = _interrupted\n"
    )
    cfg = _config(tmp_path, 12)
    result = cli(["run", "-c", str(cfg), "--shards", "2"], {**env, "INTERRUPT_MERGE": "1"}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("shard 0/2: exit 0") and lines[1].startswith("shard 1/2: exit 0")
    assert "merged report: unavailable (interrupted before it was read; `pyattacker report '" in result.stdout
    assert "*" in result.stdout and lines[-1] == "exit code: 0" and "Traceback" not in result.stderr
