"""``pyattacker run|resume --shards N [--jobs J]``: run every shard through a shard executor.

The parent validates the config once (a bad config is one exit 2, not N), plans how each
resource's capacity is shared by the shards that run at the same time, hands each shard to the
executor as ``pyattacker run -c cfg --shard i/N --store <base>.shard{i}ofN.db
--summary-format json`` plus every run flag the user gave, then prints one line per shard and
the merged report of the shard stores (the same view as ``report``; each store is folded as
soon as its shard ends, so the report is out right after the last shard).

Exit code: ``INTERRUPTED`` (130) if any shard was interrupted (or never started because of the
interrupt), else the highest shard code; a shard killed by a signal, or one that printed no
JSON summary, counts as ``INTERNAL_ERROR`` (2) and is named in the output.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from pyattacker.cli.common import check_backend_flag, flag_overrides, out, warn
from pyattacker.cli.process_end import request_fast_end
from pyattacker.cli.report_text import report_text
from pyattacker.errors import ConfigError, ExitCode, PyAttackerError
from pyattacker.shard.budget import (
    BUDGET_ENV,
    BUDGET_KEEP_ENV,
    longest_window,
    prepare_shared_budget,
    shard_budget_path,
)
from pyattacker.shard.executor import (
    FORCE_AFTER,
    ShardExecutor,
    ShardJob,
    ShardStatus,
    executor_note,
    get_executor,
    parse_executor_options,
    run_shards,
)
from pyattacker.shard.forking import ForkedCall, ForkedCallError, fork_safe
from pyattacker.shard.plan import (
    SHARD_ENV,
    check_resume_layout,
    is_memory_store,
    shard_layouts,
    shard_store_path,
    shard_store_pattern,
    split_capacity,
)

if TYPE_CHECKING:
    from pyattacker.views.fold import MergedReport
    from pyattacker.views.shard_report import ShardPart
    from pyattacker.views.store_report import TaskCounts

    #: ``shard_task_counts``: the run counted, and its task counts
    _Counts = tuple[str | None, TaskCounts]

__all__ = ["CapacityPlan", "capacity_plan", "check_layout", "child_argv", "run_sharded"]

#: run flags forwarded to every shard with their value
VALUE_FLAGS: dict[str, str] = {
    "limit": "--limit",
    "concurrency": "--concurrency",
    "max_admitted": "--max-admitted",
    "journal": "--journal",
    "label": "--label",
    "stop_after_failures": "--stop-after-failures",
    "artifact_backend": "--artifact-backend",
}
#: run switches forwarded to every shard when set
SWITCHES: dict[str, str] = {
    "resume": "--resume",
    "retry_succeeded": "--retry-succeeded",
    "fresh_restart": "--fresh-restart",
    "strict_leases": "--strict-leases",
    "no_write_behind": "--no-write-behind",
    "no_signals": "--no-signals",
    "strict_env": "--strict-env",
}


@dataclass(frozen=True)
class CapacityPlan:
    """How one resource's capacity is shared by the shards running at the same time."""

    pool: str
    resource: str
    capacity: int
    shares: list[int]  # per slot; empty = every shard gets the full capacity

    @property
    def oversubscribed(self) -> bool:
        """Fewer leases than concurrent shards: each still gets 1, so together they exceed it."""
        return bool(self.shares) and sum(self.shares) > self.capacity

    def describe(self) -> str:
        if not self.shares:
            return (
                f"capacity of {self.resource} ({self.capacity}) not split: every shard uses all of it"
                " (--full-capacity-per-shard)"
            )
        n = len(self.shares)
        line = (
            f"capacity of {self.resource} ({self.capacity}) split across {n} concurrent"
            f" shard{'s' if n != 1 else ''}: " + "+".join(str(s) for s in self.shares)
        )
        if self.oversubscribed:
            line += f" (= {sum(self.shares)}, more than the capacity)"
        return line

    def to_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "resource": self.resource,
            "capacity": self.capacity,
            "shares": list(self.shares),
            "split": bool(self.shares),
            "oversubscribed": self.oversubscribed,
            "line": self.describe(),
        }


def capacity_plan(pools: dict[str, Any], jobs: int, *, full: bool = False) -> list[CapacityPlan]:
    """One ``CapacityPlan`` per declared resource (``pools``: ``CheckedConfig.pools``)."""
    plans: list[CapacityPlan] = []
    for name, pdef in pools.items():
        for i, res in enumerate(pdef.resources):
            capacity = int(res.get("capacity", 1))
            rid = res.get("id") or f"{name}[{i}]"
            plans.append(CapacityPlan(name, rid, capacity, [] if full else split_capacity(capacity, jobs)))
    return plans


def child_argv(
    flags: dict[str, Any],
    *,
    command: str,
    config: str,
    index: int,
    count: int,
    store: str,
    share: tuple[int, int] | None,
) -> list[str]:
    """The pyattacker command line of one shard (without the program)."""
    argv = [
        command,
        "-c",
        config,
        "--shard",
        f"{index}/{count}",
        "--store",
        store,
        "--summary-format",
        "json",
    ]
    for key, flag in VALUE_FLAGS.items():
        if flags.get(key) is not None:
            argv += [flag, str(flags[key])]
    for key, flag in SWITCHES.items():
        if flags.get(key):
            argv.append(flag)
    if share is not None:
        argv += ["--capacity-share", f"{share[0]}/{share[1]}"]
    return argv


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass
class _Outcome:
    index: int
    count: int
    store: str
    slot: int | None
    status: ShardStatus | None
    summary: dict[str, Any] | None
    code: int
    problem: str | None

    def line(self) -> str:
        head = f"shard {self.index}/{self.count}: exit {self.code}"
        if self.problem is not None:
            return f"{head} ({self.problem})  store {self.store}"
        c = (self.summary or {}).get("counters", {})
        return (
            f"{head}  succeeded {c.get('pipelines_succeeded', 0)}  failed {c.get('pipelines_failed', 0)}"
            f"  interrupted {c.get('pipelines_interrupted', 0)}  skipped {c.get('skipped', 0)}"
            f"  attempts {c.get('attempts', 0)}  store {self.store}"
        )

    def to_dict(self) -> dict[str, Any]:
        st = self.status
        return {
            "index": self.index,
            "shard": f"{self.index}/{self.count}",
            "store": self.store,
            "slot": self.slot,
            "code": self.code,
            "exit_code": None if st is None else st.exit_code,
            "signal": None if st is None else st.signal_name,
            "problem": self.problem,
            "summary": self.summary,
        }


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _summary(status: ShardStatus) -> dict[str, Any] | None:
    """The JSON summary a shard printed last on stdout (None: none, or not an object)."""
    try:
        parsed = json.loads(_last_line(status.stdout) or "null")
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _reported_run(status: ShardStatus) -> str | None:
    """The id of the run a shard that exited on its own says it made (None: it said none)."""
    if status.signal is not None or status.exit_code is None:
        return None
    run_id = (_summary(status) or {}).get("run_id")
    return run_id if isinstance(run_id, str) else None


def _outcome(
    index: int,
    count: int,
    store: str,
    slot: int | None,
    status: ShardStatus | None,
    *,
    forced: bool = False,
) -> _Outcome:
    """What one shard's end stands for. ``forced``: the parent killed it at the third interrupt
    (it had ignored two), which is the user's stop, so 130 like any interrupted shard."""
    if status is None and slot is None:
        return _Outcome(
            index, count, store, slot, None, None, ExitCode.INTERRUPTED, "not started: interrupted"
        )
    if status is None:
        lost = "started, but its status was lost"
        return _Outcome(index, count, store, slot, None, None, ExitCode.INTERNAL_ERROR, lost)
    if forced and (status.signal is not None or status.exit_code is None):
        why = (
            f"killed by {status.signal_name} at interrupt {FORCE_AFTER}: it had not stopped on the"
            f" first {FORCE_AFTER - 1}; resumable"
        )
        return _Outcome(index, count, store, slot, status, None, ExitCode.INTERRUPTED, why)
    if status.signal is not None or status.exit_code is None:
        why = f"killed by {status.signal_name}" if status.signal is not None else "no exit status"
        return _Outcome(
            index, count, store, slot, status, None, ExitCode.INTERNAL_ERROR, f"{why}; counts as exit 2"
        )
    summary = _summary(status)
    if summary is not None:
        return _Outcome(index, count, store, slot, status, summary, status.exit_code, None)
    err = _last_line(status.stderr_tail)
    if status.exit_code in (ExitCode.OK, ExitCode.FAILED):
        why = "no JSON summary on stdout; counts as exit 2"
        return _Outcome(index, count, store, slot, status, None, ExitCode.INTERNAL_ERROR, why)
    return _Outcome(index, count, store, slot, status, None, status.exit_code, err or "failed")


def _exit_code(outcomes: list[_Outcome]) -> int:
    codes = [o.code for o in outcomes]
    return ExitCode.INTERRUPTED if ExitCode.INTERRUPTED in codes else max(codes, default=ExitCode.OK)


class _Merge:
    """The merged report of the shard stores, built while the run goes on: each shard's store
    is read as soon as that shard ends, so after the last one only its own store is read.

    Where the parent may fork (``fork_safe``), each store is read by two forked children, one
    for the task counts (``shard_task_counts``) and one for the rest: stores of shards that end
    together are read on both cores at once instead of one after the other, and the last
    store's read, which the command's end waits for, is split between them.

    A store that provably holds only its shard's pipelines is reduced to its aggregates
    (``shard_part``), so the report holds about 8 bytes per pipeline, whatever the run's size;
    if any store is not (another run wrote into it), the stores are folded at the end instead.
    A store whose only run is the one its shard reported (``_reported_run``) is read from its
    SQL totals, without checking each key's shard again (``shard_part``'s ``written_by``), which
    shortens the read the command's end waits for.
    """

    def __init__(self, stores: list[str], run_id: str | None, *, fork: bool | None = None) -> None:
        self.stores = stores
        self.run_id = run_id
        self.fork = fork  # None: whether ``fork_safe()`` at each read (a spawning executor adds threads)
        self.parts: dict[int, ShardPart | None] = {}
        #: the run each ended shard reported: its store's read may skip the per-key check
        self.written_by: dict[int, str] = {}
        self.reading: dict[int, tuple[ForkedCall[ShardPart | None], ForkedCall[_Counts | None]]] = {}
        self.why: str | None = None

    def _present(self, index: int) -> bool:
        from pyattacker.store.location import scheme_of  # start-up: loaded once a shard has ended

        store = self.stores[index]
        return scheme_of(store) not in (None, "file") or os.path.exists(store)

    def add(self, index: int, written_by: str | None = None) -> None:
        """Start reading shard ``index``'s store if it exists (in forked children if allowed).
        ``written_by``: the run the shard reported it made (``shard_part``)."""
        # start-up: `run` without --shards imports this module and never merges
        from pyattacker.views.shard_report import shard_part, shard_task_counts

        if self.why is not None or index in self.parts or index in self.reading or not self._present(index):
            return
        if written_by is not None:
            self.written_by[index] = written_by
        if fork_safe() if self.fork is None else self.fork:
            store = self.stores[index]
            read = partial(shard_part, task_counts=False, written_by=written_by)
            try:
                part = ForkedCall(read, store, self.run_id)
            except OSError:  # no process to spare: read it here
                pass
            else:
                try:
                    counts = ForkedCall(shard_task_counts, store, self.run_id)
                except OSError:
                    part.cancel()
                else:
                    self.reading[index] = (part, counts)
                    return
        self._read_here(index)

    def _read_here(self, index: int) -> None:
        from pyattacker.views.shard_report import shard_part  # start-up: as in add()

        try:
            self.parts[index] = shard_part(
                self.stores[index], self.run_id, written_by=self.written_by.get(index)
            )
        except Exception as exc:  # called inside the shard loop: never let it stop the other shards
            self.parts[index] = None
            if self.why is None:
                self.why = f"{type(exc).__name__}: {exc}"

    def _collect(self) -> None:
        """Wait for the forked reads in shard order. A read that failed in its child (an error,
        a result that does not pickle, a killed child) is done again here, so what is reported
        is what an in-process read says; after the first error the other reads are stopped."""
        for index in sorted(self.reading):
            if self.why is not None:
                break
            part_call, counts_call = self.reading.pop(index)
            try:
                part = part_call.result()
                counts = counts_call.result()
            except ForkedCallError:
                counts_call.cancel()
                self._read_here(index)
                continue
            if part is None:
                self.parts[index] = None
            elif counts is not None and counts[0] == part.report.sources[0].run_id:
                part.report.task_counts = counts[1]
                self.parts[index] = part
            else:  # the halves saw different runs (the store changed between them): read it whole
                self._read_here(index)
        self.close()

    def close(self) -> None:
        """Stop the reads still running (after an error or an interrupt)."""
        while self.reading:
            for call in self.reading.popitem()[1]:
                call.cancel()

    def result(self) -> tuple[Any, str | None]:
        """The report over every shard store that exists (None and why, when there is none)."""
        from pyattacker.views.merge import merge_stores  # start-up: as in add()
        from pyattacker.views.shard_report import shards_report

        for index in range(len(self.stores)):  # stores of shards that did not run this time
            self.add(index)
        self._collect()
        if self.why is not None:
            return None, self.why
        if not self.parts:
            return None, "no shard store was written"
        indexes = sorted(self.parts)
        try:
            parts = [self.parts[i] for i in indexes]
            if all(part is not None for part in parts):
                combined = shards_report([part for part in parts if part is not None])
                if combined is not None:
                    return combined, None
            return merge_stores([self.stores[i] for i in indexes], self.run_id), None
        except (PyAttackerError, OSError) as exc:
            return None, f"{type(exc).__name__}: {exc}"


def check_layout(base: str, count: int, *, resuming: bool) -> str | None:
    """Compare ``--shards count`` with the stores already beside ``base``.

    A resume that would find none of its N stores while another N's (or an unsharded run's)
    exist is refused (``check_resume_layout``): it would run every pipeline again. A ``run``
    is a fresh run by definition, so it only gets the warning returned here: the other stores'
    pipelines will run again, and ``resume`` with their N would continue them instead.
    """
    if resuming:
        check_resume_layout(base, count, f"--shards {count}")
        return None
    layouts = shard_layouts(base)
    if not layouts or count in layouts:
        return None
    others = ", ".join(base if n == 1 else shard_store_pattern(base, n) for n in layouts)
    counts = " or ".join("`resume` without --shards" if n == 1 else f"`resume --shards {n}`" for n in layouts)
    return (
        f"stores of another shard count exist ({others}); this run does not read them, so their"
        f" pipelines run again into {shard_store_pattern(base, count)} (to continue them instead:"
        f" {counts})"
    )


@dataclass(frozen=True)
class _Sharding:
    """What the parent settled before starting any shard: how many, where, with what share."""

    count: int
    jobs: int
    executor: str
    base: str
    stores: list[str]
    plans: list[CapacityPlan]
    full: bool  # --full-capacity-per-shard
    resuming: bool
    command: str  # run | resume
    config_path: str
    budget: str | None = None  # PYATTACKER_SHARED_BUDGET of every shard (rate-limited pools only)
    budget_keep_s: float | None = None  # how long a grant counts (the longest window)


def run_sharded(flags: dict[str, Any], *, resume: bool) -> None:
    """The ``--shards N`` mode of ``run`` / ``resume`` (see the module docstring)."""
    sharding, executor = _prepare(flags, resume)
    outcomes, merged, why = _run_all(sharding, executor, flags)
    code = _exit_code(outcomes)
    note = executor_note(executor)
    if flags["summary_format"] == "json":
        _print_json(sharding, outcomes, merged, why, code, note)
    else:
        _print_text(sharding, outcomes, merged, why, code, note)
    for o in outcomes:
        if o.problem is not None and o.code != ExitCode.INTERRUPTED:
            warn(f"shard {o.index}/{sharding.count} failed: {o.problem}")
    if code == ExitCode.INTERRUPTED:
        warn(
            f"interrupted: every unfinished pipeline is resumable (run `pyattacker resume"
            f" --shards {sharding.count}` with the same flags)"
        )
    request_fast_end()  # the tasks ran in the shards: nothing here needs the teardown
    raise SystemExit(code)


@contextmanager
def shard_env_preview(count: int) -> Iterator[None]:
    """``PYATACKER_SHARD`` set while the parent reads the config, when the environment has none.

    The parent only checks the config; each shard reads it again with its own ``I/N``, which is
    what ``${PYATACKER_SHARD}`` means. Unset here, ``--strict-env`` would refuse a config that
    every shard accepts (and without it, warn about a variable every shard has)."""
    if SHARD_ENV in os.environ:
        yield
        return
    os.environ[SHARD_ENV] = f"0/{count}"
    try:
        yield
    finally:
        os.environ.pop(SHARD_ENV, None)


def _prepare(flags: dict[str, Any], resume: bool) -> tuple[_Sharding, ShardExecutor]:
    """Validate once in the parent (a bad config is one exit 2, not N), plan the stores and the
    capacity shares, and say so on stderr."""
    # start-up: the config layer is heavy, and `--help` imports this module
    from pyattacker.config.build import build, load_config, resolve_store

    count: int = flags["shards"]
    jobs: int = flags["jobs"] if flags["jobs"] is not None else min(count, _cpu_count())
    if jobs > count:
        raise ConfigError(f"--jobs: at most the number of shards ({count}), got {jobs}")
    check_backend_flag(flags["artifact_backend"])
    with shard_env_preview(count):
        loaded = load_config(flags["config_path"], strict_env=flags["strict_env"])
    for warning in loaded.warnings:
        warn(warning)
    # validates every section and flag and checks the dataset exists: one exit 2, before any child
    built = build(loaded, flag_overrides(flags, resume), limit=flags["limit"])
    for note in built.checked.notes:
        warn(note)
    base = resolve_store(built.checked, flags["store"])
    if is_memory_store(base):
        raise ConfigError(
            f"--shards: store {base!r} is in memory; shards need stores that outlive their processes"
            " (set --store or run.store to a file)"
        )
    resuming = resume or bool(flags["resume"])
    layout_warning = check_layout(base, count, resuming=resuming)
    executor = get_executor(flags["executor"] or "local", **parse_executor_options(flags["executor_options"]))
    full = bool(flags["full_capacity_per_shard"])
    resources = [res for p in built.checked.pools.values() for res in p.resources]
    sharding = _Sharding(
        count=count,
        jobs=jobs,
        executor=flags["executor"] or "local",
        base=base,
        stores=[shard_store_path(base, i, count) for i in range(count)],
        plans=capacity_plan(built.checked.pools, jobs, full=full),
        full=full,
        resuming=resuming,
        command="resume" if resume else "run",
        config_path=str(loaded.path),
        budget=prepare_shared_budget(resources, shard_budget_path(base, count)),
        budget_keep_s=longest_window(resources),
    )
    if sharding.budget is not None:
        where = sharding.budget.removeprefix("file:")
        if sharding.executor != "local":  # it may share the budget its own way (Ray: an actor)
            where += f" (unless the {sharding.executor} executor shares it otherwise: see its summary)"
        warn(f"one rate budget for all shards: {where}")
    for plan in sharding.plans:
        if plan.oversubscribed:
            warn(
                f"{plan.resource} allows {plan.capacity} lease(s) but {jobs} shards run at once and each"
                f" needs at least 1, so together they may hold {sum(plan.shares)}; lower --jobs to stay"
                " within the endpoint's limit"
            )
    if layout_warning is not None:
        warn(layout_warning)
    if flags["progress"]:
        warn("--progress is ignored with --shards (watch a shard with `pyattacker watch <shard store>`)")
    warn(
        f"running {count} shards, {jobs} at a time, with the {sharding.executor} executor"
        f" into {shard_store_pattern(base, count)}"
    )
    return sharding, executor


def _run_all(
    sharding: _Sharding, executor: ShardExecutor, flags: dict[str, Any]
) -> tuple[list[_Outcome], MergedReport | None, str | None]:
    """Run every shard through ``executor``, reading each store as its shard ends; the shards'
    outcomes and the merged report (None and why, when there is none)."""
    count, stores = sharding.count, sharding.stores

    def make_job(index: int, slot: int) -> ShardJob:
        argv = child_argv(
            flags,
            command=sharding.command,
            config=sharding.config_path,
            index=index,
            count=count,
            store=stores[index],
            share=None if sharding.full else (slot, sharding.jobs),
        )
        env = {SHARD_ENV: f"{index}/{count}"}
        if sharding.budget is not None:
            env[BUDGET_ENV] = sharding.budget
            env[BUDGET_KEEP_ENV] = repr(sharding.budget_keep_s)
        return ShardJob(index=index, count=count, argv=argv, env=env, cwd=os.getcwd())

    # a resume's own run holds only what it re-ran: show every run of the shard stores instead
    merge = _Merge(stores, "all" if sharding.resuming else None)
    try:
        try:
            run = run_shards(
                executor,
                count,
                sharding.jobs,
                make_job,
                on_finish=lambda status: merge.add(status.index, _reported_run(status)),
                forward_signals=not flags["no_signals"],
            )
        finally:
            close = getattr(executor, "close", None)
            if callable(close):
                close()
        outcomes = [
            _outcome(i, count, stores[i], run.slots.get(i), run.statuses.get(i), forced=i in run.forced)
            for i in range(count)
        ]
        try:
            merged, why = merge.result()
        except KeyboardInterrupt:  # the shards are done: say how they ended, not just "Aborted."
            pattern = shlex.quote(shard_store_pattern(sharding.base, count))
            merged, why = None, f"interrupted before it was read; `pyattacker report {pattern}` shows it"
    finally:
        merge.close()  # only after an exception: no forked read outlives the parent's command
    return outcomes, merged, why


def _print_json(
    sharding: _Sharding,
    outcomes: list[_Outcome],
    merged: MergedReport | None,
    why: str | None,
    code: int,
    note: str | None,
) -> None:
    doc = {
        "shards": [o.to_dict() for o in outcomes],
        "jobs": sharding.jobs,
        "executor": sharding.executor,
        "executor_note": note,
        "capacity": [p.to_dict() for p in sharding.plans],
        "stores": sharding.stores,
        "merged": None if merged is None else merged.to_dict(20),
        "merged_error": why,
        "exit_code": code,
    }
    out(json.dumps(doc, default=str, sort_keys=True))


def _print_text(
    sharding: _Sharding,
    outcomes: list[_Outcome],
    merged: MergedReport | None,
    why: str | None,
    code: int,
    note: str | None,
) -> None:
    for o in outcomes:
        out(o.line())
    if note is not None:
        out(f"{sharding.executor} executor: {note}")
    for plan in sharding.plans:
        out(plan.describe())
    if merged is not None:
        scope = "every run (resume)" if sharding.resuming else "this run"
        out(f"merged report of {len(merged.sources)} shard store(s), {scope}:")
        for line in report_text(merged, 0):
            out("  " + line)
    else:
        out(f"merged report: unavailable ({why})")
    out(f"exit code: {code}")
