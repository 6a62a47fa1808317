"""Where a dataset stands: every pipeline row of a store, whichever run wrote it.

A store holds each pipeline once, in its current state, so counting its rows across runs
answers "how far is my dataset" after any number of resumes; one run's counts answer only
"what did that run do".
"""

from __future__ import annotations

from typing import Any

from pyattacker.plugins.store_base import StoreBase

__all__ = ["dataset_standing"]


def dataset_standing(store: StoreBase) -> dict[str, Any]:
    """``{"total", "by_state"}`` of every pipeline row of the store (``pipeline_counts(None)``:
    counts by state, never a sort of every duration)."""
    by_state = store.pipeline_counts(None)
    return {"total": sum(by_state.values()), "by_state": dict(sorted(by_state.items()))}
