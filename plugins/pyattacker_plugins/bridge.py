"""The ``bridge`` plugin: reads the simple typed entry-point groups.

A tiny third-party package can skip pluggy entirely and declare, for example::

    [project.entry-points."pyattacker.tasks"]
    shout = "my_pkg.tasks:shout"

Groups: ``pyattacker.tasks`` (a TaskSpec or factory), ``pyattacker.algorithms`` (a class,
factory or instance with ``acquire``), ``pyattacker.codecs`` (a codec instance or zero-argument
class), ``pyattacker.stores`` (a factory called with the location). Each entry point shows up
in ``pyattacker plugins`` as its own row (``group:name``), failures included.
"""

from __future__ import annotations

from typing import Any

from pyattacker import hookimpl


def _load_each(register: Any, group: str, adapt: Any) -> None:
    for ep in register.entry_points(group):
        try:
            obj = adapt(ep.name, ep.load())
        except Exception as exc:  # one broken entry point never hides the others
            register.failed(ep, exc)
            continue
        register(ep.name, obj, origin=ep)


def _algorithm(name: str, obj: Any) -> Any:
    if hasattr(obj, "acquire") and not isinstance(obj, type):
        return lambda **params: obj
    return obj


def _codec(name: str, obj: Any) -> Any:
    return obj() if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "encode")) else obj


class _FactoryOpener:
    """Adapts ``factory(location)`` to the store-opener protocol, keyed by scheme = entry name."""

    suffixes: tuple[str, ...] = ()

    def __init__(self, name: str, factory: Any) -> None:
        self.name = name
        self.schemes = (name,)
        self._factory = factory

    def open(self, location: str, *, read_only: bool = False) -> Any:
        try:
            return self._factory(location, read_only=read_only)
        except TypeError:
            return self._factory(location)


@hookimpl
def pyattacker_tasks(register: Any) -> None:
    _load_each(register, "pyattacker.tasks", lambda name, obj: obj)


@hookimpl
def pyattacker_algorithms(register: Any) -> None:
    _load_each(register, "pyattacker.algorithms", _algorithm)


@hookimpl
def pyattacker_codecs(register: Any) -> None:
    _load_each(register, "pyattacker.codecs", _codec)


@hookimpl
def pyattacker_stores(register: Any) -> None:
    _load_each(register, "pyattacker.stores", _FactoryOpener)
