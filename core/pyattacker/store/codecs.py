"""Choosing a codec for a value, and turning stored bytes back into the value's type.

Codecs themselves are plugins (``json``, ``bytes``, ``msgpack`` are built-in plugins); this
module only composes them. Choice order: an explicit preference for the exact type, a codec
claiming the exact type, one claiming a base class (MRO), then the highest-priority codec whose
``can_encode`` accepts the value. The choice per type is cached: encoding sits on the hot path.
A codec may hand out a faster encoder for a type whose every value it takes
(``encoder_for(cls)``). When the chosen codec refuses one value (JSON has no NaN, no integer
keys), the next codec that can encode it is used: only the error path pays for that.

Decoding gives back the top-level type of a few standard types that a codec stores as a list or
a string (``tuple``, ``set``, ``frozenset``, ``datetime``, ``date``, ``time``, ``timedelta``,
``Decimal``, ``UUID``): resume must hand the next task what the first run handed it.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import msgspec

from pyattacker.errors import ArtifactCodecError
from pyattacker.plugins.manager import get_plugins

__all__ = ["Codec", "CodecRegistry"]


class Codec(Protocol):
    name: str
    #: types this codec claims outright
    types: tuple[type, ...]
    #: used when several codecs accept a value (higher first); the JSON catch-all is lowest
    priority: int

    def can_encode(self, value: Any) -> bool: ...

    def encode(self, value: Any) -> bytes: ...

    def decode(self, data: bytes, type_name: str, types: dict[str, type]) -> Any: ...

    # optional: ``encoder_for(cls)`` -> a function that encodes every value of ``cls`` (or None)


def is_record_type(cls: Any) -> bool:
    return isinstance(cls, type) and (dataclasses.is_dataclass(cls) or issubclass(cls, msgspec.Struct))


def returned_record_types(fn: Any) -> dict[str, type]:
    """The dataclasses and Structs named in ``fn``'s return annotation (``-> Answer``,
    ``-> Answer | None``, ``-> list[Answer]``), by name; empty when there is none or it cannot be
    resolved. A resumed process has not encoded one yet, so without them a task's record output
    would decode as a plain dict."""
    try:
        hint = typing.get_type_hints(fn).get("return")
    except Exception:  # an annotation naming something not importable here: no hint
        return {}
    found: dict[str, type] = {}
    stack = [hint]
    while stack:
        item = stack.pop()
        if isinstance(item, type) and is_record_type(item):
            found.setdefault(item.__name__, item)
        stack.extend(typing.get_args(item))
    return found


class CodecRegistry:
    """The codecs and record types one runner (and its templates) encode artifacts with."""

    def __init__(self, codecs: Iterable[Any] = (), types: Iterable[type] = ()) -> None:
        self._codecs: dict[str, Any] = {}
        self._types: dict[str, type] = {}
        self._prefer: dict[type, str] = {}
        self._cache: dict[type, Any] = {}
        #: per type: (codec name, encode function), what ``encode`` calls on the hot path
        self._encoders: dict[type, tuple[str, Callable[[Any], bytes]]] = {}
        for codec in codecs:
            self.register(codec)
        for cls in types:
            self.register_type(cls)

    @classmethod
    def from_plugins(cls, plugins: Any = None) -> CodecRegistry:
        return cls((plugins or get_plugins()).codecs.objects().values())

    def register(self, codec: Any) -> None:
        self._codecs[codec.name] = codec
        self._cache.clear()
        self._encoders.clear()

    def register_type(self, cls: type) -> None:
        """Make a dataclass or msgspec Struct decode back to its own type."""
        if is_record_type(cls):
            self._types[cls.__name__] = cls

    def prefer(self, cls: type, codec_name: str) -> None:
        if codec_name not in self._codecs:
            raise ArtifactCodecError(f"unknown codec {codec_name!r}")
        self._prefer[cls] = codec_name
        self._cache.clear()
        self._encoders.clear()

    @property
    def names(self) -> list[str]:
        return sorted(self._codecs)

    def _choose(self, value: Any) -> Any:
        cls = type(value)
        codec = None
        if cls in self._prefer:
            codec = self._codecs[self._prefer[cls]]
        else:
            for klass in cls.__mro__:
                owners = [c for c in self._codecs.values() if klass in getattr(c, "types", ())]
                if owners:
                    codec = max(owners, key=lambda c: getattr(c, "priority", 0))
                    break
        if codec is None:
            codec = next((c for c in self._ranked() if c.can_encode(value)), None)
            if codec is None:
                raise ArtifactCodecError(
                    f"no codec can encode a value of type {cls.__qualname__}"
                    f" (codecs: {', '.join(self.names) or 'none installed'})"
                )
            # only cache types whose every instance the chosen codec takes
            if cls not in (dict, list, tuple, str, int, float, bool, type(None)):
                return codec
        self._cache[cls] = codec
        return codec

    def _ranked(self) -> list[Any]:
        return sorted(self._codecs.values(), key=lambda c: -getattr(c, "priority", 0))

    def _entry(self, value: Any) -> tuple[str, Callable[[Any], bytes]]:
        """``(codec name, encode function)`` for a value's type (cached with the codec)."""
        cls = type(value)
        if is_record_type(cls):
            self._types.setdefault(cls.__name__, cls)
        codec = self._choose(value)
        special = getattr(codec, "encoder_for", None)
        fn = special(cls) if special is not None else None
        entry = (codec.name, fn or codec.encode)
        if self._cache.get(cls) is codec:
            self._encoders[cls] = entry
        return entry

    def encoders(self) -> Mapping[type, tuple[str, Callable[[Any], bytes]]]:
        """Per type seen so far: ``(codec name, encode function)`` (a live view, read-only).
        A caller that encodes millions of values of a few types (the binding of seeds) calls
        the function itself and comes back to ``encode`` for a type not in it, or when the
        function raises (``encode`` then picks another codec or raises the codec's error)."""
        return self._encoders

    def encode(self, value: Any) -> tuple[str, str, bytes]:
        """``(codec name, type name, bytes)`` for a value."""
        cls = type(value)
        entry = self._encoders.get(cls)
        if entry is None:
            entry = self._entry(value)
        name, fn = entry
        try:
            data = fn(value)
        except ArtifactCodecError:
            raise
        except Exception as exc:
            return self._fallback(value, name, exc)
        return name, cls.__name__, data

    def _fallback(self, value: Any, refused_by: str, exc: Exception) -> tuple[str, str, bytes]:
        """The codec of the value's type refused this value (a NaN or an infinity, which JSON
        would store as null; a dict with integer keys): the next codec, by priority, that can
        encode it exactly. None can: the first codec's error."""
        for codec in self._ranked():
            if codec.name == refused_by:
                continue
            try:
                if codec.can_encode(value):
                    return codec.name, type(value).__name__, codec.encode(value)
            except Exception:
                continue
        raise ArtifactCodecError(
            f"codec {refused_by!r} cannot encode {type(value).__qualname__}: {exc}"
        ) from exc

    def decode(
        self, codec_name: str, type_name: str, data: bytes, types: dict[str, type] | None = None
    ) -> Any:
        """The value of stored bytes. ``types`` (name -> record type) adds to, and wins over,
        the types registered here: the runner passes the record types a task's return
        annotation names, so a resumed process rebuilds them before it has encoded one."""
        codec = self._codecs.get(codec_name)
        if codec is None:
            raise ArtifactCodecError(f"artifact written with codec {codec_name!r}, which is not installed")
        known = self._types if not types else {**self._types, **types}
        try:
            value = codec.decode(data, type_name, known)
        except ArtifactCodecError:
            raise
        except Exception as exc:
            raise ArtifactCodecError(f"codec {codec_name!r} cannot decode {type_name}: {exc}") from exc
        if type_name in _RESTORED and type_name not in known:
            return _restore(type_name, value)
        return value


def _hashable(value: Any) -> Any:
    """A set's elements as they were: lists (how a codec stores tuples) back to tuples."""
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


#: standard types a codec stores as a list or a string, rebuilt from the recorded type name
_RESTORED: dict[str, type] = {
    "tuple": tuple,
    "set": set,
    "frozenset": frozenset,
    "datetime": datetime.datetime,
    "date": datetime.date,
    "time": datetime.time,
    "timedelta": datetime.timedelta,
    "Decimal": decimal.Decimal,
    "UUID": uuid.UUID,
}


def _restore(type_name: str, value: Any) -> Any:
    """``value`` as the type it had when it was encoded, when that is plain (else as it is)."""
    cls = _RESTORED[type_name]
    if isinstance(value, cls):
        return value
    try:
        if cls in (tuple, set, frozenset):
            if not isinstance(value, list):
                return value
            return tuple(value) if cls is tuple else cls(_hashable(v) for v in value)
        if not isinstance(value, str):
            return value
        return msgspec.convert(value, cls)
    except (TypeError, ValueError, msgspec.ValidationError):
        return value
