"""The viewer's JSON endpoints: each request gets a fresh read-only store connection.

Lists are paged: ``limit`` (default 50, at most 1000) and an opaque ``after`` cursor taken
from the previous page's ``next``. Stored text comes back as raw JSON strings (the dashboard
renders it as text nodes). Status and list endpoints never read metric curves; only
``/curves`` does, one series at a time. A store that cannot be read (deleted, replaced,
corrupt, unreadable while serving) is a 503 naming it.
"""

from __future__ import annotations

import base64
import json
import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pyattacker import ConfigError
from pyattacker.errors import StoreUnavailable
from pyattacker.flow.visits import BACKWARD_OPS
from pyattacker.model import PIPELINE_STATES
from pyattacker.plugins.store_base import StoreBase
from pyattacker.views.common import ALL_RUNS, RunChoice, choose_run, open_view, to_plain
from pyattacker.views.compare import compare_in_store
from pyattacker.views.export_visits import control_record, ledger_rows
from pyattacker.views.failures import last_frame_text
from pyattacker.views.live import LiveDigest, snapshot
from pyattacker.views.runs import store_runs
from pyattacker.views.suite import compare_experiments, open_suite

from .assets import STATIC
from .dashboard_api import ParamError, pipeline_query, sort_key, timeline
from .drilldown import failure_groups, log_page, pipeline_detail
from .shared_answers import ANSWER_TTL_S, SharedAnswers

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "SCAN_LIMIT", "Api", "ApiError", "prometheus_text", "single_values"]

DEFAULT_LIMIT = 50
#: the pipelines one filtered ``/pipelines`` page looks at, at most (``scan_pipelines``)
SCAN_LIMIT = 50_000
MAX_LIMIT = 1000
_DIGESTS = 8
_KEY_PROBE = 5000


class ApiError(Exception):
    """An HTTP error answer with a JSON body."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": message, **extra}


def _cursor(values: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(values, separators=(",", ":")).encode()).decode().rstrip("=")


#: what SQLite can bind as an INTEGER; a larger number in a parameter is the client's mistake
_INT64 = (-(2**63), 2**63 - 1)
_NUMBER = (int, float)
_TEXT = (str,)


def _valid(value: Any, kinds: tuple[type, ...]) -> bool:
    if isinstance(value, bool) or not isinstance(value, kinds):
        return False
    if isinstance(value, int):
        return _INT64[0] <= value <= _INT64[1]
    return not isinstance(value, float) or math.isfinite(value)


def _uncursor(text: str, *kinds: tuple[type, ...]) -> tuple[Any, ...]:
    """The values of an ``after`` cursor, one per entry of ``kinds`` (the types it may hold).

    A cursor is opaque but comes from the client: anything that does not decode to exactly
    these values is a 400, never an error of the store or of a comparison.
    """
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        values = json.loads(raw)
    except (ValueError, TypeError, RecursionError) as exc:
        raise ApiError(400, "invalid 'after' cursor") from exc
    if (
        not isinstance(values, list)
        or len(values) != len(kinds)
        or not all(_valid(v, k) for v, k in zip(values, kinds, strict=True))
    ):
        raise ApiError(400, "invalid 'after' cursor")
    return tuple(values)


def single_values(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """The query parameters as a dict, each given at most once.

    A parameter given twice is ambiguous (``?state=failed&state=succeeded``): taking one of
    the values silently answers a question the client did not ask, so it is a 400 naming it.
    """
    params: dict[str, str] = {}
    for name, value in pairs:
        if name in params:
            raise ApiError(400, f"parameter {name!r} given more than once")
        params[name] = value
    return params


def _state(params: dict[str, str]) -> str | None:
    """The ``state`` filter, or None for every state. A state no pipeline can be in would
    match nothing and look like an empty run: a 400 listing the states instead."""
    raw = params.get("state")
    if not raw:
        return None
    if raw not in PIPELINE_STATES:
        raise ApiError(
            400,
            f"parameter 'state' must be one of {', '.join(PIPELINE_STATES)}",
            states=list(PIPELINE_STATES),
        )
    return raw


def _limit(params: dict[str, str]) -> int:
    raw = params.get("limit")
    if raw is None or raw == "":
        return DEFAULT_LIMIT
    try:
        value = int(raw)
    except ValueError as exc:
        raise ApiError(400, "limit must be an integer") from exc
    return max(1, min(MAX_LIMIT, value))


def _int_param(params: dict[str, str], name: str, default: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ApiError(400, f"{name} must be an integer") from exc
    if not _INT64[0] <= value <= _INT64[1]:
        raise ApiError(400, f"{name} must be an integer between {_INT64[0]} and {_INT64[1]}")
    return value


def _page(rows: list[Any], limit: int, key: Callable[[Any], list[Any]]) -> tuple[list[Any], str | None]:
    """``rows`` fetched with ``limit + 1``: the page and the cursor of its last row, if more."""
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (_cursor(key(rows[-1])) if more and rows else None)


class Api:
    """Answers ``GET path?params`` for one store location."""

    def __init__(
        self,
        location: str,
        run_id: str | None = None,
        *,
        answer_ttl_s: float = ANSWER_TTL_S,
        experiments: tuple[str, ...] = (),
    ) -> None:
        suite = open_suite(location)
        #: a suite directory's root (its store is the catalog inside it), else None
        self.suite_root = None if suite is None else location
        self.location = location if suite is None else suite[1]
        #: ``serve --experiment``: the experiments the comparison shows by default (all when empty)
        self.default_experiments = (
            tuple(suite[0].select(experiments)) if suite is not None and experiments else ()
        )
        self.run_id = run_id
        #: identical requests share one read of the store (``shared_answers``; 0 turns it off)
        self.answers = SharedAnswers(location, answer_ttl_s)
        self._digests: OrderedDict[str | None, LiveDigest] = OrderedDict()
        self._lock = threading.Lock()
        self.routes: dict[str, Callable[[StoreBase, RunChoice, dict[str, str]], Any]] = {
            "/stats": self.stats,
            "/metrics": self.metrics,
            "/events": self.events,
            "/pipelines": self.pipelines,
            "/pipeline": self.pipeline,
            "/resources": self.resources,
            "/errors": self.errors,
            "/curves": self.curves,
            "/timeline": self.timeline,
            "/failures": self.failures,
            "/logs": self.logs,
        }
        self.routes.update({"/runs": self.runs, "/compare": self.compare})
        if self.suite_root is not None:
            self.routes["/experiments"] = self.experiments

    @property
    def paths(self) -> list[str]:
        return [*STATIC, "/healthz", "/logs/stream", *self.routes]

    def digest(self, run_id: str | None) -> LiveDigest:
        with self._lock:
            d = self._digests.get(run_id)
            if d is None:
                d = self._digests[run_id] = LiveDigest(run_id)
                while len(self._digests) > _DIGESTS:
                    self._digests.popitem(last=False)
            self._digests.move_to_end(run_id)
            return d

    def warm(self) -> None:
        """Read the default run's history and statistics once, before anyone asks: on a large run
        the first ``/stats`` catches up with every attempt and event, which takes a while, so
        ``serve`` does it while the user opens the page. Errors are left for the requests to
        report."""
        try:
            self.call("/stats", {})
        except Exception:  # a missing run or an unreadable store answers the requests instead
            pass

    @contextmanager
    def _store(self) -> Iterator[StoreBase]:
        """This request's own read-only connection, closed after it.

        The file is the writer's: it may be deleted, replaced or damaged while the viewer
        runs. Opening it then, or a read that fails on it, is the store's state, not a bug of
        the viewer: a 503 naming the location instead of a 500. ``mode=ro`` means the viewer
        never creates or changes the file meanwhile.
        """
        try:
            store = open_view(self.location)
        except (ConfigError, StoreUnavailable) as exc:
            raise self._unavailable(exc) from exc
        try:
            yield store
        except StoreUnavailable as exc:
            raise self._unavailable(exc) from exc
        finally:
            store.close()

    def _unavailable(self, exc: Exception) -> ApiError:
        return ApiError(503, f"store {self.location} cannot be read: {exc}", store=self.location)

    def _route(self, path: str) -> Callable[[StoreBase, RunChoice, dict[str, str]], Any]:
        route = self.routes.get(path)
        if route is None:
            raise ApiError(404, f"no such path {path!r}", paths=self.paths)
        return route

    def params(self, path: str, pairs: list[tuple[str, str]]) -> dict[str, str]:
        """The parameters of a request to ``path``: an unknown path is a 404 before any
        parameter is looked at, then a parameter given twice is a 400."""
        self._route(path)
        return single_values(pairs)

    def call(self, path: str, params: dict[str, str]) -> Any:
        route = self._route(path)
        return self.answers.get((path, *sorted(params.items())), lambda: self._answer(route, params))

    def _answer(
        self, route: Callable[[StoreBase, RunChoice, dict[str, str]], Any], params: dict[str, str]
    ) -> Any:
        with self._store() as store:
            try:
                choice = choose_run(store, params.get("run_id") or self.run_id)
            except ConfigError as exc:
                raise ApiError(404, str(exc)) from exc
            return route(store, choice, params)

    def prometheus(self, params: dict[str, str]) -> str:
        """``/metrics`` in the Prometheus text format (run-scope application metrics only)."""
        text: str = self.answers.get(
            ("prometheus", *sorted(params.items())), lambda: self._prometheus(params)
        )
        return text

    def _prometheus(self, params: dict[str, str]) -> str:
        with self._store() as store:
            try:
                choice = choose_run(store, params.get("run_id") or self.run_id)
            except ConfigError as exc:
                raise ApiError(404, str(exc)) from exc
            snap = snapshot(store, choice, self.digest(choice.run_id))
            rows = store.metrics(run_id=choice.run_id, pipeline_id="") if choice.run_id else []
            return prometheus_text(snap, rows)

    # -- endpoints -------------------------------------------------------------------------------
    def stats(self, store: StoreBase, choice: RunChoice, params: dict[str, str]) -> dict[str, Any]:
        digest = self.digest(choice.run_id)
        snap = snapshot(store, choice, digest)
        snap["latency_histogram"] = digest.histogram_rows()
        snap["throughput_series"] = digest.throughput()
        snap["recent_events"] = digest.recent_events[-40:]
        snap["event_counts"] = dict(sorted(digest.event_counts.items()))
        snap["store"] = self.location
        snap["generated_at"] = time.time()
        return snap

    def metrics(self, store: StoreBase, choice: RunChoice, params: dict[str, str]) -> dict[str, Any]:
        if choice.run_id is None:
            return {
                "run_id": None,
                "rows": [],
                "limit": _limit(params),
                "next": None,
                "note": "application metrics are per run; pick a run (run_id=...)",
            }
        limit = _limit(params)
        pid = params.get("pipeline_id")
        rows = store.metrics(run_id=choice.run_id, pipeline_id=pid)
        if params.get("after"):
            after = _uncursor(params["after"], _TEXT, _TEXT)
            rows = [m for m in rows if (m.pipeline_id, m.name) > after]
        page, nxt = _page(rows[: limit + 1], limit, lambda m: [m.pipeline_id, m.name])
        return {"run_id": choice.run_id, "rows": [to_plain(m) for m in page], "limit": limit, "next": nxt}

    def events(self, store: StoreBase, choice: RunChoice, params: dict[str, str]) -> dict[str, Any]:
        limit = _limit(params)
        after = _int_param(params, "after", 0)
        rows = store.page(
            "events",
            run_id=choice.run_id,
            pipeline_id=params.get("pipeline_id") or None,
            after=(after,),
            limit=limit + 1,
        )
        page = rows[:limit]
        nxt = str(page[-1].event_id) if len(rows) > limit and page else None
        return {"run_id": choice.run_id, "rows": [to_plain(e) for e in page], "limit": limit, "next": nxt}

    def pipelines(self, store: StoreBase, choice: RunChoice, params: dict[str, str]) -> dict[str, Any]:
        """A page of the run's pipelines: filtered by ``state``, ``task`` (where it failed),
        ``error_class`` (exception type or retry class) and ``q`` (text), ordered by ``sort``
        and ``order``; ``after`` is the previous page's ``next`` (keyset, never an offset)."""
        limit = _limit(params)
        _state(params)  # (the 400 that lists the states)
        try:
            query = pipeline_query(params, choice.run_id)
        except ParamError as exc:
            raise ApiError(400, str(exc)) from exc
        after = None
        if params.get("after"):
            after = _uncursor(params["after"], _TEXT if query.sort == "key" else _NUMBER, _TEXT)
        stopped = None
        if query.sort == "created" and (query.task or query.error_class or query.text):
            # a filter no index serves: look at the next SCAN_LIMIT pipelines only (a rare match
            # on a large store is otherwise a read of every row); "next" goes on from there
            rows, stopped = store.scan_pipelines(query, after, limit + 1, SCAN_LIMIT)
        else:
            rows = store.find_pipelines(query, after, limit + 1)
        page, nxt = _page(rows, limit, lambda p: sort_key(p, query))
        if stopped is not None:
            nxt = _cursor(list(stopped))
        ledgers = _ledgers(store, [p.pipeline_id for p in page])
        # pipelines that moved back: their task rows too, for where each traversal stands
        backward = [pid for pid, rows in ledgers.items() if any(h.operation in BACKWARD_OPS for h in rows)]
        tasks = store.rows_by_pipeline("tasks", backward) if backward else {}
        out = []
        for p in page:
            row = to_plain(p)
            row.pop("traceback", None)  # lists stay lean: /pipeline carries the whole traceback
            row["last_frame"] = last_frame_text(p.traceback)
            row["n_tasks_done"] = p.cursor
            row["reported_metrics"] = {
                m.name: m.value for m in store.metrics(run_id=p.run_id, pipeline_id=p.pipeline_id)
            }
            # a pipeline that jumped: its cursor is a position, and the ledger says where it went
            # (with the visits: backward moves re-enter tasks)
            row["handoffs"] = ledger_rows(ledgers.get(p.pipeline_id, []), p.n_tasks_total)
            if p.pipeline_id in backward:
                row["control"] = control_record(p, ledgers[p.pipeline_id], tasks.get(p.pipeline_id, []))
                row["cursor_kind"] = "position"
            out.append(row)
        body = {"run_id": choice.run_id, "rows": out, "limit": limit, "next": nxt}
        if stopped is not None:
            body["searched"] = SCAN_LIMIT  # the page is what the next SCAN_LIMIT pipelines hold
        return body

    def timeline(self, store: StoreBase, choice: RunChoice, params: dict[str, str]) -> dict[str, Any]:
        """Attempts per time bucket over the run's whole span (``dashboard_api.timeline``)."""
        return timeline(store, choice)

    def pipeline(self, store: StoreBase, choice: RunChoice, params: dict[str, str]) -> dict[str, Any]:
        """One pipeline in full (``pipeline_id`` required): its row with the whole traceback of
        the error that failed it and that traceback's last frame, its tasks, ledger, attempts,
        metrics, artifacts and first page of logs (``drilldown.pipeline_detail``)."""
        pid = params.get("pipeline_id")
        if not pid:
            raise ApiError(400, "parameter 'pipeline_id' is required")
        p = store.lookup_pipelines([pid]).get(pid)
        if p is None:
            raise ApiError(404, f"no pipeline {pid!r} in this store")
        return pipeline_detail(store, p)

    def failures(self, store: StoreBase, choice: RunChoice, params: dict[str, str]) -> dict[str, Any]:
        """The run's failures grouped by error class, with counts and an example each."""
        return failure_groups(store, choice.run_id)

    def logs(self, store: StoreBase, choice: RunChoice, params: dict[str, str]) -> dict[str, Any]:
        """A page of task logs (``pipeline_id``, ``task``, ``run_id`` filter; ``after``: a
        ``log_id``, the previous page's ``next``)."""
        after = _int_param(params, "after", 0)
        return log_page(
            store,
            params.get("pipeline_id") or None,
            params.get("run_id") or None,
            params.get("task") or None,
            after or None,
            _limit(params),
        )

    def stream_filters(
        self, pairs: list[tuple[str, str]], last_event_id: str | None
    ) -> tuple[dict[str, Any], int]:
        """The filters and the offset of a ``/logs/stream`` request: ``Last-Event-ID`` (a
        reconnecting browser's) wins over ``after``; either must be a log id (400 otherwise)."""
        params = single_values(pairs)
        if last_event_id is not None and last_event_id.strip():
            params["after"] = last_event_id.strip()
        after = _int_param(params, "after", 0)
        filters = {
            "pipeline_id": params.get("pipeline_id") or None,
            "run_id": params.get("run_id") or None,
            "task": params.get("task") or None,
        }
        return filters, after

    @contextmanager
    def store_for_stream(self) -> Iterator[StoreBase]:
        """A read-only connection for one stream (a 503 when the store cannot be read)."""
        with self._store() as store:
            yield store

    def resources(self, store: StoreBase, choice: RunChoice, params: dict[str, str]) -> dict[str, Any]:
        limit = _limit(params)
        rows = store.resources(run_id=choice.run_id)
        if params.get("pool"):
            rows = [r for r in rows if r.pool == params["pool"]]
        if params.get("after"):
            after = _uncursor(params["after"], _TEXT, _TEXT, _TEXT)
            rows = [r for r in rows if (r.pool, r.resource_id, r.run_id) > after]
        rows.sort(key=lambda r: (r.pool, r.resource_id, r.run_id))
        page, nxt = _page(rows[: limit + 1], limit, lambda r: [r.pool, r.resource_id, r.run_id])
        body: dict[str, Any] = {
            "run_id": choice.run_id,
            "rows": [to_plain(r) for r in page],
            "limit": limit,
            "next": nxt,
        }
        if not page:
            body["note"] = "no resource rows yet (written at each heartbeat and at run end)"
        return body

    def errors(self, store: StoreBase, choice: RunChoice, params: dict[str, str]) -> dict[str, Any]:
        limit = _limit(params)
        after = _uncursor(params["after"], _NUMBER, _TEXT) if params.get("after") else None
        rows = store.page("pipelines", run_id=choice.run_id, state="failed", after=after, limit=limit + 1)
        page, nxt = _page(rows, limit, lambda p: [p.created_at, p.pipeline_id])
        out = [
            {
                "pipeline_id": p.pipeline_id,
                "key": p.key,
                "seed_key": p.seed_key,
                "name": p.name,
                "run_id": p.run_id,
                "failed_task": p.failed_task,
                "error_class": p.error_class,
                "error_type": p.error_type,
                "error_message": p.error_message,
                "last_frame": last_frame_text(p.traceback),
                "finished_at": p.finished_at,
            }
            for p in page
        ]
        return {"run_id": choice.run_id, "rows": out, "limit": limit, "next": nxt}

    def runs(self, store: StoreBase, choice: RunChoice, params: dict[str, str]) -> dict[str, Any]:
        """Every run of the store as ``pyattacker runs`` lists them, and the latest one (from
        aggregates: the same cost on a run of any size)."""
        return {"store": self.location, "latest": choice.run_id, "runs": store_runs(store, time.time())}

    def compare(self, store: StoreBase, choice: RunChoice, params: dict[str, str]) -> dict[str, Any]:
        """``pyattacker compare``'s document for runs ``a`` and ``b`` of the store (notes shown,
        never written: the viewer has no write path)."""
        a, b = params.get("a"), params.get("b")
        if not a or not b:
            raise ApiError(400, "parameters 'a' and 'b' (the run ids to compare) are required")
        try:
            return compare_in_store(store, a, b)
        except ConfigError as exc:
            raise ApiError(404, str(exc)) from exc
    def experiments(self, store: StoreBase, choice: RunChoice, params: dict[str, str]) -> dict[str, Any]:
        """A suite's experiments side by side (``report DIR``'s comparison); cumulative unless
        ``run_id`` names a run; ``experiment=ID`` narrows to one."""
        assert self.suite_root is not None
        wanted = (params["experiment"],) if params.get("experiment") else self.default_experiments
        try:
            manifest, rows = compare_experiments(
                self.suite_root, run_id=params.get("run_id"), experiments=wanted
            )
        except ConfigError as exc:
            raise ApiError(404, str(exc)) from exc
        return {"suite_id": manifest.suite_id, "layout": manifest.layout, "experiments": rows}

    def curves(self, store: StoreBase, choice: RunChoice, params: dict[str, str]) -> dict[str, Any]:
        if choice.run_id is None:
            raise ApiError(400, "curves belong to one run; pass run_id=<id> (not 'all')")
        pid = params.get("pipeline_id", "")
        key = params.get("key")
        if not key:
            probe = store.metric_points(choice.run_id, pid, None, -1, _KEY_PROBE)
            keys = sorted({pt.key for pt in probe if pt.step == 0})
            return {"run_id": choice.run_id, "pipeline_id": pid, "keys": keys}
        limit = _limit(params)
        after = _int_param(params, "after", -1)
        rows = store.metric_points(choice.run_id, pid, key, after, limit + 1)
        page = rows[:limit]
        nxt = str(page[-1].step) if len(rows) > limit and page else None
        points = [{"step": p.step, "value": p.value, "ts": p.ts, "attempt": p.attempt} for p in page]
        return {
            "run_id": choice.run_id,
            "pipeline_id": pid,
            "key": key,
            "rows": points,
            "limit": limit,
            "next": nxt,
        }


# -- Prometheus text format -------------------------------------------------------------------
_NAME_OK = re.compile(r"[^a-zA-Z0-9_]")


def _label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**kv: Any) -> str:
    parts = [f'{k}="{_label(v)}"' for k, v in kv.items() if v is not None]
    return "{" + ",".join(parts) + "}" if parts else ""


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def prometheus_text(snap: dict[str, Any], run_metrics: list[Any]) -> str:
    """Exposition format 0.0.4: pipeline states, attempts, pools and run-scope app metrics."""
    run = snap.get("run_id") or ALL_RUNS
    out: list[str] = []

    def family(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(f"{name}{labels} {value!r}" for labels, value in samples)

    family(
        "pyattacker_pipelines",
        "gauge",
        "Pipelines by state in the selected run.",
        [(_labels(run_id=run, state=s), float(n)) for s, n in snap["pipelines"].get("by_state", {}).items()],
    )
    family(
        "pyattacker_attempts_total",
        "counter",
        "Task attempts recorded for the run.",
        [(_labels(run_id=run), float(snap.get("attempts_total", 0)))],
    )
    family(
        "pyattacker_events_total",
        "counter",
        "Events recorded for the run.",
        [(_labels(run_id=run), float(snap.get("events_total", 0)))],
    )
    lat = snap["latency_ms"]
    family(
        "pyattacker_attempt_latency_ms",
        "gauge",
        "Attempt duration percentiles (ms).",
        [
            (_labels(run_id=run, quantile=q), float(lat[k]))
            for q, k in (("0.5", "p50"), ("0.95", "p95"), ("1", "max"))
            if lat.get(k) is not None
        ],
    )
    pools = snap.get("pools", [])
    family(
        "pyattacker_pool_active",
        "gauge",
        "Leases held per pool.",
        [(_labels(pool=p["pool"]), float(p["active"])) for p in pools],
    )
    family(
        "pyattacker_pool_capacity",
        "gauge",
        "Lease capacity per pool.",
        [(_labels(pool=p["pool"]), float(p["capacity"])) for p in pools],
    )
    family(
        "pyattacker_pool_resources",
        "gauge",
        "Resources per pool by health state.",
        [
            (_labels(pool=p["pool"], state=s), float(p[s]))
            for p in pools
            for s in ("ready", "degraded", "dead")
        ],
    )
    samples = []
    for m in run_metrics:
        value = _number(m.value)
        if value is not None:
            samples.append((_labels(run_id=m.run_id, name=_NAME_OK.sub("_", m.name), metric=m.name), value))
    family("pyattacker_app_metric", "gauge", "Run-scope application metrics (ctx/runner record).", samples)
    return "\n".join(out) + "\n"


def _ledgers(store: StoreBase, ids: list[str]) -> dict[str, list[Any]]:
    """The control ledgers of a page of pipelines (nothing for a store that keeps no ledger)."""
    return store.rows_by_pipeline("handoffs", ids) if ids else {}
