"""``round3``: the rounding of every stored duration, checked against the formula it replaced."""

from __future__ import annotations

import math
import random
import struct

import pytest

from pyattacker.clock import round3


def _reference(value: float) -> float:
    """The rounding used before ``x // 1.0`` replaced ``int(x)`` (half away from zero)."""
    return int(value * 1000.0 + (0.5 if value >= 0 else -0.5)) / 1000.0


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


@pytest.mark.parametrize(
    "value",
    [
        0.0,
        -0.0,
        0.0005,
        -0.0005,
        0.00049999,
        1.0005,
        2.5e-4,
        -2.5e-4,
        123.4565,
        1e-12,
        -1e-12,
        1e15,
        2.0**53,
        -(2.0**60),
    ],
)
def test_round3_edges(value: float) -> None:
    assert _bits(round3(value)) == _bits(_reference(value))


def test_round3_is_the_old_value_bit_for_bit() -> None:
    rng = random.Random(15)
    values = [(rng.random() - 0.2) * 10.0 ** rng.randint(-9, 18) for _ in range(20_000)]
    for _ in range(20_000):  # any finite double whose milliseconds stay finite
        value = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isfinite(value) and math.isfinite(value * 1000.0):
            values.append(value)
    for value in values:
        assert _bits(round3(value)) == _bits(_reference(value)), value


def test_round3_refuses_nan_as_before() -> None:
    with pytest.raises(ValueError):
        round3(math.nan)
