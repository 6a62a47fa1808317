"""Per-kind registries composed from plugins, with the clash rules.

Two plugins providing one name is an error that names both; the later third-party provider
is the one marked failed. A third party never shadows a built-in. Each registered object is
checked against its kind's contract (``pyattacker.plugins.api``) when it is registered, so a
broken plugin fails at startup with its own name attached, not deep inside a run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyattacker.plugins.api import API_VERSION, OLDEST_API_VERSION

__all__ = ["KINDS", "Provided", "Registry", "RegistrationError", "check_provided", "contract_problem"]


class RegistrationError(Exception):
    """A registration breaks its kind's contract or clashes with another provider."""


@dataclass(frozen=True, slots=True)
class Provided:
    kind: str
    name: str
    obj: Any
    plugin: str
    builtin: bool
    #: the plugin API version the provider was written for and checked against
    contract: int = API_VERSION


def _needs(*attrs: str) -> Callable[[Any], str | None]:
    """An object registered as it is: it must have ``attrs``."""

    def check(obj: Any) -> str | None:
        missing = [a for a in attrs if not hasattr(obj, a)]
        return f"lacks {', '.join(missing)}" if missing else None

    return check


def _factory_of(*methods: str) -> Callable[[Any], str | None]:
    """A factory: callable; when it is a class, the class must define ``methods`` (what its
    instances are called with), so a misspelled method fails at startup, not in a run."""

    def check(obj: Any) -> str | None:
        if not callable(obj):
            return f"{type(obj).__name__} is not callable"
        if isinstance(obj, type):
            missing = [m for m in methods if not callable(getattr(obj, m, None))]
            if missing:
                return f"class {obj.__name__} lacks {', '.join(missing)} (see pyattacker.plugins.api)"
        return None

    return check


def _task(obj: Any) -> str | None:
    if getattr(obj, "__pyattacker_task__", False) or callable(obj):
        return None
    return f"{type(obj).__name__} is neither a TaskSpec nor a factory"


#: kind -> contract check (None: ok, str: what is wrong); the contracts are pyattacker.plugins.api's
KINDS: dict[str, Callable[[Any], str | None]] = {
    "tasks": _task,
    "algorithms": _factory_of("acquire", "fingerprint"),
    "codecs": _needs("name", "encode", "decode", "can_encode"),
    "stores": _needs("name", "schemes", "suffixes", "open"),
    "artifact_backends": _factory_of("put", "hydrate", "describe"),
    "event_sinks": _factory_of("handle", "close"),
    "sources": _needs("open", "options"),
    "commands": _needs("name", "main"),
    "shard_executors": _factory_of("submit"),
}


def contract_problem(declared: Any) -> str | None:
    """Why a plugin declaring ``PYATTACKER_PLUGIN_API = declared`` cannot load here, or None."""
    if isinstance(declared, bool) or not isinstance(declared, int):
        return f"PYATTACKER_PLUGIN_API must be an integer, got {declared!r}"
    if declared > API_VERSION:
        return (
            f"written for plugin API {declared}; this pyattacker offers plugin API {API_VERSION}"
            " (upgrade pyattacker, or install a release of the plugin written for this one)"
        )
    if declared < OLDEST_API_VERSION:
        return (
            f"written for plugin API {declared}; this pyattacker supports plugin API"
            f" {OLDEST_API_VERSION} to {API_VERSION} (upgrade the plugin)"
        )
    return None


def check_provided(kind: str, name: Any, obj: Any) -> None:
    if not isinstance(name, str) or not name:
        raise RegistrationError(f"{kind}: a name must be a non-empty string, got {name!r}")
    problem = KINDS[kind](obj)
    if problem:
        raise RegistrationError(f"{kind} {name!r}: {problem}")


class Registry:
    """Name -> provided object for one kind, remembering which plugin provided what."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, Provided] = {}

    def add(self, item: Provided) -> None:
        existing = self._items.get(item.name)
        if existing is not None:
            raise RegistrationError(
                f"{self.kind} {item.name!r} is provided by both plugin {existing.plugin!r}"
                f" and plugin {item.plugin!r}"
            )
        self._items[item.name] = item

    def remove_plugin(self, plugin: str) -> None:
        for name in [n for n, p in self._items.items() if p.plugin == plugin]:
            del self._items[name]

    def get(self, name: str) -> Any | None:
        item = self._items.get(name)
        return None if item is None else item.obj

    def provider(self, name: str) -> Provided | None:
        return self._items.get(name)

    def names(self) -> list[str]:
        return sorted(self._items)

    def objects(self) -> dict[str, Any]:
        return {name: item.obj for name, item in self._items.items()}

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __len__(self) -> int:
        return len(self._items)
