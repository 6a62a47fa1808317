"""The rate budget the shards of one ``--shards N`` run share on this machine.

When a pool has rate-limited resources, the parent names one budget file beside the shard
stores (``runs/qa.db`` -> ``runs/qa.shards4.budget``) and hands it to every shard through
``PYATTACKER_SHARED_BUDGET``; each shard's pools then count every shard's grants
(``pyattacker.resources.shared_budget``). Without limits nothing is shared and nothing is
written. The file outlives the run on purpose: a run resumed within a window still counts the
grants made just before it; grants older than every window are dropped when a run starts.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from pyattacker.resources.limits import LIMIT_KEYS, window_scale
from pyattacker.resources.shared_budget import BUDGET_ENV, compact_budget_file

__all__ = ["BUDGET_ENV", "BUDGET_KEEP_ENV", "longest_window", "prepare_shared_budget", "shard_budget_path"]

#: also set for the shards when they share a budget: how long, in seconds, a grant may count
#: (the longest window, scaled); a budget kept elsewhere (a Ray actor) forgets older records
BUDGET_KEEP_ENV = "PYATTACKER_SHARED_BUDGET_KEEP_S"


def shard_budget_path(base: str, count: int) -> str:
    """``runs/qa.db``, 4 -> ``runs/qa.shards4.budget``."""
    root, _ = os.path.splitext(base)
    return f"{root}.shards{count}.budget"


def longest_window(resources: Iterable[Mapping[str, Any]]) -> float | None:
    """The longest rate window of ``resources`` in seconds (scaled), None when none is limited."""
    spans = [
        LIMIT_KEYS[key][1] for res in resources for key in (res.get("limits") or {}) if key in LIMIT_KEYS
    ]
    return max(spans) * window_scale() if spans else None


def prepare_shared_budget(pool_resources: Iterable[Mapping[str, Any]], path: str) -> str | None:
    """The ``PYATTACKER_SHARED_BUDGET`` value for the shards (None when no resource is limited),
    with the file at ``path`` rid of grants older than the longest window."""
    longest = longest_window(pool_resources)
    if longest is None:
        return None
    compact_budget_file(path, time.monotonic() - longest)
    return f"file:{path}"
