"""The ``range`` seed source: ``source: {kind: range, n: 100}`` seeds ``{"i": 0} .. {"i": n-1}``
(``limit: N``: only the first N).

Handy for smoke tests and for pipelines whose first task fetches its own input by index.
Keys are content-addressed (no explicit key), so the same ``n`` resumes the same pipelines.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import msgspec

from pyattacker import hookimpl
from pyattacker.plugins.hookspecs import Register

__all__ = ["RangeOptions", "RangeSource"]


class RangeOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``n``: how many seeds (0 is allowed: an empty run); ``limit``: only the first N of them
    (as on every source; accepted here because the reference's configs write it)."""

    n: Annotated[int, msgspec.Meta(ge=0)]
    limit: Annotated[int, msgspec.Meta(ge=1)] | None = None

    @property
    def total(self) -> int:
        return self.n if self.limit is None else min(self.n, self.limit)


class RangeSource:
    """Yields ``(None, {"i": i})`` for ``i`` in ``range(n)``, lazily."""

    name = "range"
    options = RangeOptions

    def open(self, options: RangeOptions, base_dir: Path) -> Iterator[tuple[str | None, Any]]:
        for i in range(options.total):
            yield None, {"i": i}

    def count(self, options: RangeOptions, base_dir: Path) -> int:
        """The number of seeds, known without reading anything (progress shows an ETA)."""
        return options.total


@hookimpl
def pyattacker_sources(register: Register) -> None:
    register("range", RangeSource())
