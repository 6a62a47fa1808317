"""The store contract: the ``Store`` protocol, ``StoreBase`` with every optional read, openers.

A store applies a ``Batch`` atomically (``commit``) and answers reads. All methods are
synchronous on purpose: a critical write must not be interruptible by task cancellation.
Everything fancier (group commit, write-behind) lives in the kernel's recorder, so a store
only has to be correct, not clever.

``StoreBase`` is what the kernel holds: it implements every optional read on top of the
required ones (``page`` above all), so the engine and the views call methods and never ask
whether a store has one. A store overrides an optional read only to make it faster (SQLite
answers them in SQL); the contract suite (``pyattacker.testing``) checks each override agrees
with the default. A store that only satisfies the ``Store`` protocol (not a ``StoreBase``) is
adapted once, when it is opened (``adapt_store``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from typing import Any, ClassVar, Protocol, runtime_checkable

import msgspec

from pyattacker.errors import ConfigError, PluginError, StoreFeatureUnsupported
from pyattacker.model import (
    ArtifactRecord,
    Batch,
    HandoffRecord,
    LogRecord,
    MetricPoint,
    MetricRecord,
    NoteRecord,
    PipelineRecord,
    ResourceRecord,
    RunRecord,
)
from pyattacker.plugins.paging import PAGE_KINDS, iter_rows
from pyattacker.plugins.run_notes import config_note
from pyattacker.plugins.store_queries import (
    FailureCount,
    PipelineQuery,
    TimeBucket,
    bucket_attempts,
    count_failures,
    select_pipelines,
)
from pyattacker.plugins.store_stats import compute_stats

__all__ = [
    "OPTIONAL_READS",
    "PAGE_KINDS",
    "REQUIRED_METHODS",
    "Store",
    "StoreBase",
    "StoreOpener",
    "StoreOpenerBase",
    "Totals",
    "adapt_store",
    "iter_rows",
    "select_logs",
    "location_path",
    "split_scheme",
]

#: ``({state: count}, sorted durations in ms, sum of attempts_total)`` of a run's pipelines
Totals = tuple[dict[str, int], Sequence[float], int]
#: ``(pipeline_id, state, started_at, finished_at, attempts_total)``
Summary = tuple[str, str, float | None, float | None, int]


@runtime_checkable
class Store(Protocol):
    """What every store provides (``StoreBase`` marks which of these it has defaults for)."""

    #: the location it was opened from (for messages and reports)
    location: str
    read_only: bool

    def commit(self, batch: Batch) -> None:
        """Apply every row of ``batch`` in one transaction, or none of them and raise.
        Appended attempts and events get their ``attempt_id`` / ``event_id`` assigned."""

    def page(
        self,
        kind: str,
        *,
        run_id: str | None = None,
        pipeline_id: str | None = None,
        state: str | None = None,
        after: tuple[Any, ...] | None = None,
        limit: int = 1000,
    ) -> list[Any]:
        """Up to ``limit`` rows of ``kind`` in ``PAGE_KINDS[kind]`` order, strictly after ``after``.
        ``run_id`` filters by owning run (pipelines, tasks) or writing run (attempts, events);
        ``state`` applies to pipelines and tasks; ``pipeline_id`` to every kind. An unknown
        kind raises ``ValueError``. Rows are copies (a caller may change them)."""

    def runs(self) -> list[RunRecord]:
        """Every run, oldest first (by ``started_at``)."""

    def interrupt_running(self, run_id: str, now: float) -> int:
        """Mark every ``running`` pipeline, task and run not owned by ``run_id`` interrupted.
        Called at the start of each writing run (the store's writer lock proves whoever left
        those rows is gone). Returns the number of pipelines changed."""

    def metrics(self, run_id: str | None = None, pipeline_id: str | None = None) -> list[MetricRecord]:
        """Latest application values (``pipeline_id=''`` is the run scope)."""

    def metric_points(
        self, run_id: str, pipeline_id: str, key: str | None = None, after_step: int = -1, limit: int = 1000
    ) -> list[MetricPoint]:
        """Points of a pipeline (by step, key) after ``after_step``, idempotent by ``op_id``."""

    def resources(self, run_id: str | None = None) -> list[ResourceRecord]: ...

    def lookup_pipelines(self, ids: Sequence[str]) -> dict[str, PipelineRecord]:
        """The stored rows among ``ids`` (missing ids are absent from the result)."""

    def get_artifact(self, pipeline_id: str, seq: int) -> ArtifactRecord | None:
        """The artifact at a slot (``seq=-1`` is the seed); payload as stored, not hydrated."""

    def get_run(self, run_id: str) -> RunRecord | None: ...

    def close(self) -> None: ...


#: what a store must implement itself (``StoreBase`` declares them abstract)
REQUIRED_METHODS = ("commit", "page", "runs", "interrupt_running", "metrics", "metric_points", "resources")


def count_by_operation(ledger: Iterable[HandoffRecord], run_id: str | None = None) -> dict[str, int]:
    """``{operation: count}`` of the moves in ``ledger`` (of ``run_id`` when given), sorted by
    operation. Seed restarts are bookkeeping, not moves, so they are not counted."""
    out: dict[str, int] = {}
    for h in ledger:
        if h.operation != "restart" and (run_id is None or h.run_id == run_id):
            out[h.operation] = out.get(h.operation, 0) + 1
    return dict(sorted(out.items()))


class StoreBase(ABC):
    """A store with every optional read given once, on top of ``page`` and the required reads.

    Capabilities are class attributes, read by the kernel instead of probing methods:

    * ``supports_handoffs``: the store keeps a control ledger (``handoffs``,
      ``count_handoffs``, ``rows_by_pipeline("handoffs", ...)`` from ``Batch.handoffs``) and
      ``commit`` applies ``Batch.resets`` (deletes the rows they name). Pipelines with control
      (handoffs) need it. ``has_ledger`` may still say an older file has no ledger.
    * ``commits_behind``: ``commit_behind(batch)`` may return before the batch is durable,
      with a ``concurrent.futures.Future`` resolved once it is (or None: durable already); the
      recorder then overlaps group commits. ``commit`` itself must still return durable. A
      subclass that defines ``commit_behind`` gets ``commits_behind = True`` unless it says.
    * ``supports_notes``: ``write_note`` keeps a new revision of a run's notes (without it,
      a run's notes are its config's ``run.notes``, read-only).
    * ``keeps_logs``: ``commit`` stores ``Batch.logs`` and ``logs()`` reads them back; a store
      without it drops them (the run still works, ``pyattacker logs`` shows nothing).
    """

    location: str = ""
    read_only: bool = False
    #: what the store found missing when it was opened (committed data it knows it held and no
    #: longer holds: a lost log), as a sentence naming the file; None when nothing is known
    #: lost. A writing run refuses to start on it unless ``--fresh-restart``.
    lost_contents: str | None = None
    supports_handoffs: ClassVar[bool] = False
    commits_behind: ClassVar[bool] = False
    supports_notes: ClassVar[bool] = False
    keeps_logs: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A class that defines ``commit_behind`` and says nothing of ``commits_behind`` means it."""
        super().__init_subclass__(**kwargs)
        if "commit_behind" in vars(cls) and "commits_behind" not in vars(cls):
            cls.commits_behind = True

    # -- required ---------------------------------------------------------------------------------
    @abstractmethod
    def commit(self, batch: Batch) -> None: ...

    @abstractmethod
    def page(
        self,
        kind: str,
        *,
        run_id: str | None = None,
        pipeline_id: str | None = None,
        state: str | None = None,
        after: tuple[Any, ...] | None = None,
        limit: int = 1000,
    ) -> list[Any]: ...

    @abstractmethod
    def runs(self) -> list[RunRecord]: ...

    @abstractmethod
    def interrupt_running(self, run_id: str, now: float) -> int: ...

    @abstractmethod
    def metrics(self, run_id: str | None = None, pipeline_id: str | None = None) -> list[MetricRecord]: ...

    @abstractmethod
    def metric_points(
        self, run_id: str, pipeline_id: str, key: str | None = None, after_step: int = -1, limit: int = 1000
    ) -> list[MetricPoint]: ...

    @abstractmethod
    def resources(self, run_id: str | None = None) -> list[ResourceRecord]: ...

    # -- basic reads with defaults ----------------------------------------------------------------
    def close(self) -> None:
        return None

    def lookup_pipelines(self, ids: Sequence[str]) -> dict[str, PipelineRecord]:
        found: dict[str, PipelineRecord] = {}
        for pid in dict.fromkeys(ids):
            rows = self.page("pipelines", pipeline_id=pid, limit=1)
            if rows:
                found[pid] = rows[0]
        return found

    def get_artifact(self, pipeline_id: str, seq: int) -> ArtifactRecord | None:
        return next((a for a in iter_rows(self, "artifacts", pipeline_id=pipeline_id) if a.seq == seq), None)

    def get_run(self, run_id: str) -> RunRecord | None:
        return next((r for r in self.runs() if r.run_id == run_id), None)

    def commit_behind(self, batch: Batch) -> Future[None] | None:
        """``commit``, durable on return (a store with ``commits_behind = True`` overrides it)."""
        self.commit(batch)
        return None

    def artifact_folder(self, pipeline_id: str) -> str | None:
        """The folder for the files tasks of ``pipeline_id`` write themselves
        (``ctx.artifact_dir()``), when this store keeps one per pipeline group (the suite
        layout ``by_experiment``: each experiment's beside its store). None: the runner's
        usual one, beside the store."""
        return None

    # -- the control ledger -----------------------------------------------------------------------
    @property
    def has_ledger(self) -> bool:
        """Whether this store (this file) keeps a control ledger."""
        return self.supports_handoffs

    def handoffs(self, pipeline_id: str) -> list[HandoffRecord]:
        """The pipeline's control ledger, oldest first (empty without a ledger)."""
        return []

    def count_handoffs(self, run_id: str | None = None) -> int:
        """Handoffs (ledger rows other than ``restart``: forward jumps, rewinds, retry-alls)
        committed by ``run_id`` (None: by every run)."""
        return sum(self.handoffs_by_operation(run_id).values())

    def handoffs_by_operation(self, run_id: str | None = None) -> dict[str, int]:
        """``{operation: count}`` of the handoffs ``count_handoffs`` counts (no zero entries)."""
        if not self.has_ledger:
            return {}
        ledger = (h for p in iter_rows(self, "pipelines") for h in self.handoffs(p.pipeline_id))
        return count_by_operation(ledger, run_id)

    # -- task logs ----------------------------------------------------------------------------------
    def logs(
        self,
        *,
        run_id: str | None = None,
        pipeline_id: str | None = None,
        task: str | None = None,
        after: int | None = None,
        limit: int = 1000,
    ) -> list[LogRecord]:
        """Up to ``limit`` attempts' logs with ``log_id > after``, in ``log_id`` order, of
        ``run_id`` (the writing run), ``pipeline_id`` and task name ``task`` when given. Empty
        for a store that keeps no logs (``keeps_logs``)."""
        return []

    # -- aggregates (a report over a store) ---------------------------------------------------------
    def pipeline_summaries(self, run_id: str | None = None) -> Iterable[Summary]:
        """``(pipeline_id, state, started_at, finished_at, attempts_total)`` of every pipeline
        row of ``run_id`` (None: all), in any order: what a merged report folds; whole rows are
        read only for the failed pipelines it shows."""
        return (
            (r.pipeline_id, r.state, r.started_at, r.finished_at, r.attempts_total)
            for r in iter_rows(self, "pipelines", run_id=run_id)
        )

    def pipeline_totals(self, run_id: str | None = None) -> Totals:
        """``({state: count}, sorted durations in ms, sum of attempts_total)`` of the pipeline
        rows of ``run_id``; a duration is ``(finished_at - started_at) * 1000.0`` of a row with both."""
        by_state: dict[str, int] = {}
        durations: list[float] = []
        attempts = 0
        for _pid, state, started, finished, tries in self.pipeline_summaries(run_id):
            by_state[state] = by_state.get(state, 0) + 1
            attempts += tries or 0
            if started is not None and finished is not None:
                durations.append((finished - started) * 1000.0)
        durations.sort()
        return by_state, durations, attempts

    def pipeline_counts(self, run_id: str | None = None) -> dict[str, int]:
        """``{state: count}`` of the pipeline rows of ``run_id`` (None: every row): what views
        show first. A store that keeps these counts as it writes answers without reading rows."""
        return dict(self.pipeline_totals(run_id)[0])

    def task_counts(self, run_id: str | None = None) -> dict[str, dict[str, int]]:
        """``{task name: {state: count}}`` over the task rows of ``run_id`` whose pipeline row
        is of ``run_id`` too (None: every task row that has a pipeline row)."""
        owners = {p.pipeline_id for p in iter_rows(self, "pipelines", run_id=run_id)}
        out: dict[str, dict[str, int]] = {}
        for t in iter_rows(self, "tasks", run_id=run_id):
            if t.pipeline_id in owners:
                states = out.setdefault(t.name, {})
                states[t.state] = states.get(t.state, 0) + 1
        return out

    def count_rows(self, kind: str, run_id: str | None = None) -> int:
        """How many rows ``page(kind, run_id=run_id)`` would return."""
        return sum(1 for _ in iter_rows(self, kind, run_id=run_id))

    def stats(self, run_id: str | None = None) -> dict[str, Any]:
        """Pipelines by state with duration percentiles, tasks by name and state, and the
        attempt, event and handoff totals (``docs/stores.md`` shows the shape)."""
        return compute_stats(self, run_id)

    # -- narrow reads (resume, live views, export) ----------------------------------------------------
    def lookup_states(self, ids: Sequence[str]) -> dict[str, tuple[str, str, str, str]]:
        """``(state, spec_digest, seed_digest, run_id)`` per stored id: what a resume needs to
        skip a finished pipeline."""
        rows = self.lookup_pipelines(ids)
        return {pid: (r.state, r.spec_digest, r.seed_digest, r.run_id) for pid, r in rows.items()}

    def attempt_summaries(
        self, run_id: str | None, after: int | None, limit: int
    ) -> list[tuple[int, float, float, str]]:
        """``(attempt_id, duration_ms, ended_at, outcome)`` of the attempts
        ``page("attempts", run_id=run_id, after=(after,), limit=limit)`` returns."""
        rows = self.page("attempts", run_id=run_id, after=None if after is None else (after,), limit=limit)
        return [(a.attempt_id, a.duration_ms, a.ended_at, a.outcome) for a in rows]

    def event_summaries(
        self, run_id: str | None, after: int | None, limit: int
    ) -> list[tuple[int, str, str | None, float]]:
        """``(event_id, kind, pipeline_id, ts)`` of the events ``page("events", ...)`` returns."""
        rows = self.page("events", run_id=run_id, after=None if after is None else (after,), limit=limit)
        return [(e.event_id, e.kind, e.pipeline_id, e.ts) for e in rows]

    def rows_by_pipeline(self, kind: str, ids: Sequence[str]) -> dict[str, list[Any]]:
        """``{pipeline_id: rows}`` of ``kind`` (``tasks``, ``artifacts`` or ``handoffs``) for
        those of ``ids`` that have any, each list in seq (handoff) order."""
        if kind not in ("tasks", "artifacts", "handoffs"):
            raise ValueError(f"rows_by_pipeline: kind must be tasks, artifacts or handoffs, got {kind!r}")
        out: dict[str, list[Any]] = {}
        for pid in dict.fromkeys(ids):
            rows = self.handoffs(pid) if kind == "handoffs" else list(iter_rows(self, kind, pipeline_id=pid))
            if rows:
                out[pid] = rows
        return out

    def attempt_numbers(self, pipeline_id: str, attempt_id: str, slot_id: str) -> tuple[int, int]:
        """``(highest attempt number recorded under attempt_id, attempts_used of task row
        slot_id)``, 0 for none: what a resume numbers the next attempt of that slot after."""
        attempts = iter_rows(self, "attempts", pipeline_id=pipeline_id)
        recorded = max((a.attempt for a in attempts if a.task_run_id == attempt_id), default=0)
        tasks = iter_rows(self, "tasks", pipeline_id=pipeline_id)
        used = max((t.attempts_used for t in tasks if t.task_run_id == slot_id), default=0)
        return recorded, used

    def metrics_by_pipeline(self, run_id: str, ids: Sequence[str]) -> dict[str, list[MetricRecord]]:
        """``{pipeline_id: metrics}`` of run ``run_id`` for those of ``ids`` that have any."""
        out: dict[str, list[MetricRecord]] = {}
        for pid in dict.fromkeys(ids):
            rows = self.metrics(run_id=run_id, pipeline_id=pid)
            if rows:
                out[pid] = rows
        return out

    def final_artifacts(self, ids: Sequence[str]) -> dict[str, ArtifactRecord]:
        """``{pipeline_id: final artifact}`` (the first marked final, in seq order) for those
        of ``ids`` that have one."""
        out: dict[str, ArtifactRecord] = {}
        for pid in dict.fromkeys(ids):
            final = next((a for a in iter_rows(self, "artifacts", pipeline_id=pid) if a.is_final), None)
            if final is not None:
                out[pid] = final
        return out

    def task_leases(self, ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """``{task_run_id: leases}`` of the last attempt of each task of the pipelines ``ids``."""
        last: dict[str, list[dict[str, Any]]] = {}
        for pid in dict.fromkeys(ids):
            for attempt in iter_rows(self, "attempts", pipeline_id=pid):  # the last one wins
                last[attempt.task_run_id] = attempt.leases
        return last

    def point_pipelines(self, run_id: str) -> list[str]:
        """The pipeline ids (``""``: the run scope) with metric points in run ``run_id``, sorted."""
        candidates = {""} | {a.pipeline_id for a in iter_rows(self, "attempts", run_id=run_id)}
        return sorted(pid for pid in candidates if self.metric_points(run_id, pid, None, -1, 1))

    # -- runs: their notes, counts and summaries (``runs``, ``compare``, the viewer) -------------------
    def run_note(self, run_id: str) -> NoteRecord | None:
        """The latest revision of a run's notes (None: no notes). Without notes of its own a
        run's notes are its config's ``run.notes``, as revision 1."""
        return config_note(self.get_run(run_id))

    def run_notes(self) -> dict[str, NoteRecord]:
        """``{run_id: latest revision}`` of every run that has notes."""
        out: dict[str, NoteRecord] = {}
        for run in self.runs():
            note = self.run_note(run.run_id)
            if note is not None:
                out[run.run_id] = note
        return out

    def write_note(
        self, run_id: str, text: str, *, expected_revision: int | None, author: str, now: float
    ) -> NoteRecord:
        """Keep ``text`` as the next revision of the run's notes and return it; every earlier
        revision is kept. ``expected_revision`` is the revision the writer edited (None: the
        latest): when another is the latest, nothing is written and ``NoteConflict`` says who
        wrote it (``pyattacker.plugins.run_notes.next_note`` holds that rule). An unknown run
        is a ``ConfigError``. Needs ``supports_notes``."""
        raise StoreFeatureUnsupported(f"store {self.location} ({type(self).__name__}) keeps no notes")

    def _note_run(self, run_id: str) -> RunRecord:
        """The run a note is written on (``ConfigError`` naming the store when it has none)."""
        run = self.get_run(run_id)
        if run is None:
            raise ConfigError(f"store {self.location}: no run {run_id!r} (`pyattacker runs` lists them)")
        return run

    def run_state_counts(self) -> dict[str, dict[str, int]]:
        """``{run_id: {state: count}}`` of the pipeline rows each run owns (runs owning none are
        absent): the counts ``pyattacker runs`` shows."""
        out: dict[str, dict[str, int]] = {}
        for row in iter_rows(self, "pipelines"):
            states = out.setdefault(row.run_id, {})
            states[row.state] = states.get(row.state, 0) + 1
        return out

    def spec_digests(self, run_id: str) -> dict[str, int]:
        """``{spec_digest: pipelines}`` of the pipeline rows run ``run_id`` owns: the chain
        identities (tasks, versions, task config) it ran."""
        out: dict[str, int] = {}
        for row in iter_rows(self, "pipelines", run_id=run_id):
            out[row.spec_digest] = out.get(row.spec_digest, 0) + 1
        return dict(sorted(out.items()))

    def task_durations(self, run_id: str) -> dict[str, Sequence[float]]:
        """``{task name: sorted durations in ms}`` of the finished task rows run ``run_id``
        wrote (rows without a duration left out): per-task latency percentiles."""
        by_name: dict[str, list[float]] = {}
        for t in iter_rows(self, "tasks", run_id=run_id):
            if t.duration_ms is not None:
                by_name.setdefault(t.name, []).append(float(t.duration_ms))
        return {name: sorted(values) for name, values in sorted(by_name.items())}

    def metric_summary(self, run_id: str) -> dict[str, dict[str, Any]]:
        """Every application metric of run ``run_id`` by name: ``{"run": value}`` for a run-scope
        value, and ``count, mean, min, max`` over the numeric per-pipeline values."""
        out: dict[str, dict[str, Any]] = {}
        numbers: dict[str, list[float]] = {}
        for m in self.metrics(run_id=run_id):
            entry = out.setdefault(m.name, {})
            if m.pipeline_id == "":
                entry["run"] = m.value
            elif isinstance(m.value, int | float) and not isinstance(m.value, bool):
                numbers.setdefault(m.name, []).append(float(m.value))
        for name, values in numbers.items():
            out[name].update(
                count=len(values), mean=sum(values) / len(values), min=min(values), max=max(values)
            )
        return dict(sorted(out.items()))

    # -- dashboard reads (store_queries) ----------------------------------------------------------
    def find_pipelines(
        self, query: PipelineQuery, after: tuple[Any, Any] | None = None, limit: int = 50
    ) -> list[PipelineRecord]:
        """The first ``limit`` pipelines that match ``query``, in its order, past the keyset
        ``after`` = ``(sort value, pipeline_id)`` of the previous page's last row."""
        rows = iter_rows(self, "pipelines", run_id=query.run_id, state=query.state)
        return select_pipelines(rows, query, after, limit)

    def scan_pipelines(
        self, query: PipelineQuery, after: tuple[Any, Any] | None, limit: int, scan: int
    ) -> tuple[list[PipelineRecord], tuple[Any, Any] | None]:
        """``find_pipelines`` that may look at only the next ``scan`` pipelines of the run (and
        state) in ``query``'s order: the matches found, and the keyset where it stopped when it
        stopped short of ``limit`` matches with pipelines left (None: nothing left, or
        ``limit`` found). The viewer's filtered pages read this, so a filter that matches
        little costs a bounded read on a store of any size. The default looks at everything."""
        return self.find_pipelines(query, after, limit), None

    def failure_counts(self, run_id: str | None = None) -> list[FailureCount]:
        """The failed pipelines of ``run_id`` (None: every run) counted by error type, error
        class and failed task, each with its first in page order, in the order of those firsts:
        the viewer's failure groups.
        The default reads every failed pipeline; the SQLite store counts in SQL."""
        return count_failures(iter_rows(self, "pipelines", run_id=run_id, state="failed"))

    def attempt_timeline(self, run_id: str | None, origin: float, width: float) -> list[TimeBucket]:
        """The attempts of ``run_id`` (None: all) bucketed by when they ended: bucket ``i``
        holds those with ``int((ended_at - origin) / width) == i``; only buckets with attempts."""
        rows = iter_rows(self, "attempts", run_id=run_id)
        summary = ((a.attempt_id or 0, a.ended_at, a.duration_ms, a.outcome) for a in rows)
        return bucket_attempts(summary, origin, width)


#: the optional reads ``StoreBase`` gives defaults for (an adapted store's own are kept)
OPTIONAL_READS = (
    "close", "lookup_pipelines", "get_artifact", "get_run", "handoffs", "count_handoffs",
    "pipeline_summaries", "pipeline_totals", "pipeline_counts", "task_counts", "count_rows", "stats",
    "lookup_states", "attempt_summaries", "event_summaries", "rows_by_pipeline", "metrics_by_pipeline",
    "final_artifacts", "task_leases", "point_pipelines", "handoffs_by_operation", "run_note",
    "run_notes", "write_note", "run_state_counts", "spec_digests", "task_durations", "metric_summary",
    "find_pipelines", "attempt_timeline", "scan_pipelines", "failure_counts",
)  # fmt: skip


class _AdaptedStore(StoreBase):
    """A store that satisfies the ``Store`` protocol without subclassing ``StoreBase``: its own
    methods are bound once onto this object (no forwarding call per commit), the defaults fill
    the rest. Version-1 stores declare ``applies_resets = True`` for ``supports_handoffs``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.location = str(getattr(inner, "location", ""))
        self.read_only = bool(getattr(inner, "read_only", False))
        self.lost_contents = getattr(inner, "lost_contents", None)
        for name in (*REQUIRED_METHODS, *OPTIONAL_READS, "logs"):
            method = getattr(inner, name, None)
            if callable(method):
                setattr(self, name, method)
        # capabilities are read on the class: a wrapper forwarding attributes (``__getattr__``)
        # must not claim what the store it wraps does (group commits past its own ``commit``,
        # a ledger it does not keep)
        cls = type(inner)
        declared = getattr(cls, "supports_handoffs", None)
        if declared is None:
            ledger = callable(getattr(cls, "handoffs", None))
            declared = ledger and getattr(cls, "applies_resets", False) is True
        self.supports_handoffs = declared is True  # type: ignore[misc]
        self.supports_notes = getattr(cls, "supports_notes", False) is True  # type: ignore[misc]
        behind = getattr(cls, "commit_behind", None)
        self.commits_behind = behind is not None  # type: ignore[misc]
        self.keeps_logs = getattr(cls, "keeps_logs", False) is True  # type: ignore[misc]
        if behind is not None:
            self.commit_behind = inner.commit_behind  # type: ignore[method-assign]
        self._ledger = getattr(inner, "has_ledger", self.supports_handoffs) is not False

    @property
    def has_ledger(self) -> bool:
        return self.supports_handoffs and self._ledger

    # bound from the inner store in __init__; declared for the ABC
    def commit(self, batch: Batch) -> None:  # pragma: no cover - replaced per instance
        raise NotImplementedError

    def page(  # pragma: no cover - replaced per instance
        self,
        kind: str,
        *,
        run_id: str | None = None,
        pipeline_id: str | None = None,
        state: str | None = None,
        after: tuple[Any, ...] | None = None,
        limit: int = 1000,
    ) -> list[Any]:
        raise NotImplementedError

    def runs(self) -> list[RunRecord]:  # pragma: no cover - replaced per instance
        raise NotImplementedError

    def interrupt_running(self, run_id: str, now: float) -> int:  # pragma: no cover
        raise NotImplementedError

    def metrics(  # pragma: no cover - replaced per instance
        self, run_id: str | None = None, pipeline_id: str | None = None
    ) -> list[MetricRecord]:
        raise NotImplementedError

    def metric_points(  # pragma: no cover - replaced per instance
        self, run_id: str, pipeline_id: str, key: str | None = None, after_step: int = -1, limit: int = 1000
    ) -> list[MetricPoint]:
        raise NotImplementedError

    def resources(self, run_id: str | None = None) -> list[ResourceRecord]:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<adapted {self.inner!r}>"


def adapt_store(obj: Any, where: str = "store") -> StoreBase:
    """``obj`` as a ``StoreBase``: itself when it is one, else adapted once (see
    ``_AdaptedStore``). Raises ``PluginError`` naming ``where`` and what ``obj`` lacks."""
    if isinstance(obj, StoreBase):
        return obj
    missing = [name for name in REQUIRED_METHODS if not callable(getattr(obj, name, None))]
    if missing:
        raise PluginError(
            f"{where}: {type(obj).__name__} is not a store: it lacks {', '.join(missing)}"
            " (see pyattacker.plugins.api.StoreBase)"
        )
    return _AdaptedStore(obj)


def select_logs(
    rows: Iterable[LogRecord],
    run_id: str | None,
    pipeline_id: str | None,
    task: str | None,
    after: int | None,
    limit: int,
) -> list[LogRecord]:
    """``StoreBase.logs`` over rows held in ``log_id`` order (the memory and JSONL stores)."""
    out: list[LogRecord] = []
    if limit <= 0:
        return out
    for row in rows:
        if after is not None and (row.log_id or 0) <= after:
            continue
        if run_id is not None and row.run_id != run_id:
            continue
        if pipeline_id is not None and row.pipeline_id != pipeline_id:
            continue
        if task is not None and row.task_name != task:
            continue
        out.append(msgspec.structs.replace(row, lines=list(row.lines)))
        if len(out) >= limit:
            break
    return out


# -- openers --------------------------------------------------------------------------------------
@runtime_checkable
class StoreOpener(Protocol):
    """Registered through ``pyattacker_stores``: opens stores for some schemes and suffixes.

    ``open`` receives the location exactly as the user wrote it (``s3://bucket/runs``,
    ``sqlite:runs/x.db?synchronous=full``, ``runs/x.db``); ``location_path`` gives the part
    after the scheme. Optional (``StoreOpenerBase``): ``recognizes(path)`` claims an existing
    folder without a scheme or suffix (the JSONL store's marker file)."""

    name: str
    schemes: tuple[str, ...]
    suffixes: tuple[str, ...]

    def open(self, location: str, *, read_only: bool = False) -> Store: ...


class StoreOpenerBase:
    """Defaults for an opener: no file suffix, no folder claimed, no listing."""

    name: str = ""
    schemes: tuple[str, ...] = ()
    suffixes: tuple[str, ...] = ()

    def recognizes(self, path: str) -> bool:
        return False

    def list_stores(self, location: str) -> list[str]:
        """The existing stores whose location begins with ``location`` (as the user wrote it,
        scheme included). ``run --shards N --store s3://b/run`` writes ``s3://b/run.shard{i}ofN``;
        this is how ``report``, ``export``, ``serve`` and ``resume`` find those stores from the
        base location. Default: none found (the base must then be named shard by shard)."""
        return []


def split_scheme(location: str) -> tuple[str | None, str]:
    """``(scheme, rest)`` of a location: ``("s3", "bucket/runs")`` for ``s3://bucket/runs``,
    ``("sqlite", "x.db")`` for ``sqlite:x.db``, ``(None, location)`` for a plain path (a
    one-letter scheme is a Windows drive letter), ``("memory", "")`` for ``:memory:``."""
    if location == ":memory:":
        return "memory", ""
    head, sep, rest = location.partition(":")
    if sep and len(head) > 1 and head.replace("+", "").replace("-", "").isalnum():
        return head.lower(), rest[2:] if rest.startswith("//") else rest
    return None, location


def location_path(location: str) -> str:
    """The part of a store location after its scheme (``?options`` kept)."""
    return split_scheme(location)[1]
