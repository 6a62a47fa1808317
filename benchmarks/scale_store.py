"""A large SQLite store for the scale benchmark, built once through the store API and cached.

``build_scale_store(path, pipelines)`` writes ``pipelines`` one-task pipelines in two runs (the
first four fifths in run ``scale-a``, the rest in ``scale-b`` over the same seeds, so ``compare``
has something to compare) with the rows a real run writes for each: the pipeline, its task
slot, seed and output artifacts, one or two attempts, a ``pipeline.*`` event, every tenth a
metric; a few percent fail (three error classes), some retry once. Durations are log-normal
(median 200 ms, sigma 0.8), start times spread as a run at about 8,000 pipelines/s would.
Everything is derived from ``seed``: two builds of the same size hold the same rows. The
pipelines of ``scale-a`` have the ids, digests and seeds a run of ``product_run``'s one-task
template gives ``in-0``, ``in-1``, ... (so ``resume_specs`` re-runs them with nothing to do);
those of ``scale-b`` are of another chain (ids of their own).

Rows go through ``SqliteStore.commit`` in batches of a few thousand pipelines (the same commit
path a run uses, without the runner around it): about a minute per million on a quiet machine.
A finished build leaves ``<path>.built.json``; a later call with the same arguments and schema
returns the file as it is. ``cached_scale_store`` puts it under ``$PYATTACKER_BENCH_CACHE`` or
``~/.cache/pyattacker-bench``, named by size, seed and schema version.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from pyattacker.model import (
    OK_DECISION,
    ArtifactRecord,
    AttemptRecord,
    Batch,
    EventRecord,
    MetricPoint,
    MetricRecord,
    PipelineRecord,
    ResourceRecord,
    RunRecord,
    TaskRecord,
)
from pyattacker_plugins.store_sqlite import SCHEMA_VERSION, SqliteStore

__all__ = ["RUNS", "build_scale_store", "cache_dir", "cached_scale_store", "resume_specs"]

#: the two runs' ids and the share of the pipelines each holds
RUNS = (("scale-a", 0.8), ("scale-b", 0.2))
_BATCH = 4000
_RATE = 8000.0  # pipelines started per second of the simulated run
_T0 = 1_796_000_000.0
_ERRORS = (
    ("RateLimited", "retryable", "429 Too Many Requests"),
    ("ValueError", "permanent", "bad answer: expected JSON"),
    ("TimeoutError", "timeout", "task timed out after 30 s"),
)


def resume_specs(pipelines: int) -> Any:
    """The specs of run ``scale-a`` of a store of ``pipelines`` (``product_run``'s one-task
    template over ``in-0 ...``): what a resume with nothing to do runs."""
    from benchmarks.product_run import build_template, seeds

    return build_template(1).map(seeds(0, int(pipelines * RUNS[0][1])))


def cache_dir() -> Path:
    """Where built stores are kept between benchmark runs."""
    env = os.environ.get("PYATTACKER_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "pyattacker-bench"


def cached_scale_store(pipelines: int = 1_000_000, *, seed: int = 51) -> Path:
    """The cached store of that size (built on first use), keyed by the schema version."""
    path = cache_dir() / f"scale-{pipelines}-s{seed}-schema{SCHEMA_VERSION}.db"
    return build_scale_store(path, pipelines, seed=seed)


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".built.json")


def _identity(pipelines: int, seed: int) -> dict[str, Any]:
    return {"pipelines": pipelines, "seed": seed, "schema_version": SCHEMA_VERSION, "runs": RUNS}


def build_scale_store(path: Path, pipelines: int = 1_000_000, *, seed: int = 51) -> Path:
    """Build (or reuse, when built already with these arguments) the store at ``path``.

    The file is written under a temporary name and renamed when complete, so an interrupted
    build is never taken for a finished one."""
    path = Path(path)
    marker = _marker(path)
    want = json.loads(json.dumps(_identity(pipelines, seed)))
    if path.exists() and marker.exists():
        try:
            if json.loads(marker.read_text())["identity"] == want:
                return path
        except (ValueError, KeyError, OSError):
            pass
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    for stale in (partial, Path(f"{partial}-wal"), Path(f"{partial}-shm"), marker):
        stale.unlink(missing_ok=True)
    started = time.perf_counter()
    store = SqliteStore.open_writer(str(partial))
    try:
        lo = 0
        for run_id, share in RUNS:
            count = pipelines - lo if run_id == RUNS[-1][0] else int(pipelines * share)
            _write_run(store, run_id, count, seed)
            lo += count
    finally:
        store.close()
    for suffix in ("-wal", "-shm", ".lock"):
        Path(f"{partial}{suffix}").unlink(missing_ok=True)
    shutil.move(str(partial), str(path))
    record = Path(f"{partial}.contents")  # what the file holds (``store_sqlite.contents``)
    if record.exists():
        shutil.move(str(record), f"{path}.contents")
    built = {"identity": want, "build_s": round(time.perf_counter() - started, 1)}
    marker.write_text(json.dumps(built))
    return path


def _run_record(run_id: str, count: int, status: str) -> RunRecord:
    start = _T0 if run_id == RUNS[0][0] else _T0 + 3600.0
    end = start + count / _RATE + 2.0
    return RunRecord(
        run_id=run_id,
        status=status,
        label=f"scale benchmark {run_id}",
        started_at=start,
        ended_at=end if status != "running" else None,
        heartbeat_at=end,
        host="bench",
        pid=1,
        python="3.11",
        version="scale",
        config={"concurrency": 1024, "pools": {"apis": ["api-1"]}, "expected_pipelines": count},
        notes=f"{run_id}: {count} pipelines",
    )


def _write_run(store: SqliteStore, run_id: str, count: int, seed: int) -> None:
    rng = random.Random(f"{seed}:{run_id}")
    run = _run_record(run_id, count, "running")
    first = Batch()
    first.runs.append(run)
    first.events.append(EventRecord(ts=run.started_at, kind="run.started", scope="run", run_id=run_id))
    store.commit(first)
    first_run = run_id == RUNS[0][0]
    fail_rate = 0.03 if first_run else 0.02
    mu = math.log(200.0) + (0.0 if first_run else -0.05)
    specs = iter(resume_specs(int(count / RUNS[0][1]))) if first_run else None
    spec_digest = build_template_digest() if first_run else f"v2:{run_id}"
    for lo in range(0, count, _BATCH):
        batch = Batch()
        for i in range(lo, min(count, lo + _BATCH)):
            if specs is not None:
                spec = next(specs)
                ids = (spec.pipeline_id, spec.seed_digest, spec_digest)
            else:
                ids = (hashlib.blake2b(f"{run_id}:{i}".encode(), digest_size=16).hexdigest(), "", spec_digest)
            _add_pipeline(batch, rng, run, i, mu, fail_rate, ids)
        store.commit(batch)
    last = Batch()
    done = _run_record(run_id, count, "completed")
    last.runs.append(done)
    last.metrics.append(
        MetricRecord(
            run_id=run_id,
            pipeline_id="",
            name="cost_usd",
            value=count * 1e-4,
            updated_at=done.heartbeat_at or 0.0,
        )
    )
    last.metric_points.extend(
        MetricPoint(
            run_id=run_id,
            pipeline_id="",
            key="loss",
            value=1.0 / (1 + s),
            step=s,
            ts=run.started_at + s,
            op_id=f"{run_id}:loss:{s}",
        )
        for s in range(100)
    )
    last.resources.append(
        ResourceRecord(
            run_id=run_id,
            pool="apis",
            resource_id="api-1",
            kind="api",
            state="ready",
            spec={"id": "api-1", "capacity": 1024},
            updated_at=done.heartbeat_at or 0.0,
        )
    )
    last.events.append(
        EventRecord(
            ts=done.ended_at or 0.0,
            kind="run.finished",
            scope="run",
            run_id=run_id,
            data={"status": "completed"},
        )
    )
    store.commit(last)


def build_template_digest() -> str:
    """The spec digest of ``product_run``'s one-task template (what its pipeline rows carry)."""
    from benchmarks.product_run import build_template

    return str(build_template(1).spec_digest)


def _add_pipeline(
    batch: Batch,
    rng: random.Random,
    run: RunRecord,
    i: int,
    mu: float,
    fail_rate: float,
    ids: tuple[str, str, str],
) -> None:
    """One pipeline's rows (as a run of one task ``t0`` writes them) appended to ``batch``;
    ``ids``: its pipeline id, seed digest ('' : computed here) and spec digest."""
    run_id = run.run_id
    pid, seed_digest, spec_digest = ids
    created = run.started_at + i / _RATE
    tries = 2 if rng.random() < 0.05 else 1
    failed = rng.random() < fail_rate
    error = _ERRORS[rng.randrange(len(_ERRORS))] if failed else None
    t = created
    for attempt in range(1, tries + 1):
        ms = rng.lognormvariate(mu, 0.8)
        last = attempt == tries
        bad = not last or failed
        err = error if (last and failed) else _ERRORS[0] if bad else None
        batch.attempts.append(
            AttemptRecord(
                run_id=run_id,
                pipeline_id=pid,
                task_run_id=f"{pid}:0",
                task_name="t0",
                seq=0,
                attempt=attempt,
                started_at=t,
                ended_at=t + ms / 1000,
                duration_ms=round(ms, 3),
                outcome="failed" if bad else "succeeded",
                error_class=err[1] if err else None,
                error_type=err[0] if err else None,
                error_message=err[2] if err else None,
                decision={"retry": not last, "reason": "retryable" if not last else "exhausted"}
                if bad
                else OK_DECISION,
                leases=[{"pool": "apis", "resource_id": "api-1", "held_ms": round(ms, 3), "waited_ms": 0.0}],
            )
        )
        t += ms / 1000
    state = "failed" if failed else "succeeded"
    seed_text = json.dumps(f"in-{i}").encode()
    seed_digest = seed_digest or hashlib.blake2b(seed_text, digest_size=16).hexdigest()
    batch.artifacts.append(
        ArtifactRecord(
            artifact_id=f"{pid}:-1",
            pipeline_id=pid,
            task_name="__seed__",
            seq=-1,
            type_name="str",
            codec="json",
            digest=seed_digest,
            size=len(seed_text),
            created_at=created,
            payload=seed_text,
        )
    )
    if not failed:
        out = json.dumps(f"in-{i}|t0").encode()
        batch.artifacts.append(
            ArtifactRecord(
                artifact_id=f"{pid}:0",
                pipeline_id=pid,
                task_name="t0",
                seq=0,
                type_name="str",
                codec="json",
                digest=hashlib.blake2b(out, digest_size=16).hexdigest(),
                size=len(out),
                created_at=t,
                payload=out,
                is_final=True,
            )
        )
        if i % 10 == 0:
            batch.metrics.append(
                MetricRecord(run_id=run_id, pipeline_id=pid, name="score", value=rng.random(), updated_at=t)
            )
    batch.tasks.append(
        TaskRecord(
            task_run_id=f"{pid}:0",
            pipeline_id=pid,
            run_id=run_id,
            name="t0",
            seq=0,
            state=state,
            attempts_used=tries,
            started_at=created,
            ended_at=t,
            duration_ms=round((t - created) * 1000, 3),
            error_class=error[1] if error else None,
            error_type=error[0] if error else None,
            error_message=error[2] if error else None,
            resource="apis",
        )
    )
    batch.pipelines.append(
        PipelineRecord(
            pipeline_id=pid,
            run_id=run_id,
            name="bench",
            key=pid,
            state=state,
            created_at=created,
            started_at=created,
            finished_at=t,
            n_tasks_total=1,
            cursor=0 if failed else 1,
            attempts_total=tries,
            failed_task="t0" if failed else None,
            error_class=error[1] if error else None,
            error_type=error[0] if error else None,
            error_message=error[2] if error else None,
            traceback=f"Traceback (most recent call last):\n  ...\n{error[0]}: {error[2]}" if error else None,
            seed_digest=seed_digest,
            spec_digest=spec_digest,
            seed_key=None,
        )
    )
    batch.events.append(
        EventRecord(
            ts=t,
            kind=f"pipeline.{state}",
            scope="pipeline",
            run_id=run_id,
            pipeline_id=pid,
            data={"tasks": 1},
        )
    )


if __name__ == "__main__":
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    target = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    began = time.perf_counter()
    built_path = build_scale_store(target, size) if target else cached_scale_store(size)
    print(f"{built_path} ({os.path.getsize(built_path) / 1e6:.0f} MB, {time.perf_counter() - began:.1f} s)")
