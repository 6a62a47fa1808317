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
    """``{"total", "by_state"}`` of every pipeline row of the store (``pipeline_totals(None)``)."""
    by_state = dict(store.pipeline_totals(None)[0])
    return {"total": sum(by_state.values()), "by_state": dict(sorted(by_state.items()))}
