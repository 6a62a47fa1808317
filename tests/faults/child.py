"""The child process: one run of a small 3-task workload, optionally with one injected fault.

Run as ``python -m tests.faults.child --store URI --ledger PATH [--fault ...]``. The resume is
the same command without the fault. The tasks append ``pipeline_id<TAB>seq<TAB>attempt`` to
the audit ledger (fsynced) *before* doing anything else, so the ledger is the environment's
own count of executions: it survives the process and never comes from the library.

Crashes are the child killing itself with ``os._exit(137)`` right after a chosen
``store.commit`` returned (``SelfKillingStore``): a signal from outside almost never lands in
the narrow window between a durable write and the next one. Everything the task does depends
only on the seed and (pipeline, seq, attempt), so a resume sees the same task chain and seeds
(same keys, same identity) unless ``--variant`` asks for drift on purpose.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import hashlib
import io
import json
import os
import sys
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from pyattacker import FatalError, Handoff, PyAttackerError, RetryableError, task
from pyattacker.model import TERMINAL_STATES, Batch

#: where the tasks append their audit lines (set by ``main``; not part of any task identity)
LEDGER_ENV = "PYATTACKER_FAULT_LEDGER"
#: exit status of a self-inflicted crash (what a SIGKILL looks like to a shell)
CRASH_EXIT = 137
#: the store-write kinds a crash can follow
WRITE_KINDS = ("checkpoint", "attempts", "events", "terminal", "run")
#: ... and the commits of a backward move (``--control``: the judge rewinds or retries all)
CONTROL_KINDS = ("rewind", "retry_all")
#: the budget of ``--control`` pipelines: seeds with ``i % 4 == 1`` ask for one move more
MAX_HANDOFFS = 2
FAULTS = ("none", "crash", "torn", "enospc", "sink_error", "cancel", "stop_failures", "stop_time")
POOL = "api"
RETRY = {"max_attempts": 4, "base": 0.002, "factor": 2.0, "jitter": "none", "on": ["RetryableError"]}

_ledger_fd: int | None = None
#: ``--control``: none, rewind or retry_all (the ledger lines then carry the visit too)
_control = "none"


# -- the workload -------------------------------------------------------------------------------
def _audit(pipeline_id: str, seq: int, attempt: int, visit: int | None = None) -> None:
    """Append one execution to the ledger and fsync it before the task does anything else
    (with ``--control``, a fourth column: the visit)."""
    global _ledger_fd
    if _ledger_fd is None:
        path = os.environ.get(LEDGER_ENV)
        if not path:
            raise RuntimeError(f"{LEDGER_ENV} is not set: the audit ledger is the whole point")
        _ledger_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    tail = "" if visit is None else f"\t{visit}"
    os.write(_ledger_fd, f"{pipeline_id}\t{seq}\t{attempt}{tail}\n".encode())
    os.fsync(_ledger_fd)


def _roll(salt: int, pipeline_id: str, seq: int, attempt: int) -> int:
    """A reproducible 0..255 draw: the same in the crashed run and in the resume."""
    return hashlib.blake2b(f"{salt}|{pipeline_id}|{seq}|{attempt}".encode(), digest_size=1).digest()[0]


async def _step(value: dict[str, Any], ctx: Any, name: str) -> dict[str, Any]:
    _audit(ctx.pipeline_id, ctx.seq, ctx.attempt, None if _control == "none" else ctx.visit)
    async with ctx.acquire():
        await asyncio.sleep(float(value.get("pause", 0.0)))
    if value.get("doom") and ctx.seq == 1:
        raise FatalError("doomed seed: this pipeline always fails at seq 1")
    if _roll(int(value["salt"]), ctx.pipeline_id, ctx.seq, ctx.attempt) < 64 and ctx.attempt < 4:
        raise RetryableError("transient upstream error (injected by seed hash)")
    out = dict(value)
    out[name] = _roll(int(value["salt"]), ctx.pipeline_id, ctx.seq, 0)
    return out


@task(resource=POOL, retry=RETRY)
async def fetch(value: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return await _step(value, ctx, "fetch")


@task(resource=POOL, retry=RETRY)
async def transform(value: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return await _step(value, ctx, "transform")


@task(resource=POOL, retry=RETRY)
async def judge(value: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return await _step(value, ctx, "judge")


@task(resource=POOL, retry=RETRY)
async def judge_back(value: dict[str, Any], ctx: Any) -> Any:
    """The judge of ``--control`` pipelines: even seeds are sent back twice (the whole budget),
    seeds ``i % 4 == 1`` three times (the third move fails: budget exhausted), the rest pass."""
    out = await _step(value, ctx, "judge")
    i = int(value["i"])
    wanted = MAX_HANDOFFS + 1 if i % 4 == 1 else MAX_HANDOFFS if i % 2 == 0 else 0
    if ctx.visit < wanted:
        if _control == "rewind":
            return Handoff.rewind("transform", value, reason="weak")
        return Handoff.retry_all(reason="start over")
    return out


@task(resource=POOL, retry=RETRY)
async def extra(value: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Only in the ``chain`` drift variant: a changed task chain under the same keys."""
    return await _step(value, ctx, "extra")


def seeds(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    """The dataset: a pure function of the arguments (keys are explicit: ``p00042``)."""
    drift_at = 2  # admitted first: its row is always stored before any crash
    for i in range(args.pipelines):
        seed: dict[str, Any] = {"id": f"p{i:05d}", "i": i, "salt": args.seed, "pause": args.pause}
        if args.doom_every and i % args.doom_every == args.doom_every - 1:
            seed["doom"] = True
        if args.variant == "seed" and i == drift_at:
            seed["drift"] = 1
        yield seed


# -- the fault --------------------------------------------------------------------------------------
def kinds_of(batch: Batch) -> list[str]:
    """Which kinds of store write ``batch`` is (a group commit can be several at once)."""
    kinds = []
    if any(a.seq >= 0 for a in batch.artifacts):
        kinds.append("checkpoint")
    if batch.attempts:
        kinds.append("attempts")
    if batch.events:
        kinds.append("events")
    if any(p.state in TERMINAL_STATES for p in batch.pipelines):
        kinds.append("terminal")
    if batch.runs:
        kinds.append("run")
    ops = {h.operation for h in batch.handoffs}
    kinds += [kind for kind in CONTROL_KINDS if kind in ops]
    return kinds


class SelfKillingStore:
    """Forwards everything to the real store; dies right after the chosen commit returned.

    ``kind``/``at``: ``os._exit(137)`` after the ``at``-th (0-based) committed batch of that
    kind. ``enospc_after``: every commit after that many raises ``OSError(ENOSPC)`` (a disk
    that filled up), without touching the real store. ``torn_at``: during that commit the
    first ``os.pwrite`` writes half its bytes and the process dies (a crash *inside* a write;
    only stores that append with ``os.pwrite``, i.e. jsonl, can be torn this way).
    """

    def __init__(
        self,
        inner: Any,
        *,
        kind: str | None = None,
        at: int = -1,
        enospc_after: int | None = None,
        crash_note: str | None = None,
        torn_at: int | None = None,
    ) -> None:
        self._inner = inner
        self.torn_at = torn_at
        self.kind = kind
        self.at = at
        self.enospc_after = enospc_after
        self.crash_note = crash_note
        self.counts = dict.fromkeys((*WRITE_KINDS, *CONTROL_KINDS), 0)
        self.commits = 0
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def commit(self, batch: Batch) -> None:
        self._before(batch)
        self._inner.commit(batch)
        self.commits += 1
        dying = self._count(batch)
        if dying is not None:
            self._die(batch, dying)

    def commit_behind(self, batch: Batch) -> Future[None] | None:
        """The store's group commit that is durable later (SQLite with ``synchronous=full``): the
        chosen commit kills the process once it is durable, where the store learns it (the loop
        reading the sync helper's answers, or the sync thread), while the loop may have written
        later commits (unacknowledged) meanwhile."""
        if getattr(type(self._inner), "commit_behind", None) is None:
            self.commit(batch)
            return None
        self._before(batch)
        later: Future[None] | None = self._inner.commit_behind(batch)
        self.commits += 1
        dying = self._count(batch)
        if dying is not None:
            if later is None:
                self._die(batch, dying)
            else:
                later.add_done_callback(lambda f: None if f.exception() else self._die(batch, dying))
        return later

    def _before(self, batch: Batch) -> None:
        if self.enospc_after is not None and self.commits >= self.enospc_after:
            self.refused += 1
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        if self.torn_at == self.commits:
            self._arm_torn_write(batch)

    def _count(self, batch: Batch) -> str | None:
        """Count the batch's write kinds (in commit order); the kind to die after, if chosen."""
        dying = None
        for kind in kinds_of(batch):
            if kind == self.kind and self.counts[kind] == self.at:
                dying = kind
            self.counts[kind] += 1
        return dying

    def _arm_torn_write(self, batch: Batch) -> None:
        real = os.pwrite

        def torn(fd: int, data: bytes, offset: int) -> int:
            os.pwrite = real
            real(fd, bytes(data[: max(1, len(data) // 2)]), offset)
            self.kind, self.at = "torn", self.commits
            self._die(batch, "torn")
            return 0

        os.pwrite = torn  # type: ignore[assignment]

    def _die(self, batch: Batch, kind: str) -> None:
        if self.crash_note:
            note = {
                "kind": kind,
                "occurrence": self.at,
                "commit_no": self.commits,
                "artifacts": [[a.pipeline_id, a.seq] for a in batch.artifacts],
                "attempts": len(batch.attempts),
                "events": len(batch.events),
                "pipeline_states": sorted({p.state for p in batch.pipelines}),
                "runs": [[r.run_id, r.status] for r in batch.runs],
            }
            fd = os.open(self.crash_note, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, json.dumps(note).encode())
            os.fsync(fd)
            os.close(fd)
        os._exit(CRASH_EXIT)


class LedgerKillingStore(SelfKillingStore):
    """``SelfKillingStore`` over a store that keeps a control ledger (``--control``): a wrapper
    claims the capability on its class, since it forwards every call."""

    supports_handoffs = True


class BrokenSink:
    """An event sink plugin that raises on every third delivery (and counts its own raises)."""

    def __init__(self) -> None:
        self.calls = 0
        self.raised = 0

    def handle(self, events: list[Any]) -> None:
        self.calls += 1
        if self.calls % 3 == 0:
            self.raised += 1
            raise RuntimeError("sink exploded (injected)")

    def close(self) -> None:
        return None


# -- running ------------------------------------------------------------------------------------------
def _pool() -> Any:
    from pyattacker import Pool, Resource

    return Pool(POOL, [Resource("llm", id="r1", capacity=3), Resource("llm", id="r2", capacity=3)])


def _backend(spec: str) -> Any:
    if spec == "inline":
        return None
    if spec.startswith("file:"):
        return {"kind": "file", "root": spec[len("file:") :], "min_bytes": 0}
    raise SystemExit(f"unknown --backend {spec!r}")


def _wrap(store: Any, args: argparse.Namespace) -> SelfKillingStore:
    return (LedgerKillingStore if args.control != "none" else SelfKillingStore)(
        store,
        kind=args.kind if args.fault == "crash" else None,
        at=args.n,
        enospc_after=args.n if args.fault == "enospc" else None,
        crash_note=args.crash_note,
        torn_at=args.n if args.fault == "torn" else None,
    )


def _run_options(args: argparse.Namespace) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "concurrency": 8,
        "write_batch": 16,
        "flush_interval": 0.05,
        "heartbeat_s": 0.2,
        "grace_s": 5.0,
        "resume": True,
    }
    backend = _backend(args.backend)
    if backend is not None:
        opts["artifact_backend"] = backend
    if args.fresh_restart:
        opts["fresh_restart"] = True
    if args.fault == "stop_failures":
        opts["stop_after_failures"] = args.n
    if args.fault == "stop_time":
        opts["stop_after_s"] = args.n / 1000
    return opts


def _chain() -> tuple[Any, ...]:
    return (fetch, transform, judge)


def run_sdk(args: argparse.Namespace, result: dict[str, Any]) -> int:
    from pyattacker import Runner, pipeline
    from pyattacker.store.location import open_store

    store = _wrap(open_store(args.store), args)
    result["store_wrapper"] = store
    pool = _pool()
    sink = BrokenSink() if args.fault == "sink_error" else None
    chain = _chain() + ((extra,) if args.variant == "chain" else ())
    template = pipeline("faults", *chain)
    if args.control != "none":  # a loop: the judge sends pipelines back (``judge_back``)
        moves = (
            {"rewind": {"judge_back": ["transform"]}}
            if args.control == "rewind"
            else {"retry_all": ["judge_back"]}
        )
        template = pipeline(
            "faults", fetch, transform, judge_back, control={**moves, "max_handoffs": MAX_HANDOFFS}
        )
    runner = Runner(store=store, pools=[pool], sinks=[sink] if sink else [], **_run_options(args))
    specs = template.map(seeds(args), key_of=lambda s: s["id"])
    code = 0
    try:
        with runner:
            if args.fault == "cancel":
                code = asyncio.run(_cancelled_run(runner, specs, args.n, result))
            else:
                try:
                    report = runner.run(specs)
                except PyAttackerError as exc:
                    result["exception"] = type(exc).__name__
                    result["error"] = str(exc)
                    code = 2
                else:
                    result["report"] = report.to_dict()
                    code = report.exit_code
    finally:
        stats = pool.stats()
        result["pool_active"] = stats.active
        result["pool_leaked"] = stats.leaked_total
        if sink is not None:
            result["sink_raised"] = sink.raised
            result["sink_calls"] = sink.calls
    return code


async def _cancelled_run(runner: Any, specs: Any, after: int, result: dict[str, Any]) -> int:
    """Cancel ``run_async`` from outside once ``after`` attempts started; CancelledError must surface."""
    job = asyncio.ensure_future(runner.run_async(specs))
    while not job.done() and runner.counters["attempts"] < after:
        await asyncio.sleep(0.002)
    result["cancelled_while_running"] = not job.done()
    job.cancel()
    try:
        await job
    except asyncio.CancelledError:
        result["exception"] = "CancelledError"
        return 130
    except BaseException as exc:  # recorded as evidence: anything but CancelledError is a breach
        result["exception"] = type(exc).__name__
        result["error"] = str(exc)
        return 2
    result["exception"] = None
    return 0


def _cli_config(args: argparse.Namespace, workdir: Path) -> Path:
    data = workdir / f"data-{args.variant}.jsonl"
    data.write_text("".join(json.dumps(s) + "\n" for s in seeds(args)))
    chain = ["fetch", "transform", "judge"] + (["extra"] if args.variant == "chain" else [])
    run = {"store": args.store, **_run_options(args)}
    run.pop("resume")
    config = {
        "run": run,
        "pools": {
            POOL: {"kind": "llm", "resources": [{"id": "r1", "capacity": 3}, {"id": "r2", "capacity": 3}]}
        },
        "pipeline": {"name": "faults", "tasks": [{"use": f"tests.faults.child:{name}"} for name in chain]},
        "source": {"kind": "jsonl", "path": str(data), "key_field": "id"},
    }
    path = workdir / f"config-{args.variant}.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def run_cli(args: argparse.Namespace, result: dict[str, Any]) -> int:
    """The real ``pyattacker resume`` command, with the store wrapped (for its exit code)."""
    import pyattacker.cli.run as cli_run
    import pyattacker.engine.runner as runner_mod
    from pyattacker.cli.main import main as cli_main

    workdir = Path(args.workdir or Path(args.ledger).parent)
    config = _cli_config(args, workdir)
    real_open = runner_mod.open_store
    real_execute = cli_run.execute
    pools: list[Any] = []

    def wrapped_open(uri: Any, **kwargs: Any) -> Any:
        store = _wrap(real_open(uri, **kwargs), args)
        result["store_wrapper"] = store
        return store

    def spying_execute(config: Any, pools_: list[Any], *rest: Any, **kwargs: Any) -> Any:
        pools.extend(pools_)
        return real_execute(config, pools_, *rest, **kwargs)

    runner_mod.open_store = wrapped_open
    cli_run.execute = spying_execute  # type: ignore[assignment]
    out, err = io.StringIO(), io.StringIO()
    argv = ["resume", "-c", str(config), "--summary-format", "json"]
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli_main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    result["stdout"] = out.getvalue()[-4000:]
    result["stderr"] = err.getvalue()[-4000:]
    with contextlib.suppress(ValueError):
        result["report"] = json.loads(out.getvalue())
    if pools:
        stats = pools[0].stats()
        result["pool_active"] = stats.active
        result["pool_leaked"] = stats.leaked_total
    return code


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.faults.child", description=__doc__)
    p.add_argument("--store", required=True, help="store URI (sqlite:/x.db, jsonl:/dir)")
    p.add_argument("--backend", default="inline", help="inline | file:<root> (min_bytes=0)")
    p.add_argument("--ledger", required=True, help="audit ledger the tasks append to")
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument(
        "--kind",
        choices=(*WRITE_KINDS, *CONTROL_KINDS),
        default="checkpoint",
        help="store write a crash follows",
    )
    p.add_argument("--control", choices=("none", *CONTROL_KINDS), default="none", help="a loop (sdk only)")
    p.add_argument("--n", type=int, default=0, help="occurrence / commits / limit, depending on --fault")
    p.add_argument("--pipelines", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pause", type=float, default=0.0, help="seconds each task holds its lease")
    p.add_argument("--doom-every", type=int, default=0, help="every N-th pipeline fails for good")
    p.add_argument("--variant", choices=("base", "chain", "seed"), default="base")
    p.add_argument("--via", choices=("sdk", "cli"), default="sdk")
    p.add_argument("--fresh-restart", action="store_true", help="accept a store that lost data")
    p.add_argument("--workdir", help="CLI mode: where to write the config and data files")
    p.add_argument("--result", help="write a JSON result here (not written when the child crashes)")
    p.add_argument("--crash-note", help="write what the crashing batch held here, just before dying")
    return p


def main(argv: list[str] | None = None) -> int:
    global _control
    args = build_parser().parse_args(argv)
    _control = args.control
    os.environ[LEDGER_ENV] = os.path.abspath(args.ledger)
    result: dict[str, Any] = {"fault": args.fault, "kind": args.kind, "n": args.n}
    code = run_cli(args, result) if args.via == "cli" else run_sdk(args, result)
    wrapper = result.pop("store_wrapper", None)
    if wrapper is not None:
        result["occurrences"] = wrapper.counts
        result["commits"] = wrapper.commits
        result["refused_commits"] = wrapper.refused
    result["exit_code"] = code
    if args.result:
        Path(args.result).write_text(json.dumps(result, default=str))
    return code


if __name__ == "__main__":
    sys.exit(main())
