"""The ``bytes`` codec plugin: raw bytes, bytearray and memoryview, stored as they are."""

from __future__ import annotations

from typing import Any

from pyattacker import hookimpl


class BytesCodec:
    name = "bytes"
    types: tuple[type, ...] = (bytes, bytearray, memoryview)
    priority = 10

    def can_encode(self, value: Any) -> bool:
        return isinstance(value, bytes | bytearray | memoryview)

    def encode(self, value: Any) -> bytes:
        return bytes(value)

    def decode(self, data: bytes, type_name: str, types: dict[str, type]) -> Any:
        if type_name == "bytearray":
            return bytearray(data)
        return bytes(data)


@hookimpl
def pyattacker_codecs(register: Any) -> None:
    register(BytesCodec())
