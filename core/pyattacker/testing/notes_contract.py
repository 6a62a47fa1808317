"""The store contract's cases for notes on runs (``run_note``, ``run_notes``, ``write_note``):
a mixin of ``StoreContract``, which gives it the ``store`` and ``store_factory`` fixtures."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from pyattacker.errors import ConfigError, NoteConflict, StoreFeatureUnsupported, StoreUnavailable
from pyattacker.plugins.api import StoreBase
from pyattacker.testing.rows import commit, run

__all__ = ["NotesContract"]


class NotesContract:
    """Notes keep every revision, refuse a stale write and survive a reopen (skipped for a
    store without ``supports_notes``, which must refuse the write instead)."""

    persistent: ClassVar[bool] = True

    # -- notes on runs --------------------------------------------------------------------------------
    def test_notes_keep_revisions_and_refuse_a_stale_write(self, store: StoreBase) -> None:
        commit(store, runs=[run("r1", notes="from the config"), run("r2", started_at=2.0)])
        first = store.run_note("r1")
        assert first is not None and (first.revision, first.text) == (1, "from the config")
        assert store.run_note("r2") is None and store.run_note("nope") is None
        if not store.supports_notes:
            with pytest.raises(StoreFeatureUnsupported):
                store.write_note("r1", "x", expected_revision=1, author="a", now=1.0)
            return
        second = store.write_note("r1", "second", expected_revision=1, author="ann@h", now=5.0)
        assert (second.run_id, second.revision, second.text, second.author) == ("r1", 2, "second", "ann@h")
        with pytest.raises(NoteConflict, match=r"revision 2 was written by ann@h") as refused:
            store.write_note("r1", "stale", expected_revision=1, author="bob@h", now=6.0)
        assert refused.value.current.revision == 2
        assert store.run_note("r1") == second  # nothing was overwritten
        assert store.write_note("r2", "new", expected_revision=0, author="a", now=7.0).revision == 1
        assert store.write_note("r2", "newer", expected_revision=None, author="a", now=8.0).revision == 2
        with pytest.raises(ConfigError, match="no run 'nope'"):
            store.write_note("nope", "x", expected_revision=None, author="a", now=9.0)
        latest = store.run_notes()
        assert {k: (n.revision, n.text) for k, n in latest.items()} == {
            "r1": (2, "second"),
            "r2": (2, "newer"),
        }

    def test_notes_persist_and_readers_cannot_write_them(self, store_factory: Any) -> None:
        store = store_factory.open()
        if not (self.persistent and store.supports_notes):
            pytest.skip("this store keeps nothing across opens, or keeps no notes")
        commit(store, runs=[run("r1", notes="config")])
        store.write_note("r1", "kept", expected_revision=1, author="a", now=5.0)
        reader = store_factory.reopen(store, read_only=True)
        note = reader.run_note("r1")
        assert note is not None and (note.revision, note.text, note.author) == (2, "kept", "a")
        with pytest.raises(StoreUnavailable):
            reader.write_note("r1", "no", expected_revision=2, author="a", now=6.0)
