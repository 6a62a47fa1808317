"""Choosing a codec for a value, and turning stored bytes back into the value's type.

Codecs themselves are plugins (``json``, ``bytes``, ``msgpack`` are built-in plugins); this
module only composes them. Choice order: an explicit preference for the exact type, a codec
claiming the exact type, one claiming a base class (MRO), then the highest-priority codec whose
``can_encode`` accepts the value. The choice per type is cached: encoding sits on the hot path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Protocol

import msgspec

from .errors import ArtifactCodecError

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


def is_record_type(cls: Any) -> bool:
    return isinstance(cls, type) and (dataclasses.is_dataclass(cls) or issubclass(cls, msgspec.Struct))


class CodecRegistry:
    """The codecs and record types one runner (and its templates) encode artifacts with."""

    def __init__(self, codecs: Iterable[Any] = (), types: Iterable[type] = ()) -> None:
        self._codecs: dict[str, Any] = {}
        self._types: dict[str, type] = {}
        self._prefer: dict[type, str] = {}
        self._cache: dict[type, Any] = {}
        for codec in codecs:
            self.register(codec)
        for cls in types:
            self.register_type(cls)

    @classmethod
    def from_plugins(cls, plugins: Any = None) -> CodecRegistry:
        from .plugins import get_plugins

        return cls((plugins or get_plugins()).codecs.objects().values())

    def register(self, codec: Any) -> None:
        self._codecs[codec.name] = codec
        self._cache.clear()

    def register_type(self, cls: type) -> None:
        """Make a dataclass or msgspec Struct decode back to its own type."""
        if is_record_type(cls):
            self._types[cls.__name__] = cls

    def prefer(self, cls: type, codec_name: str) -> None:
        if codec_name not in self._codecs:
            raise ArtifactCodecError(f"unknown codec {codec_name!r}")
        self._prefer[cls] = codec_name
        self._cache.clear()

    @property
    def names(self) -> list[str]:
        return sorted(self._codecs)

    def _choose(self, value: Any) -> Any:
        cls = type(value)
        codec = self._cache.get(cls)
        if codec is not None:
            return codec
        if cls in self._prefer:
            codec = self._codecs[self._prefer[cls]]
        else:
            for klass in cls.__mro__:
                owners = [c for c in self._codecs.values() if klass in getattr(c, "types", ())]
                if owners:
                    codec = max(owners, key=lambda c: getattr(c, "priority", 0))
                    break
        if codec is None:
            ranked = sorted(self._codecs.values(), key=lambda c: -getattr(c, "priority", 0))
            codec = next((c for c in ranked if c.can_encode(value)), None)
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

    def encode(self, value: Any) -> tuple[str, str, bytes]:
        """``(codec name, type name, bytes)`` for a value."""
        cls = type(value)
        codec = self._cache.get(cls)
        if codec is None:
            if is_record_type(cls):
                self._types.setdefault(cls.__name__, cls)
            codec = self._choose(value)
        try:
            data = codec.encode(value)
        except ArtifactCodecError:
            raise
        except Exception as exc:
            raise ArtifactCodecError(
                f"codec {codec.name!r} cannot encode {type(value).__qualname__}: {exc}"
            ) from exc
        return codec.name, type(value).__name__, data

    def decode(self, codec_name: str, type_name: str, data: bytes) -> Any:
        codec = self._codecs.get(codec_name)
        if codec is None:
            raise ArtifactCodecError(f"artifact written with codec {codec_name!r}, which is not installed")
        try:
            return codec.decode(data, type_name, self._types)
        except ArtifactCodecError:
            raise
        except Exception as exc:
            raise ArtifactCodecError(f"codec {codec_name!r} cannot decode {type_name}: {exc}") from exc
