"""The ``json`` codec plugin: canonical JSON (sorted keys, compact, UTF-8) through msgspec.

It is the catch-all (lowest priority). Dataclasses and msgspec Structs encode as objects and
decode back to their type when the type is registered; sets encode sorted; tuples as lists.
"""

from __future__ import annotations

from typing import Any

import msgspec

from pyattacker.hookspecs import hookimpl


def _enc_hook(value: Any) -> Any:
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if hasattr(value, "__json__"):
        return value.__json__()
    raise NotImplementedError(f"cannot encode {type(value).__qualname__} as JSON")


class JsonCodec:
    name = "json"
    types: tuple[type, ...] = (dict, list, tuple, str, int, float, bool, type(None))
    priority = 0

    def __init__(self) -> None:
        self._encoder = msgspec.json.Encoder(enc_hook=_enc_hook, order="sorted")
        self._decoder = msgspec.json.Decoder()

    def can_encode(self, value: Any) -> bool:
        try:
            self._encoder.encode(value)
        except (TypeError, NotImplementedError, OverflowError):
            return False
        return True

    def encode(self, value: Any) -> bytes:
        return self._encoder.encode(value)

    def decode(self, data: bytes, type_name: str, types: dict[str, type]) -> Any:
        obj = self._decoder.decode(data)
        cls = types.get(type_name)
        if cls is not None:
            return msgspec.convert(obj, cls)
        if type_name == "tuple" and isinstance(obj, list):
            return tuple(obj)
        return obj


@hookimpl
def pyattacker_codecs(register: Any) -> None:
    register(JsonCodec())
