"""The ``json`` codec plugin: canonical JSON (sorted keys, compact, UTF-8) through msgspec.

It is the catch-all (lowest priority). Dataclasses and msgspec Structs encode as objects and
decode back to their type when the type is registered; sets encode sorted; tuples as lists.
JSON has no NaN or infinity (msgspec writes them as ``null``, which would read back as None),
and its object keys are strings: such a value is refused here, and the registry hands it to
the next codec (msgpack), which keeps it exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import msgspec

from pyattacker import hookimpl


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
            self.encode(value)
        except (TypeError, ValueError, NotImplementedError, OverflowError, RecursionError):
            return False
        return True

    def encode(self, value: Any) -> bytes:
        data = self._encoder.encode(value)
        # "null" is also how msgspec writes NaN and infinities: look closer only then (find,
        # not ``in``: ``b"null" in data`` first tries the operand as an int, raising inside)
        if data.find(b"null") >= 0 and _non_finite(value):
            raise ValueError("JSON has no NaN or infinity (it would be stored as null)")
        return data

    def encoder_for(self, cls: type) -> Callable[[Any], bytes] | None:
        """The bare msgspec encoder for types that can hold no float (the common str output)."""
        return self._encoder.encode if cls in (str, int, bool, type(None)) else None

    def decode(self, data: bytes, type_name: str, types: dict[str, type]) -> Any:
        obj = self._decoder.decode(data)
        cls = types.get(type_name)
        if cls is not None:
            return msgspec.convert(obj, cls)
        if type_name == "tuple" and isinstance(obj, list):
            return tuple(obj)
        return obj


def _non_finite(value: Any) -> bool:
    """Whether a NaN or an infinity is somewhere in ``value`` (containers and records walked)."""
    stack = [value]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, str | bytes | int | type(None)) or id(item) in seen:
            continue
        elif isinstance(item, dict):
            seen.add(id(item))
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            seen.add(id(item))
            stack.extend(item)
        else:
            fields = getattr(item, "__dict__", None)
            if fields is None and hasattr(item, "__struct_fields__"):
                fields = {f: getattr(item, f, None) for f in item.__struct_fields__}
            if isinstance(fields, dict):
                seen.add(id(item))
                stack.extend(fields.values())
    return False


@hookimpl
def pyattacker_codecs(register: Any) -> None:
    register(JsonCodec())
