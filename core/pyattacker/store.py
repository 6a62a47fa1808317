"""The Store protocol that store plugins implement, and how a location picks its plugin.

A store applies a ``Batch`` atomically (``commit``) and answers a small set of reads. All
methods are synchronous on purpose: a critical write must not be interruptible by task
cancellation. Everything fancier (group commit, write-behind) lives in the kernel's recorder,
so a third-party store only has to be correct, not clever.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .errors import ConfigError
from .model import (
    ArtifactRecord,
    Batch,
    MetricPoint,
    MetricRecord,
    PipelineRecord,
    ResourceRecord,
    RunRecord,
)

__all__ = [
    "PAGE_KINDS",
    "Store",
    "StoreOpener",
    "iter_rows",
    "local_file",
    "location_problem",
    "open_store",
    "rebase_local",
    "resolve_opener",
    "scheme_of",
]

#: Row kinds with keyset paging, and the order each is returned in (the last key is unique).
PAGE_KINDS: dict[str, tuple[str, ...]] = {
    "pipelines": ("created_at", "pipeline_id"),
    "tasks": ("pipeline_id", "seq"),
    "attempts": ("attempt_id",),
    "events": ("event_id",),
    "artifacts": ("pipeline_id", "seq"),
}


@runtime_checkable
class Store(Protocol):
    """What every store plugin provides. See docs/plugins.md for the full contract.

    Optional capabilities are probed, not declared here (a protocol member would make every
    store need it): pipelines with control need ``handoffs(pipeline_id)`` and the class
    attribute ``applies_resets = True`` (``commit`` applies ``Batch.resets``). A store whose
    durability comes after the commit returns may offer ``commit_behind(batch)``, returning
    ``None`` (durable already) or a ``concurrent.futures.Future`` resolved once it is; the
    recorder then uses it for group commits (``commit`` must still return durable); it is
    looked up on the class, so a wrapper that forwards attributes does not bypass its ``commit``.
    """

    #: the location it was opened from (for messages and reports)
    location: str
    read_only: bool

    def commit(self, batch: Batch) -> None:
        """Apply every row of ``batch`` in one transaction, or none of them and raise.

        Appended attempts and events get their ``attempt_id`` / ``event_id`` assigned.
        """

    def lookup_pipelines(self, ids: Sequence[str]) -> dict[str, PipelineRecord]:
        """The stored rows among ``ids`` (missing ids are absent from the result)."""

    def get_artifact(self, pipeline_id: str, seq: int) -> ArtifactRecord | None:
        """The artifact at a slot (``seq=-1`` is the seed); payload as stored, not hydrated."""

    def interrupt_running(self, run_id: str, now: float) -> int:
        """Mark every ``running`` pipeline, task and run not owned by ``run_id`` interrupted.

        Called at the start of each writing run: the store's writer lock proves that whoever
        left those rows is gone. Returns the number of pipelines changed.
        """

    def get_run(self, run_id: str) -> RunRecord | None: ...

    def runs(self) -> list[RunRecord]:
        """Every run, oldest first (by ``started_at``)."""

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
        ``state`` applies to pipelines; ``pipeline_id`` to every kind.
        """

    def metrics(self, run_id: str | None = None, pipeline_id: str | None = None) -> list[MetricRecord]:
        """Latest application values (``pipeline_id=''`` is the run scope)."""

    def metric_points(
        self, run_id: str, pipeline_id: str, key: str | None = None, after_step: int = -1, limit: int = 1000
    ) -> list[MetricPoint]: ...

    def resources(self, run_id: str | None = None) -> list[ResourceRecord]: ...

    def close(self) -> None: ...


class StoreOpener(Protocol):
    """Registered through ``pyattacker_stores``: opens stores for some URI schemes / suffixes."""

    name: str
    schemes: tuple[str, ...]
    suffixes: tuple[str, ...]

    def open(self, location: str, *, read_only: bool = False) -> Store:
        """Open (creating if allowed) the store at ``location`` (scheme already stripped)."""


#: schemes whose location is a path on this machine (a third-party scheme may be anything)
_FILE_SCHEMES = (None, "file", "sqlite", "jsonl")
#: schemes the kernel itself reads as a plain path (no store plugin needed)
_PATH_SCHEMES = (None, "file")


def local_file(location: str) -> str | None:
    """The path on this machine a store location names (scheme and ``?options`` removed), or
    None for an in-memory or a third-party location. Used where a command must not mistake a
    store for something else: ``export``'s OUTPUT, ``resume`` of a store that is not there."""
    scheme, rest = _scheme_of(location)
    if scheme not in _FILE_SCHEMES:
        return None
    path = rest.split("?", 1)[0]
    return path or None


def scheme_of(location: str) -> str | None:
    """The scheme a location names (``sqlite``, ``jsonl``, ``file``, ``memory``, a plugin's),
    or None for a plain path."""
    return _scheme_of(location)[0]


def rebase_local(location: str, resolve: Callable[[str], str]) -> str:
    """``location`` with the path on this machine it names passed through ``resolve``: the
    scheme of ``sqlite:``/``jsonl:`` and any ``?options`` kept, a ``file://`` one dropped (the
    plain path it names). ``:memory:``, a third-party scheme and an empty path are unchanged.
    A config's ``run.store`` is resolved from the config's folder this way whichever way the
    path is spelled (``sqlite:runs/x.db`` used to be taken from the current folder)."""
    scheme, rest = _scheme_of(location)
    if scheme not in _FILE_SCHEMES:
        return location
    path, sep, options = rest.partition("?")
    if not path:
        return location
    rebased = resolve(path) + sep + options
    return rebased if scheme in _PATH_SCHEMES else f"{scheme}:{rebased}"


def location_problem(location: str, openers: Mapping[str, StoreOpener]) -> str | None:
    """Why ``location`` cannot name a store here, or None: a scheme no installed store plugin
    handles, or nothing after the scheme (``jsonl://`` wrote a store into the current folder,
    ``sqlite:`` into a nameless temporary file). ``validate`` and ``run``/``resume``/``demo``
    ask before touching anything, so such a location is refused first, naming what is installed."""
    scheme, rest = _scheme_of(location)
    problem = _scheme_problem(scheme, location, openers)
    if problem is None and scheme != "memory" and not rest.split("?", 1)[0]:
        what = f"nothing follows {scheme}:" if scheme else "it is empty"
        problem = f"{location!r} names no store: {what} (give a path, e.g. runs/x.db)"
    return problem


def _scheme_problem(scheme: str | None, location: str, openers: Mapping[str, StoreOpener]) -> str | None:
    """None when ``scheme`` is a plain path's or an installed store plugin's."""
    schemes = _schemes(openers)
    if scheme in _PATH_SCHEMES or scheme in schemes:
        return None
    installed = ", ".join(sorted({"file", *schemes}))
    return f"no store plugin handles the scheme {scheme!r} in {location!r} (installed schemes: {installed})"


def _schemes(openers: Mapping[str, StoreOpener]) -> dict[str, StoreOpener]:
    """Scheme -> the opener that registered it."""
    return {s: o for o in openers.values() for s in o.schemes}


def _scheme_of(uri: str) -> tuple[str | None, str]:
    if uri == ":memory:":
        return "memory", ""
    head, sep, rest = uri.partition(":")
    # one-letter schemes are Windows drive letters, not schemes
    if sep and len(head) > 1 and head.replace("+", "").replace("-", "").isalnum():
        if rest.startswith("//"):
            rest = rest[2:]
        return head.lower(), rest
    return None, uri


def resolve_opener(uri: str, openers: Mapping[str, StoreOpener]) -> tuple[StoreOpener, str]:
    """Pick the opener for ``uri``: an explicit scheme, then a file suffix, then the default."""
    scheme, rest = _scheme_of(uri)
    if scheme is not None:
        opener = _schemes(openers).get(scheme)
        if opener is not None:
            return opener, rest
        problem = _scheme_problem(scheme, uri, openers)
        if problem is not None:
            raise ConfigError(f"store {uri!r}: {problem}")
    path = rest
    lowered = path.lower()
    for opener in openers.values():
        if any(lowered.endswith(sfx) for sfx in opener.suffixes):
            return opener, path
    if os.path.isdir(path):
        for opener in openers.values():
            probe = getattr(opener, "recognizes", None)
            if probe is not None and probe(path):
                return opener, path
    if "sqlite" in openers:
        return openers["sqlite"], path
    raise ConfigError(f"store {uri!r}: no store plugin recognises this location")


def open_store(uri: str | os.PathLike[str] | Store, *, read_only: bool = False, plugins: Any = None) -> Store:
    """Open a store by location through the registered store plugins (or pass a Store through)."""
    if not isinstance(uri, str | os.PathLike):
        return uri
    from .plugins import get_plugins

    registry = (plugins or get_plugins()).stores
    opener, location = resolve_opener(os.fspath(uri), registry.objects())
    return opener.open(location, read_only=read_only)


def iter_rows(store: Store, kind: str, *, batch: int = 1000, **filters: Any) -> Iterator[Any]:
    """Every row of ``kind`` in order, read in bounded keyset pages (memory stays flat)."""
    if kind not in PAGE_KINDS:
        raise ConfigError(f"unknown row kind {kind!r}; expected one of {', '.join(PAGE_KINDS)}")
    keys = PAGE_KINDS[kind]
    after: tuple[Any, ...] | None = None
    while True:
        rows = store.page(kind, after=after, limit=batch, **filters)
        yield from rows
        if len(rows) < batch:
            return
        last = rows[-1]
        after = tuple(getattr(last, k) for k in keys)


def default_store_path() -> Path:
    """The embedded default: a SQLite file under the user data directory (PYATTACKER_HOME wins)."""
    home = os.environ.get("PYATTACKER_HOME")
    if home:
        base = Path(home)
    else:
        import platformdirs

        base = Path(platformdirs.user_data_dir("pyattacker", appauthor=False))
    return base / "runs" / "default.db"
