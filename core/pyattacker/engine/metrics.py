"""Validation of application metrics reported from tasks (``ctx.record`` / ``track`` / ``track_many``).

The whole call is validated and snapshotted before anything is stored: one bad point (a NaN,
an infinity, a non-string key, a value that is not a number/string/bool) rejects the whole
batch, so a reader never sees part of one. Limits: 1,024 points and 16 MiB per batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

__all__ = ["MAX_BATCH_BYTES", "MAX_POINTS", "MetricRejected", "check_points", "check_value"]

MAX_POINTS = 1024
MAX_BATCH_BYTES = 16 * 1024 * 1024
_encoder = msgspec.json.Encoder()


class MetricRejected(ValueError):
    """A metric call was refused as a whole; nothing of it was stored."""


def check_value(key: Any, value: Any) -> Any:
    if not isinstance(key, str) or not key:
        raise MetricRejected(f"metric name must be a non-empty string, got {key!r}")
    if isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise MetricRejected(f"metric {key!r}: {value!r} is not a finite number")
        return value
    raise MetricRejected(f"metric {key!r}: {type(value).__name__} is not a number, string or bool")


def check_points(points: Iterable[Any]) -> list[dict[str, Any]]:
    """Snapshot and validate a batch of ``{name: value}`` points; empty dicts are skipped."""
    out: list[dict[str, Any]] = []
    size = 0
    try:
        for i, point in enumerate(points):
            if i >= MAX_POINTS:
                raise MetricRejected(f"a batch holds at most {MAX_POINTS} points")
            if not isinstance(point, Mapping):
                raise MetricRejected(f"point {i} is {type(point).__name__}, not a mapping")
            clean = {k: check_value(k, v) for k, v in point.items()}
            if clean:
                size += len(_encoder.encode(clean))
                if size > MAX_BATCH_BYTES:
                    raise MetricRejected(f"a batch holds at most {MAX_BATCH_BYTES} bytes")
                out.append(clean)
    except MetricRejected:
        raise
    except Exception as exc:  # an iterator that raises rejects the batch too
        raise MetricRejected(f"reading the points failed: {type(exc).__name__}: {exc}") from exc
    return out
