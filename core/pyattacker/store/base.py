"""The store contract, under the name it has always been importable by.

The contract itself is on the plugin API page (``pyattacker.plugins.api``): the ``Store``
protocol, ``StoreBase`` with every optional read, keyset paging.
"""

from __future__ import annotations

from pyattacker.plugins.store_base import PAGE_KINDS, Store, StoreBase, adapt_store, iter_rows

__all__ = ["PAGE_KINDS", "Store", "StoreBase", "adapt_store", "iter_rows"]
