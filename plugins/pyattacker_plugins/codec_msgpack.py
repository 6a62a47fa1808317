"""The ``msgpack`` codec plugin: compact binary for records; chosen by preference, not by default.

``CodecRegistry.prefer(MyRecord, "msgpack")`` routes a type here; dataclasses and msgspec
Structs decode back to their type.
"""

from __future__ import annotations

from typing import Any

import msgspec

from pyattacker import hookimpl


class MsgpackCodec:
    name = "msgpack"
    types: tuple[type, ...] = ()
    priority = -10

    def __init__(self) -> None:
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder()

    def can_encode(self, value: Any) -> bool:
        try:
            self._encoder.encode(value)
        except (TypeError, OverflowError):
            return False
        return True

    def encode(self, value: Any) -> bytes:
        return self._encoder.encode(value)

    def decode(self, data: bytes, type_name: str, types: dict[str, type]) -> Any:
        obj = self._decoder.decode(data)
        cls = types.get(type_name)
        return msgspec.convert(obj, cls) if cls is not None else obj


@hookimpl
def pyattacker_codecs(register: Any) -> None:
    register(MsgpackCodec())
