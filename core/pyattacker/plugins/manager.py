"""Plugin discovery and composition.

Startup does, once per process: scan the ``pyattacker.plugins`` entry points (sorted,
de-duplicated; the last scan is reused while the installed metadata is unchanged, see
``plugin_cache``), honour the block / only lists, import each plugin in isolation, register it
with pluggy, validate its hooks (``check_pending`` per plugin), then call its registration
hooks with a provenance-stamped ``register`` so the per-kind registries know who provided
what. Any failure is recorded on that plugin's row and the others keep working.

Environment switches:

* ``PYATTACKER_BLOCK_PLUGINS=a,b``: never import these plugins (names or distributions).
* ``PYATTACKER_ONLY_PLUGINS=a,b``: of the third-party plugins load only these; built-ins
  load unless blocked explicitly (running without them is never what "only" means).
* ``PYATTACKER_TRACE_PLUGINS=1``: print every hook call to stderr.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
import threading
import types
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
import pluggy

from pyattacker.plugins import cache as plugin_cache
from pyattacker.plugins import hookspecs
from pyattacker.plugins.api import API_VERSION
from pyattacker.plugins.registry import (
    Provided,
    RegistrationError,
    Registry,
    check_provided,
    contract_problem,
)

__all__ = [
    "BUILTIN_DIST",
    "BUILTIN_PLUGINS",
    "EntryPointInfo",
    "PluginRow",
    "Plugins",
    "discover",
    "get_plugins",
    "reset_plugins",
]

BUILTIN_DIST = "pyattacker"
BUILTIN_MODULE_PREFIX = "pyattacker_plugins."
#: Built-in plugins the distribution declares (pyproject entry points; a test keeps them in step).
BUILTIN_PLUGINS: tuple[str, ...] = (
    "algo-backoff",
    "algo-failover",
    "algo-least-busy",
    "algo-quota-aware",
    "algo-sticky",
    "algo-wait",
    "backend-file",
    "backend-inline",
    "backend-null",
    "bridge",
    "cmd-bench",
    "cmd-serve",
    "codec-bytes",
    "codec-json",
    "codec-msgpack",
    "executor-local",
    "sink-console",
    "sink-jsonl",
    "source-jsonl",
    "source-range",
    "store-jsonl",
    "store-memory",
    "store-sqlite",
    "task-boom",
    "task-delay",
    "task-echo",
    "task-fanout",
    "task-flaky",
    "task-leaky",
    "task-shell-run",
    "task-simulate-llm",
    "task-write-jsonl",
)
GROUP = "pyattacker.plugins"
#: Simple typed groups read through the bridge plugin: group -> registry kind.
TYPED_GROUPS = {
    "pyattacker.tasks": "tasks",
    "pyattacker.algorithms": "algorithms",
    "pyattacker.codecs": "codecs",
    "pyattacker.stores": "stores",
}


class PluginRow(msgspec.Struct, kw_only=True):
    """One line of ``pyattacker plugins --json``."""

    name: str
    dist: str | None = None
    version: str | None = None
    module: str | None = None
    builtin: bool = False
    status: str = "active"  # active | blocked | failed
    error: str | None = None
    hooks: list[str] = []
    provides: dict[str, list[str]] = {}
    #: the plugin API version it was checked against (its ``PYATTACKER_PLUGIN_API``, else the
    #: current one); None when it was never loaded
    contract: int | None = None


@dataclass
class EntryPointInfo:
    """What discovery needs of an entry point (a test can build these by hand)."""

    name: str
    value: str
    group: str = GROUP
    dist: str | None = None
    version: str | None = None
    loader: Any = None

    def load(self) -> Any:
        if self.loader is not None:
            return self.loader()
        module, _, attr = self.value.partition(":")

        obj = importlib.import_module(module)
        for part in filter(None, attr.split(".")):
            obj = getattr(obj, part)
        return obj

    @property
    def builtin(self) -> bool:
        return self.dist == BUILTIN_DIST and self.value.startswith(BUILTIN_MODULE_PREFIX)


def _split_env(name: str) -> set[str]:
    raw = os.environ.get(name, "")
    return {part.strip() for part in raw.split(",") if part.strip()}


def installed_entry_points(group: str) -> list[EntryPointInfo]:
    """Entry points of ``group`` in the installed metadata, sorted and de-duplicated."""
    return _scan((group,))[group]


def _scan(groups: tuple[str, ...]) -> dict[str, list[EntryPointInfo]]:
    """Every wanted group from ONE pass over the installed distributions (each pass reads the
    metadata of every installed package, so one pass per group would multiply start-up time)."""
    # start-up: only when the cached scan is stale (importing it is a large part of discovery)
    from importlib_metadata import entry_points

    found: dict[str, list[EntryPointInfo]] = {g: [] for g in groups}
    seen: set[tuple[str, str, str]] = set()
    #: (name, version) per distribution object: a package registers many entry points
    names: dict[Any, tuple[str | None, str | None]] = {}
    for ep in entry_points():
        if ep.group not in found or (ep.group, ep.name, ep.value) in seen:
            continue  # another group, or the same distribution twice on sys.path (editable + site)
        seen.add((ep.group, ep.name, ep.value))
        dist = getattr(ep, "dist", None)
        ident = names.get(dist)
        if ident is None:
            ident = names[dist] = _name_and_version(dist)
        found[ep.group].append(
            EntryPointInfo(name=ep.name, value=ep.value, group=ep.group, dist=ident[0], version=ident[1])
        )
    for infos in found.values():
        # built-ins first so that a third party can never shadow one; then by name
        infos.sort(key=lambda e: (not e.builtin, e.name, e.value))
    return found


def _name_and_version(dist: Any) -> tuple[str | None, str | None]:
    """A distribution's ``Name`` and ``Version`` from the head of its METADATA file.

    Both are required single-line fields of the core metadata, at the top of the header block.
    ``dist.name`` / ``dist.version`` would parse the whole file with the e-mail package (imported
    for it, in every process that discovers plugins); they remain the fallback.
    """
    try:
        text = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
    except Exception:
        text = None
    if text:
        found: dict[str, str] = {}
        for line in text.splitlines():
            if not line.strip():
                break  # end of the header block
            key, sep, value = line.partition(":")
            if sep and key.strip().lower() in ("name", "version"):
                found.setdefault(key.strip().lower(), value.strip())
                if len(found) == 2:
                    return found["name"], found["version"]
    return getattr(dist, "name", None), getattr(dist, "version", None)


class _Registrar:
    """The ``register`` callback handed to one plugin's registration hook for one kind."""

    def __init__(self, plugins: Plugins, row: PluginRow, kind: str, pending: list[Provided]) -> None:
        self._plugins = plugins
        self._row = row
        self._kind = kind
        self._pending = pending

    def __call__(self, *args: Any, origin: EntryPointInfo | None = None) -> None:
        if len(args) == 1:
            obj = args[0]
            name = getattr(obj, "name", None)
        elif len(args) == 2:
            name, obj = args
        else:
            raise RegistrationError(f"register() takes (obj) or (name, obj), got {len(args)} arguments")
        if origin is not None:
            self._plugins._register_typed(self._kind, name, obj, origin)
            return
        check_provided(self._kind, name, obj)
        assert isinstance(name, str)
        contract = self._row.contract or API_VERSION
        self._pending.append(Provided(self._kind, name, obj, self._row.name, self._row.builtin, contract))

    def entry_points(self, group: str) -> list[EntryPointInfo]:
        """The typed-group entry points discovery found (read by the bridge plugin)."""
        return list(self._plugins.typed_entry_points.get(group, []))

    def failed(self, origin: EntryPointInfo, error: BaseException | str) -> None:
        """Record a typed entry point that could not be loaded (used by the bridge plugin)."""
        self._plugins._typed_row(origin, status="failed", error=_describe(error))


def _describe(error: BaseException | str) -> str:
    if isinstance(error, str):
        return error
    return f"{type(error).__name__}: {error}"


class _Manager(pluggy.PluginManager):
    """pluggy's manager, with a cheaper look at a module plugin's attributes.

    ``register`` asks ``parse_hookimpl_opts`` about every name in ``dir(plugin)``, and pluggy
    reads each through ``inspect.getattr_static`` (so that no property runs). A module's names
    are its ``__dict__`` and hold no descriptors, and most are its imports: anything that is not
    a function carrying our marker is skipped here after one dict read, and the rest takes
    pluggy's own path. The same hooks are found, without a static lookup per imported name.
    """

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        if type(plugin) is types.ModuleType:
            value = plugin.__dict__.get(name)
            if type(value) is types.FunctionType:
                if getattr(value, self.project_name + "_impl", None) is None:  # the marker
                    return None
            elif not isinstance(value, (staticmethod, classmethod, types.MethodType)):
                return None  # a module, class, constant...: never a hook implementation
        return super().parse_hookimpl_opts(plugin, name)


class Plugins:
    """The composed result of discovery: per-kind registries plus one row per plugin."""

    def __init__(self) -> None:
        self.pm = _Manager("pyattacker")
        self.pm.add_hookspecs(hookspecs)
        self.rows: dict[str, PluginRow] = {}
        self.registries: dict[str, Registry] = {
            kind: Registry(kind) for kind in hookspecs.HOOK_KINDS.values()
        }
        self.typed_entry_points: dict[str, list[EntryPointInfo]] = {}
        if os.environ.get("PYATTACKER_TRACE_PLUGINS"):
            self.pm.trace.root.setwriter(sys.stderr.write)
            self.pm.enable_tracing()

    # -- registries by kind -------------------------------------------------------------
    @property
    def tasks(self) -> Registry:
        return self.registries["tasks"]

    @property
    def algorithms(self) -> Registry:
        return self.registries["algorithms"]

    @property
    def codecs(self) -> Registry:
        return self.registries["codecs"]

    @property
    def stores(self) -> Registry:
        return self.registries["stores"]

    @property
    def artifact_backends(self) -> Registry:
        return self.registries["artifact_backends"]

    @property
    def event_sinks(self) -> Registry:
        return self.registries["event_sinks"]

    @property
    def sources(self) -> Registry:
        return self.registries["sources"]

    @property
    def commands(self) -> Registry:
        return self.registries["commands"]

    @property
    def shard_executors(self) -> Registry:
        return self.registries["shard_executors"]

    # -- loading ------------------------------------------------------------------------
    def add_plugin(
        self,
        obj: Any,
        name: str,
        *,
        builtin: bool = False,
        dist: str | None = None,
        version: str | None = None,
        module: str | None = None,
    ) -> PluginRow:
        """Register an already imported plugin object (tests and embedding use this directly)."""
        row = PluginRow(
            name=name,
            dist=dist,
            version=version,
            module=module or getattr(obj, "__name__", type(obj).__name__),
            builtin=builtin,
        )
        self.rows[name] = row
        declared = getattr(obj, "PYATTACKER_PLUGIN_API", API_VERSION)
        problem = contract_problem(declared)
        if problem is not None:
            row.status, row.error = "failed", problem
            return row
        row.contract = declared
        try:
            self._misnamed_hooks(obj)
            self.pm.register(obj, name=name)
        except Exception as exc:
            row.status, row.error = "failed", _describe(exc)
            return row
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            self.pm.unregister(obj)
            row.status, row.error = "failed", _describe(exc)
            return row
        row.hooks = sorted(self._hook_names(obj))
        try:
            self._collect(obj, row)
        except Exception as exc:
            self.pm.unregister(obj)
            for registry in self.registries.values():
                registry.remove_plugin(name)
            row.status, row.error = "failed", _describe(exc)
            row.provides = {}
        return row

    def _misnamed_hooks(self, obj: Any) -> None:
        known = set(hookspecs.HOOK_KINDS)
        for attr in dir(obj):
            if not attr.startswith("pyattacker_") or attr in known:
                continue
            value = getattr(obj, attr, None)
            if callable(value) and hasattr(value, "pyattacker_impl"):
                hint = difflib.get_close_matches(attr, known, n=1)
                extra = f" (did you mean {hint[0]}?)" if hint else ""
                raise RegistrationError(f"unknown hook {attr!r}{extra}")

    def _hook_names(self, obj: Any) -> list[str]:
        """The hooks ``obj`` implements, once per implementation (the callers pluggy found)."""
        return [
            caller.name
            for caller in self.pm.get_hookcallers(obj) or ()
            if caller.name in hookspecs.HOOK_KINDS
            for impl in caller.get_hookimpls()
            if impl.plugin is obj
        ]

    def _collect(self, obj: Any, row: PluginRow) -> None:
        pending: list[Provided] = []
        for hook_name, kind in hookspecs.HOOK_KINDS.items():
            caller = getattr(self.pm.hook, hook_name)
            for impl in caller.get_hookimpls():
                if impl.plugin is obj:
                    impl.function(register=_Registrar(self, row, kind, pending))
        added: list[Provided] = []
        try:
            for item in pending:
                registry = self.registries[item.kind]
                existing = registry.provider(item.name)
                if existing is not None and existing.builtin and not item.builtin:
                    raise RegistrationError(
                        f"{item.kind} {item.name!r} is already provided by built-in plugin"
                        f" {existing.plugin!r}; a third-party plugin cannot shadow a built-in"
                    )
                registry.add(item)
                added.append(item)
        except RegistrationError:
            for item in added:
                self.registries[item.kind].remove_plugin(row.name)
            raise
        provides: dict[str, list[str]] = {}
        for item in pending:
            provides.setdefault(item.kind, []).append(item.name)
        row.provides = {k: sorted(v) for k, v in sorted(provides.items())}

    def _typed_row(
        self, origin: EntryPointInfo, *, status: str = "active", error: str | None = None
    ) -> PluginRow:
        name = f"{origin.group}:{origin.name}"
        row = self.rows.get(name)
        if row is None:
            row = PluginRow(
                name=name,
                dist=origin.dist,
                version=origin.version,
                module=origin.value,
                builtin=False,
                hooks=[f"entry-point {origin.group}"],
                contract=API_VERSION,
            )
            self.rows[name] = row
        if status != "active":
            row.status, row.error = status, error
        return row

    def _register_typed(self, kind: str, name: Any, obj: Any, origin: EntryPointInfo) -> None:
        row = self._typed_row(origin)
        try:
            check_provided(kind, name, obj)
            registry = self.registries[kind]
            existing = registry.provider(name)
            if existing is not None and existing.builtin:
                raise RegistrationError(
                    f"{kind} {name!r} is already provided by built-in plugin {existing.plugin!r};"
                    " a third-party plugin cannot shadow a built-in"
                )
            registry.add(Provided(kind, name, obj, row.name, False))
            row.provides.setdefault(kind, []).append(name)
        except RegistrationError as exc:
            row.status, row.error = "failed", str(exc)

    def load_entry_points(
        self,
        eps: Iterable[EntryPointInfo],
        *,
        block: set[str] | None = None,
        only: set[str] | None = None,
    ) -> None:
        block = block or set()
        for ep in eps:
            if ep.name in self.rows:
                continue
            row_kwargs: dict[str, Any] = dict(
                dist=ep.dist, version=ep.version, module=ep.value, builtin=ep.builtin
            )
            selected = (not only) or ep.builtin or ep.name in only or (ep.dist in only)
            if ep.name in block or (ep.dist in block and not ep.builtin) or not selected:
                self.rows[ep.name] = PluginRow(name=ep.name, status="blocked", **row_kwargs)
                continue
            try:
                obj = ep.load()
            except BaseException as exc:  # an import may raise anything, even SystemExit
                if isinstance(exc, KeyboardInterrupt):
                    raise
                self.rows[ep.name] = PluginRow(
                    name=ep.name, status="failed", error=_describe(exc), **row_kwargs
                )
                continue
            self.add_plugin(obj, ep.name, **row_kwargs)

    def check_builtins(self, expected: Iterable[str] = BUILTIN_PLUGINS) -> None:
        """A declared built-in that discovery did not find is a visible failure, not a silent gap."""
        for name in expected:
            if name not in self.rows:
                self.rows[name] = PluginRow(
                    name=name,
                    dist=BUILTIN_DIST,
                    builtin=True,
                    status="failed",
                    error=f"built-in plugin {name!r} missing: reinstall with pip install -e .",
                )

    def listing(self) -> list[PluginRow]:
        return [self.rows[name] for name in sorted(self.rows)]

    def failures(self) -> list[PluginRow]:
        return [row for row in self.listing() if row.status == "failed"]


def discover(
    *,
    block: set[str] | None = None,
    only: set[str] | None = None,
    entry_points: Iterable[EntryPointInfo] | None = None,
    typed: dict[str, list[EntryPointInfo]] | None = None,
    rescan: bool = False,
) -> Plugins:
    """Build a fresh ``Plugins`` from the installed entry points (or the ones given).

    The installed ones come from the last scan when nothing it read has changed
    (``plugin_cache``); ``rescan`` reads the metadata again whatever the fingerprint says.
    """
    plugins = Plugins()
    scanned: dict[str, list[EntryPointInfo]] = {}
    if entry_points is None or typed is None:
        groups = (GROUP, *TYPED_GROUPS)
        scanned = plugin_cache.cached_scan(groups, _scan, EntryPointInfo, fresh=rescan)
    eps = list(entry_points) if entry_points is not None else scanned[GROUP]
    plugins.typed_entry_points = typed if typed is not None else {g: scanned[g] for g in TYPED_GROUPS}
    plugins.load_entry_points(
        eps,
        block=_split_env("PYATTACKER_BLOCK_PLUGINS") if block is None else block,
        only=_split_env("PYATTACKER_ONLY_PLUGINS") if only is None else only,
    )
    if entry_points is None:
        plugins.check_builtins()
    return plugins


_lock = threading.Lock()
_current: Plugins | None = None


def get_plugins(*, rescan: bool = False) -> Plugins:
    """The process-wide plugins, discovered on first use (``rescan``: discovered again, from
    a fresh read of the installed metadata, as ``pyattacker plugins`` does)."""
    global _current
    with _lock:
        if _current is None or rescan:
            _current = discover(rescan=rescan)
        return _current


def reset_plugins(plugins: Plugins | None = None) -> None:
    """Forget (or replace) the process-wide plugins; the next ``get_plugins`` rediscovers."""
    global _current
    with _lock:
        _current = plugins
