"""How a store location picks its plugin: schemes, suffixes, local paths, the default store.

A location is handed to the store plugin that claims its scheme (``sqlite:``, ``jsonl:``, a
third party's) or its file suffix; a plain path with neither is a SQLite file.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pyattacker.errors import ConfigError
from pyattacker.plugins.manager import get_plugins
from pyattacker.plugins.store_base import StoreBase, StoreOpener, adapt_store, split_scheme
from pyattacker.store.suite_dir import is_suite_dir, read_manifest
from pyattacker.store.suite_store import SuiteStore

__all__ = [
    "StoreOpener",
    "default_store_path",
    "list_stores",
    "local_file",
    "location_problem",
    "open_store",
    "rebase_local",
    "resolve_opener",
    "scheme_of",
]


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
    path is spelled (``sqlite:runs/x.db`` as well as ``runs/x.db``)."""
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
    handles, or nothing after the scheme (``jsonl://`` would write a store into the current
    folder, ``sqlite:`` into a nameless temporary file). ``validate`` and ``run``/``resume``/``demo``
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


_scheme_of = split_scheme


def resolve_opener(uri: str, openers: Mapping[str, StoreOpener]) -> StoreOpener:
    """Pick the opener for ``uri``: an explicit scheme, then a file suffix, then a folder an
    opener recognizes, then the default (SQLite)."""
    scheme, rest = _scheme_of(uri)
    if scheme is not None:
        opener = _schemes(openers).get(scheme)
        if opener is not None:
            return opener
        problem = _scheme_problem(scheme, uri, openers)
        if problem is not None:
            raise ConfigError(f"store {uri!r}: {problem}")
    path = rest
    lowered = path.lower()
    for opener in openers.values():
        if any(lowered.endswith(sfx) for sfx in opener.suffixes):
            return opener
    if os.path.isdir(path):
        for opener in openers.values():
            probe = getattr(opener, "recognizes", None)  # optional on openers not built on StoreOpenerBase
            if probe is not None and probe(path):
                return opener
    if "sqlite" in openers:
        return openers["sqlite"]
    raise ConfigError(f"store {uri!r}: no store plugin recognises this location")


def open_store(
    uri: str | os.PathLike[str] | Any, *, read_only: bool = False, plugins: Any = None
) -> StoreBase:
    """Open a store by location through the registered store plugins, or take a store object
    as it is. The opener receives the location exactly as written (a plugin written for
    version 1 of the plugin API gets it without its scheme, as version 1 did); what it returns
    is a ``StoreBase`` from here on (``adapt_store``)."""
    if not isinstance(uri, str | os.PathLike):
        return adapt_store(uri)
    location = os.fspath(uri)
    if is_suite_dir(location):
        return _open_suite_dir(location, read_only, plugins)
    registry = (plugins or get_plugins()).stores
    opener = resolve_opener(location, registry.objects())
    provider = registry.provider(opener.name)
    if provider is not None and provider.contract < 2:
        location = _scheme_of(location)[1]
    store = opener.open(location, read_only=read_only)
    plugin = provider.plugin if provider is not None else opener.name
    return adapt_store(store, f"store plugin {plugin!r} (opener {opener.name!r})")


def _open_suite_dir(location: str, read_only: bool, plugins: Any) -> StoreBase:
    """A suite directory read as a store: the ``combined`` layout's one store, or every store
    of the ``by_experiment`` layout behind one ``SuiteStore``."""
    manifest = read_manifest(location)
    if manifest.layout != "by_experiment":
        return open_store(os.path.join(location, manifest.catalog), read_only=read_only, plugins=plugins)
    return SuiteStore(
        location,
        manifest,
        read_only=read_only,
        opener=lambda path, ro: open_store(path, read_only=ro, plugins=plugins),
    )


def list_stores(location: str, plugins: Any = None) -> list[str]:
    """The stores of a third-party scheme whose location begins with ``location``, from the
    opener's ``list_stores`` (openers without it list nothing). Local paths: ``[]`` (the
    caller globs them)."""
    scheme = _scheme_of(location)[0]
    if scheme in _FILE_SCHEMES or scheme == "memory":
        return []
    opener = _schemes((plugins or get_plugins()).stores.objects()).get(scheme or "")
    lister = getattr(opener, "list_stores", None)  # optional on openers not built on StoreOpenerBase
    return sorted(lister(location)) if lister is not None else []


def default_store_path() -> Path:
    """The embedded default: a SQLite file under the user data directory (PYATTACKER_HOME wins)."""
    home = os.environ.get("PYATTACKER_HOME")
    if home:
        base = Path(home)
    else:
        import platformdirs  # start-up: only when no store is named

        base = Path(platformdirs.user_data_dir("pyattacker", appauthor=False))
    return base / "runs" / "default.db"
