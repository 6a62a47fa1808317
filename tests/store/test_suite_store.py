"""``SuiteStore``: the ``by_experiment`` layout as one store, on real SQLite files. Batches are
split by the experiment prefix of their pipeline ids; readers page through the union in each
kind's order across page boundaries (attempt, event and log ids read back unique); a writer
opens only the selected members' files."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyattacker.errors import ConfigError
from pyattacker.plugins.paging import PAGE_KINDS, iter_rows
from pyattacker.plugins.store_base import StoreBase
from pyattacker.store.location import open_store
from pyattacker.store.suite_dir import SuiteManifest, experiment_prefix, member_pipeline_id, write_manifest
from pyattacker.store.suite_store import ID_STRIDE, SuiteStore, experiment_store_path
from pyattacker.testing.rows import artifact, attempt, commit, event, log_row, metric, pipeline, run, task

EXPERIMENTS = ("a", "b", "c")


def _opener(path: str, read_only: bool) -> StoreBase:
    return open_store(path, read_only=read_only)


def _manifest() -> SuiteManifest:
    manifest = SuiteManifest(suite_id="s", layout="by_experiment", catalog="suite.db")
    for exp in EXPERIMENTS:
        manifest.experiments[exp] = {"prefix": experiment_prefix("s", exp), "definition_digest": exp}
    return manifest


def _ids(exp: str) -> list[str]:
    return [member_pipeline_id(experiment_prefix("s", exp), f"k{i}") for i in range(4)]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A suite written by one writer over every member: 4 pipelines each (created at
    interleaved times), two tasks, artifacts, attempts, events and logs each, and run-level
    events and metrics for the catalog, over three batches."""
    manifest = _manifest()
    write_manifest(tmp_path, manifest)
    store = SuiteStore(tmp_path, manifest, read_only=False, opener=_opener)
    try:
        commit(store, runs=[run()], events=[event("run.started", pid=None)], metrics=[metric("m", 1)])
        for turn in range(2):
            rows: dict[str, list[object]] = {
                k: [] for k in ("pipelines", "tasks", "artifacts", "attempts", "events", "logs")
            }
            for index, exp in enumerate(EXPERIMENTS):
                for i, pid in enumerate(_ids(exp)[turn * 2 : turn * 2 + 2]):
                    created = 10.0 + (turn * 2 + i) * 3 + index  # members interleave in time
                    rows["pipelines"].append(pipeline(pid, created_at=created))
                    for seq in (0, 1):
                        rows["tasks"].append(task(pid, seq))
                        rows["artifacts"].append(artifact(pid, seq))
                        rows["attempts"].append(attempt(pid, seq))
                        rows["logs"].append(log_row(pid, seq))
                    rows["events"].append(event(pid=pid))
            commit(store, **rows)  # type: ignore[arg-type]
        commit(store, events=[event("run.finished", pid=None)])
    finally:
        store.close()
    return tmp_path


def test_each_member_file_holds_only_its_pipelines_and_the_catalog_the_run(root: Path) -> None:
    for exp in EXPERIMENTS:
        child = open_store(str(experiment_store_path(root, exp)), read_only=True)
        try:
            assert sorted(p.pipeline_id for p in child.page("pipelines")) == sorted(_ids(exp))
            assert [r.run_id for r in child.runs()] == ["r1"]  # every file knows the run
            assert len(child.page("attempts")) == 8 and len(child.page("events")) == 4
        finally:
            child.close()
    catalog = open_store(str(root / "suite.db"), read_only=True)
    try:
        assert catalog.page("pipelines") == [] and [r.run_id for r in catalog.runs()] == ["r1"]
        assert [e.kind for e in catalog.page("events")] == ["run.started", "run.finished"]
        assert [m.name for m in catalog.metrics()] == ["m"]
    finally:
        catalog.close()


@pytest.mark.parametrize("kind", list(PAGE_KINDS))
def test_paging_through_the_union_crosses_page_boundaries_in_order(root: Path, kind: str) -> None:
    store = SuiteStore(root, _manifest(), opener=_opener)
    try:
        whole = store.page(kind, limit=10_000)
        expected = {"pipelines": 12, "tasks": 24, "artifacts": 24, "attempts": 24, "events": 14}[kind]
        assert len(whole) == expected
        keys = PAGE_KINDS[kind]
        order = [tuple(getattr(r, k) for k in keys) for r in whole]
        assert order == sorted(order) and len(set(order)) == len(order)
        for size in (1, 3, 5):
            assert list(iter_rows(store, kind, batch=size)) == whole, size
        if kind in ("attempts", "events"):  # read-back ids: local id * stride + the file's slot
            slots = {getattr(r, keys[0]) % ID_STRIDE for r in whole}
            assert slots == ({0, 1, 2, 3} if kind == "events" else {1, 2, 3})
        one = _ids("b")[0]
        mine = store.page(kind, pipeline_id=one)
        assert mine and {r.pipeline_id for r in mine} == {one}
    finally:
        store.close()


def test_reads_by_pipeline_go_to_its_members_file(root: Path) -> None:
    store = SuiteStore(root, _manifest(), opener=_opener)
    try:
        ids = [_ids(exp)[1] for exp in EXPERIMENTS] + ["not-a-member"]
        assert set(store.lookup_pipelines(ids)) == set(ids[:3])
        assert set(store.lookup_states(ids)) == set(ids[:3])
        assert store.get_artifact(ids[2], 1) is not None and store.get_artifact("not-a-member", 0) is None
        assert sum(store.pipeline_counts().values()) == 12
        assert store.count_rows("events") == 14 and store.count_rows("attempts") == 24
        logs = store.logs(limit=100)
        assert len(logs) == 24 and len({entry.log_id for entry in logs}) == 24
        paged, after = [], None
        while True:
            chunk = store.logs(after=after, limit=5)
            if not chunk:
                break
            paged.extend(chunk)
            after = chunk[-1].log_id
        assert paged == logs
    finally:
        store.close()


def test_a_writer_opens_only_the_selected_members(tmp_path: Path) -> None:
    manifest = _manifest()
    store = SuiteStore(tmp_path, manifest, experiments=["b"], read_only=False, opener=_opener)
    try:
        commit(store, runs=[run()], pipelines=[pipeline(_ids("b")[0])])
    finally:
        store.close()
    assert experiment_store_path(tmp_path, "b").is_file()
    assert not experiment_store_path(tmp_path, "a").parent.exists()
    assert not experiment_store_path(tmp_path, "c").parent.exists()
    with pytest.raises(ConfigError, match="experiment 'a'"):  # a reader never creates one
        SuiteStore(tmp_path, manifest, opener=_opener)
    assert not experiment_store_path(tmp_path, "a").parent.exists()
