"""The plugin API: every kind's contract on one page.

A plugin provides objects of nine kinds through the hooks in ``pyattacker.plugins.hookspecs``.
Each kind's contract is here, as a Protocol (what the kernel calls) and, where a kind has
optional parts, a base class that gives them safe defaults, so a plugin implements the one or
two things that make it what it is and inherits the rest:

* **tasks** -- ``register(name, spec_or_factory)``: a ``TaskSpec`` (``@task``) or a
  ``TaskFactory`` returning one.
* **algorithms** -- ``register(name, factory)``: ``factory(**params)`` returns an ``Algorithm``.
* **codecs** -- ``register(codec)``: a ``Codec`` (base: ``CodecBase``).
* **stores** -- ``register(opener)``: a ``StoreOpener`` (base: ``StoreOpenerBase``) whose
  ``open`` returns a ``Store`` (base: ``StoreBase``).
* **artifact_backends** -- ``register(kind, factory)``: ``factory(**params)`` returns an
  ``ArtifactBackend`` (base: ``ArtifactBackendBase``).
* **event_sinks** -- ``register(name, factory)``: ``factory(**options)`` returns an
  ``EventSink`` (base: ``EventSinkBase``).
* **sources** -- ``register(kind, source)``: a ``Source`` (base: ``SourceBase``).
* **commands** -- ``register(command)``: a ``Command`` (a click command or ``LazyCommand``).
* **shard_executors** -- ``register(name, factory)``: ``factory(**options)`` returns a
  ``ShardExecutor`` (base: ``ShardExecutorBase``) whose ``submit`` returns a ``ShardHandle``.

``API_VERSION`` is the version of these contracts. A plugin module may say which version it was
written for with a module attribute ``PYATTACKER_PLUGIN_API = 2``; ``pyattacker plugins --json``
shows, per plugin, the version it was checked against, and a plugin written for a version this
kernel does not offer is listed as failed with that reason instead of failing during a run.
docs/plugins.md describes each kind in prose; a test keeps it in step with this page.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pyattacker.errors import ConfigError, PluginError, StoreUnavailable
from pyattacker.model import ArtifactRecord, EventRecord
from pyattacker.plugins.paging import page_of
from pyattacker.plugins.rowset import BatchRows, RowSet
from pyattacker.plugins.store_base import (
    PAGE_KINDS,
    Store,
    StoreBase,
    StoreOpener,
    StoreOpenerBase,
    Totals,
    iter_rows,
    location_path,
)

if TYPE_CHECKING:  # types of higher layers, named in signatures only
    from pyattacker.flow.taskspec import TaskSpec
    from pyattacker.resources.algorithm import AcquireContext
    from pyattacker.resources.lease import Lease
    from pyattacker.resources.pool import Pool
    from pyattacker.shard.executor import ShardJob, ShardStatus

__all__ = [
    "API_VERSION",
    "KIND_CONTRACTS",
    "OLDEST_API_VERSION",
    "PAGE_KINDS",
    "PluginError",
    "Algorithm",
    "ArtifactBackend",
    "ArtifactBackendBase",
    "Codec",
    "CodecBase",
    "Command",
    "ConfigError",
    "EventSink",
    "EventSinkBase",
    "BatchRows",
    "Register",
    "RegisterNamed",
    "RegisterObject",
    "RowSet",
    "ShardExecutor",
    "ShardExecutorBase",
    "ShardHandle",
    "Source",
    "SourceBase",
    "Store",
    "StoreBase",
    "StoreOpener",
    "StoreOpenerBase",
    "StoreUnavailable",
    "TaskFactory",
    "Totals",
    "iter_rows",
    "page_of",
    "location_path",
]

#: The version of the contracts on this page. 2: a store opener receives the location exactly
#: as written (scheme included; ``location_path`` strips it), stores declare capabilities as
#: class attributes (``supports_handoffs``) and get optional reads from ``StoreBase``.
API_VERSION = 2
#: The oldest version still accepted. A version-1 store opener is handed the location with its
#: scheme stripped, as version 1 did; ``applies_resets = True`` is read as ``supports_handoffs``.
OLDEST_API_VERSION = 1


# -- register callbacks ---------------------------------------------------------------------------
class RegisterNamed(Protocol):
    """``register(name, obj)``: the hooks of kinds whose objects carry no name of their own."""

    def __call__(self, name: str, obj: Any, /) -> None: ...


class RegisterObject(Protocol):
    """``register(obj)``: codecs, store openers and commands carry their own ``name``
    (``register(name, obj)`` is accepted too)."""

    def __call__(self, obj: Any, /) -> None: ...


#: what a registration hook receives (either form above)
Register = Callable[..., None]


# -- tasks ----------------------------------------------------------------------------------------
class TaskFactory(Protocol):
    """A registered task is a ``TaskSpec`` (made with ``@task``) or a factory returning one; a
    config's ``kwargs:`` are the factory's keyword arguments."""

    def __call__(self, **kwargs: Any) -> TaskSpec: ...


# -- algorithms -----------------------------------------------------------------------------------
@runtime_checkable
class Algorithm(Protocol):
    """An acquisition policy, built by ``factory(**params)``.

    Required: ``name``, ``acquire`` and ``fingerprint`` (strict JSON: part of the pipeline
    identity). Optional: ``try_now(pool, *, ctx, where, selector) -> Lease | None``, a
    synchronous first try with the semantics of ``acquire``'s first step (None: ``acquire``
    runs); ``referenced_pools() -> Iterable[str]`` and ``fallback`` (another algorithm), which
    ``validate`` checks against the config's pools.
    """

    name: str

    async def acquire(
        self,
        pool: Pool,
        *,
        ctx: AcquireContext | None,
        where: Any,
        timeout: float | None,
        selector: Mapping[str, Any],
    ) -> Lease: ...

    def fingerprint(self) -> dict[str, Any]: ...


# -- codecs ---------------------------------------------------------------------------------------
class Codec(Protocol):
    """Turns artifact values into bytes and back.

    Required: ``name``, ``can_encode``, ``encode``, ``decode``. ``types`` (claimed outright) and
    ``priority`` (higher first when several accept a value) default to ``()`` and 0 on
    ``CodecBase``. Optional: ``encoder_for(cls)`` returning a function that encodes every value
    of ``cls`` (or None); an ``encode`` that raises hands the value to the next codec.
    """

    name: str
    types: tuple[type, ...]
    priority: int

    def can_encode(self, value: Any) -> bool: ...

    def encode(self, value: Any) -> bytes: ...

    def decode(self, data: bytes, type_name: str, types: dict[str, type]) -> Any: ...


class CodecBase:
    """Defaults for a codec: claims no type outright, lowest priority, no per-type encoder."""

    name: str = ""
    types: tuple[type, ...] = ()
    priority: int = 0

    def encoder_for(self, cls: type) -> Callable[[Any], bytes] | None:
        return None


# -- artifact backends ------------------------------------------------------------------------------
@runtime_checkable
class ArtifactBackend(Protocol):
    """Where artifact bytes live, built by ``factory(**params)``.

    Required: ``name``, ``put(artifact)`` (the row to store, payload possibly moved out with
    ``blob_ref`` set; durable on return), ``hydrate(artifact)`` (payload filled from
    ``blob_ref``, or None when the bytes are gone), ``describe()`` (JSON-able, stored in the
    run row; ``export`` rebuilds the backend with ``factory(**describe() minus kind)``, so no
    secrets). Optional (``ArtifactBackendBase``): ``identity_put = True`` declares ``put``
    returns its argument and does nothing else (a run then skips it); ``prepare_to_write()``
    raises ``ValueError("field: why")`` when a run could not write (a view never calls it).
    """

    name: str

    def put(self, artifact: ArtifactRecord) -> ArtifactRecord: ...

    def hydrate(self, artifact: ArtifactRecord) -> ArtifactRecord: ...

    def describe(self) -> dict[str, Any]: ...


class ArtifactBackendBase:
    """Defaults for an artifact backend: ``put`` is called, nothing to prepare, described by kind."""

    name: str = ""
    identity_put: bool = False

    def describe(self) -> dict[str, Any]:
        return {"kind": self.name}

    def prepare_to_write(self) -> None:
        return None


# -- event sinks ----------------------------------------------------------------------------------
@runtime_checkable
class EventSink(Protocol):
    """Receives committed events, built by ``factory(**options)``.

    Required: ``handle(events)``, called once per committed batch (never per event); an error
    is counted and reported once and never stops a run. ``close()`` is called at the end of the
    run. Optional on the factory: ``validate(options) -> list[str]`` ("field: message" per
    problem) so ``validate`` checks values without building the sink.
    """

    def handle(self, events: list[EventRecord]) -> None: ...

    def close(self) -> None: ...


class EventSinkBase:
    """Defaults for an event sink: nothing to close, every option value accepted."""

    def close(self) -> None:
        return None

    @staticmethod
    def validate(options: Mapping[str, Any]) -> list[str]:
        return []


# -- sources --------------------------------------------------------------------------------------
@runtime_checkable
class Source(Protocol):
    """Where seeds come from, registered by kind (``source: {kind: ...}``).

    Required: ``options`` (a msgspec Struct type validating the ``source:`` section) and
    ``open(options, base_dir)`` yielding ``(key_or_None, seed)`` lazily. Optional
    (``SourceBase``): ``count(options, base_dir) -> int | None`` (the total without reading
    data, for progress), ``check(options, base_dir)`` (raise ``ConfigError`` naming the field
    when the data is not there; called before a run starts).
    """

    options: type

    def open(self, options: Any, base_dir: Path) -> Iterable[tuple[str | None, Any]]: ...


class SourceBase:
    """Defaults for a source: the count is unknown, nothing to check before reading."""

    def count(self, options: Any, base_dir: Path) -> int | None:
        return None

    def check(self, options: Any, base_dir: Path) -> None:
        return None


# -- commands -------------------------------------------------------------------------------------
@runtime_checkable
class Command(Protocol):
    """A CLI subcommand: a (rich-)click command, or a ``LazyCommand(name, "module:attr")`` that
    imports it only when the command line needs it."""

    name: str | None

    def main(self, *args: Any, **kwargs: Any) -> Any: ...


# -- shard executors --------------------------------------------------------------------------------
@runtime_checkable
class ShardHandle(Protocol):
    """A submitted shard. ``interrupt`` is one more Ctrl-C (the first stops the shard
    gracefully, leaving everything resumable; the second stops it at once); ``cancel`` makes
    sure it stops: interrupt if not yet done, wait up to a grace, then force, then wait.
    Optional: ``kill()`` stops it now (without it, one more ``interrupt()``) and
    ``wait_fds()`` (descriptors to wait on between polls)."""

    def poll(self) -> ShardStatus | None: ...

    def wait(self, timeout: float | None = None) -> ShardStatus: ...

    def interrupt(self) -> None: ...

    def cancel(self) -> ShardStatus: ...


@runtime_checkable
class ShardExecutor(Protocol):
    """Starts shards, built by ``factory(**options)``. Required: ``submit(job) -> ShardHandle``.
    Optional (``ShardExecutorBase``): ``close()``, called last (release a cluster connection)."""

    def submit(self, job: ShardJob) -> ShardHandle: ...


class ShardExecutorBase:
    """Defaults for a shard executor: nothing to release."""

    def close(self) -> None:
        return None


#: kind -> its contract and base classes, in the order docs/plugins.md lists them (a test keeps
#: the two in step)
KIND_CONTRACTS: dict[str, tuple[type, ...]] = {
    "tasks": (TaskFactory,),
    "algorithms": (Algorithm,),
    "codecs": (Codec, CodecBase),
    "stores": (StoreOpener, Store, StoreOpenerBase, StoreBase),
    "artifact_backends": (ArtifactBackend, ArtifactBackendBase),
    "event_sinks": (EventSink, EventSinkBase),
    "sources": (Source, SourceBase),
    "commands": (Command,),
    "shard_executors": (ShardExecutor, ShardHandle, ShardExecutorBase),
}
