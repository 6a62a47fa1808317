"""Admission: seeds come in lazily, are checked against the store in chunks, and enter the run
up to ``max_admitted`` at a time.

Memory stays O(concurrency), never O(dataset): the specs are consumed as an iterator, one chunk
of stored rows is looked up at a time, and the producer waits for room before it admits more.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable
from typing import Any

from pyattacker.engine.attempts import reserve
from pyattacker.engine.outcomes import Outcomes
from pyattacker.engine.resume import Resumer
from pyattacker.engine.state import PipelineState, RunState
from pyattacker.engine.telemetry import Telemetry
from pyattacker.engine.workqueue import WorkQueue
from pyattacker.errors import ConfigError, PipelineIdentityConflict
from pyattacker.flow.chain import PipelineSpec
from pyattacker.model import PipelineRecord

__all__ = ["Admission", "check_specs"]

#: seeds looked up in the store per query
LOOKUP_CHUNK = 512
_SPEC_TYPE = {PipelineSpec}

#: ``(state, spec_digest, seed_digest, run_id)`` of a stored pipeline
StoredState = tuple[str, str, str, str]


def check_specs(chunk: list[Any]) -> None:
    """Refuse an admitted chunk holding anything but ``PipelineSpec``s, naming the first stray
    item's type. Usually one set of the items' types, in C (a resume checks a million seeds);
    only a chunk with another type (a subclass, or a stray value) is checked item by item."""
    if set(map(type, chunk)) == _SPEC_TYPE:
        return
    for item in chunk:
        if not isinstance(item, PipelineSpec):
            raise ConfigError(f"run() takes PipelineSpecs (template.map(...)), got {type(item).__name__}")


class Admission:
    """The producer of one run: it admits pipelines onto the work queue."""

    def __init__(
        self,
        run: RunState,
        telemetry: Telemetry,
        resumer: Resumer,
        outcomes: Outcomes,
        staff: Any,
        hold: Callable[[PipelineState, Any], None],
    ) -> None:
        self.run = run
        self.event = telemetry.event
        self.resumer = resumer
        self.outcomes = outcomes
        #: ``Scheduler.staff``: a worker for the pipeline about to be queued
        self.staff = staff
        #: ``Scheduler.hold``: queue a pipeline once the next group commit is durable
        self.hold = hold
        #: templates whose tasks' algorithm names this run's plugins resolved
        self._checked: set[int] = set()

    async def produce(self, specs: Iterable[PipelineSpec], queue: WorkQueue[PipelineState | None]) -> None:
        run = self.run
        assert run.capacity is not None
        limit = run.config.admitted_limit
        counters = run.counters
        control = self.resumer.control
        iterator = iter(specs)
        try:
            while not run.stopping:
                chunk = list(itertools.islice(iterator, LOOKUP_CHUNK))
                if not chunk:
                    break
                check_specs(chunk)
                self._check_algorithms(chunk)
                rows, states = self.lookup([s.key for s in chunk])
                seen: dict[str, PipelineSpec] = {}
                active = run.active
                for spec in chunk:
                    if run.stopping:
                        break
                    key = spec.key
                    if key in seen or key in active:
                        first = seen.get(key)
                        self.duplicate(spec, first if first is not None else active[key])
                        continue
                    seen[key] = spec
                    done = states.get(key)
                    if done is not None and done[0] == "succeeded":
                        if (
                            done[1] == spec.template.spec_digest
                            and done[2] == spec.seed_digest
                            and done[3] != run.run_id
                            and not run.trace
                        ):  # finished already, unchanged: the usual skip of a resume, once per seed
                            counters["skipped"] += 1
                            run.skipped_quietly += 1
                            continue
                        state = self._reopen(spec, done)
                    else:
                        state = self.resumer.open(spec, rows.get(key))
                    if state is None:
                        continue
                    while run.admitted - run.done >= limit and not run.stopping:
                        run.capacity.clear()
                        await run.capacity.wait()
                    if run.stopping:
                        # admitted bookkeeping never happened: leave the row as it was
                        break
                    run.admitted += 1
                    counters["pipelines_admitted"] += 1
                    active[key] = spec
                    if control is not None and spec.template.control is not None:
                        control.admitted(state)  # a restart from the seed: its reset
                    if state.reserve:  # resumed: runs once its attempt number is durable
                        reserve(run, state)
                        self.hold(state, queue)
                        continue
                    self.staff(queue)
                    if queue.offer(state):  # room in the queue (no coroutine): the usual case
                        continue
                    await self._put(queue, state)
                if queue.qsize():
                    # once per chunk: the workers started for it take their pipelines now, so
                    # the first tasks of a run at concurrency 4,096 start after one chunk's
                    # admission, not after the queue's 8,192 (half a second on this machine)
                    await asyncio.sleep(0)
        finally:
            run.producer_done = True
            run.check_complete()

    def _check_algorithms(self, chunk: list[PipelineSpec]) -> None:
        """Resolve each new template's task algorithms through this runner's plugins, once per
        template: a name no plugin knows stops the run before its first pipeline (a
        ``ConfigError`` with a did-you-mean), instead of failing every pipeline's first lease.
        (A task's fingerprint cannot check it: it is taken before any runner holds the plugins.)"""
        templates = {id(s.template): s.template for s in chunk}
        if templates.keys() <= self._checked:
            return
        resolve = self.run.runner.algorithms.resolve
        for tid, template in templates.items():
            if tid not in self._checked:
                for spec in template.tasks:
                    if spec.algorithm is not None:
                        resolve(spec.algorithm)
                self._checked.add(tid)

    async def _put(self, queue: WorkQueue[PipelineState | None], state: PipelineState) -> None:
        try:
            await queue.put(state)
        except asyncio.CancelledError:
            self.outcomes.interrupt(state, "queued")  # admitted but never handed to a worker
            raise

    def _reopen(self, spec: PipelineSpec, stored: StoredState) -> PipelineState | None:
        """A key stored as succeeded that is not skipped quietly: skipped with an event when its
        identity is the same, else opened so that the changed identity is refused there."""
        _state, spec_digest, seed_digest, run_id = stored
        run = self.run
        if spec_digest == spec.template.spec_digest and seed_digest == spec.seed_digest:
            # finished already; by this run: the key was given twice
            self.resumer.skip(spec, "succeeded" if run_id != run.run_id else "duplicate_key")
            return None
        row = PipelineRecord(
            pipeline_id=spec.key, run_id=run_id, name="", key=spec.key, state="succeeded",
            spec_digest=spec_digest, seed_digest=seed_digest,
        )  # fmt: skip
        return self.resumer.open(spec, row)

    def lookup(self, keys: list[str]) -> tuple[dict[str, PipelineRecord], dict[str, StoredState]]:
        """Stored rows for ``keys`` that a resume has to look at, and ``(state, spec_digest,
        seed_digest, run_id)`` per stored key. ``lookup_states`` answers the common case of a
        resume (already succeeded: skip) from those four narrow columns (SQLite builds no record
        per row for them); only the rows in another state are read in full."""
        run = self.run
        store = run.store
        if run.config.retry_succeeded or run.config.fresh_restart:
            return store.lookup_pipelines(keys), {}
        states = store.lookup_states(keys)
        rest = [key for key, st in states.items() if st[0] != "succeeded"]
        return (store.lookup_pipelines(rest) if rest else {}), states

    def duplicate(self, spec: PipelineSpec, first: PipelineSpec) -> None:
        """A key admitted a second time while its first spec is queued or running: the same
        seed and chain is one pipeline (skipped, ``duplicate_key``); another seed or chain under
        the key is refused, as a resume refuses it, instead of being dropped in silence."""
        if first.seed_digest == spec.seed_digest and first.template.spec_digest == spec.template.spec_digest:
            self.resumer.skip(spec, "duplicate_key")
            return
        what = "task chain" if first.template.spec_digest != spec.template.spec_digest else "seed"
        err = PipelineIdentityConflict(
            f"pipeline {spec.key!r} is given twice in this run with a different {what}; a key"
            " names one pipeline: make the keys unique (the source's key_field) or drop the"
            " duplicate row"
        )
        self.event("pipeline.identity_conflict", "pipeline", pipeline_id=spec.key, data={"error": str(err)})
        raise err
