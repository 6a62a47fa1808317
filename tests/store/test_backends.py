"""Artifact backends: inline/null/file behaviour, spec parsing and side-effect-free validation."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import pytest

from pyattacker import ConfigError, pipeline, task
from pyattacker.digest import digest_bytes
from pyattacker.model import ArtifactRecord
from pyattacker.plugins.registry import Provided, Registry
from pyattacker.store.backends import (
    ArtifactBackend,
    parse_backend_spec,
    resolve_backend,
    validate_backend_spec,
)
from pyattacker_plugins.backend_file import FileBackend
from pyattacker_plugins.backend_inline import InlineBackend
from pyattacker_plugins.backend_null import NullBackend
from pyattacker_plugins.store_memory import MemoryStore
from tests.support.runner import rows, vrunner


@pytest.fixture
def registry() -> Registry:
    reg = Registry("artifact_backends")
    for kind, factory in (("inline", InlineBackend), ("null", NullBackend), ("file", FileBackend)):
        reg.add(Provided("artifact_backends", kind, factory, f"backend-{kind}", True))
    return reg


def art(payload: bytes | None) -> ArtifactRecord:
    data = payload or b""
    return ArtifactRecord(
        artifact_id="p:0",
        pipeline_id="p",
        task_name="t",
        seq=0,
        type_name="bytes",
        codec="bytes",
        digest=digest_bytes(data),
        size=len(data),
        created_at=1.0,
        payload=payload,
    )


def test_inline_keeps_bytes() -> None:
    backend = InlineBackend()
    a = art(b"x" * 1000)
    assert backend.put(a).payload == a.payload and backend.hydrate(a).payload == a.payload
    assert backend.describe() == {"kind": "inline"}
    assert isinstance(backend, ArtifactBackend)


def test_null_drops_bytes_keeps_digest_and_size() -> None:
    backend = NullBackend()
    a = art(b"hello")
    stored = backend.put(a)
    assert stored.payload is None and stored.blob_ref == f"null:{a.digest}:5"
    assert (stored.digest, stored.size) == (a.digest, 5)
    assert backend.hydrate(stored).payload is None
    assert a.payload == b"hello"  # the input is not mutated


def test_file_backend_spills_large_payloads(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    backend = FileBackend(root=str(root), min_bytes=10)
    small = backend.put(art(b"tiny"))
    assert small.payload == b"tiny" and small.blob_ref is None and not root.exists()
    big = art(b"B" * 100)
    stored = backend.put(big)
    path = root / big.digest[:2] / big.digest[2:]
    assert stored.payload is None and stored.blob_ref == f"file://{path}"
    assert path.read_bytes() == b"B" * 100
    assert not [n for n in os.listdir(path.parent) if n.startswith(".tmp-")]
    assert backend.hydrate(stored).payload == b"B" * 100
    # identical payloads share one file, which is not rewritten
    mtime = path.stat().st_mtime_ns
    again = backend.put(msgspec.structs.replace(big, artifact_id="q:0"))
    assert again.blob_ref == stored.blob_ref and path.stat().st_mtime_ns == mtime
    assert backend.stats() == {"files": 1, "bytes": 100}
    assert backend.describe() == {"kind": "file", "root": str(root), "min_bytes": 10}


def test_file_backend_missing_or_truncated_file_is_unavailable(tmp_path: Path) -> None:
    backend = FileBackend(root=str(tmp_path), min_bytes=0)
    stored = backend.put(art(b"payload"))
    assert stored.blob_ref is not None
    path = Path(stored.blob_ref[len("file://") :])
    path.write_bytes(b"pay")
    assert backend.hydrate(stored).payload is None
    path.unlink()
    assert backend.hydrate(stored).payload is None
    assert backend.delete(stored.digest) is False


def test_file_backend_never_takes_replaced_bytes_for_the_artifact(tmp_path: Path) -> None:
    """A blob overwritten with other bytes of the same length (a copy gone wrong, a hand edit) is
    not the artifact: hydrate leaves it unavailable (resume recomputes) instead of handing the
    next task the wrong data, which only a size check did."""
    backend = FileBackend(root=str(tmp_path), min_bytes=0)
    stored = backend.put(art(b"B" * 100))
    path = Path(stored.blob_ref[len("file://") :])
    path.write_bytes(b"C" * 100)
    assert backend.hydrate(stored).payload is None
    path.write_bytes(b"B" * 100)
    assert backend.hydrate(stored).payload == b"B" * 100


@pytest.mark.parametrize("damage", [b"B" * 40, b"C" * 100, b""], ids=["truncated", "replaced", "emptied"])
def test_file_backend_rewrites_a_damaged_blob_instead_of_sharing_it(tmp_path: Path, damage: bytes) -> None:
    """Identical payloads share one file, but only while it holds them: a blob truncated or
    replaced after it was written is written again by the next identical payload, where the new
    row used to point at the damaged file (and every resume recomputed it for nothing)."""
    backend = FileBackend(root=str(tmp_path), min_bytes=0)
    first = backend.put(art(b"B" * 100))
    path = Path(first.blob_ref[len("file://") :])
    path.write_bytes(damage)
    again = backend.put(msgspec.structs.replace(art(b"B" * 100), artifact_id="q:0"))
    assert again.blob_ref == first.blob_ref and path.read_bytes() == b"B" * 100
    assert backend.hydrate(again).payload == b"B" * 100 and backend.hydrate(first).payload == b"B" * 100
    assert not [n for n in os.listdir(path.parent) if n.startswith(".tmp-")]


def test_file_backend_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = FileBackend(root=str(tmp_path), min_bytes=0)
    a = art(b"important")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        backend.put(a)
    monkeypatch.undo()
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert leftovers == []  # no half-written blob under its final name, temp removed
    assert backend.stats() == {"files": 0, "bytes": 0}


def test_file_backend_relative_ref_and_unsafe_digest(tmp_path: Path) -> None:
    backend = FileBackend(root=str(tmp_path), min_bytes=0)
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "cd").write_bytes(b"xyz")
    row = msgspec.structs.replace(art(None), size=3, digest=digest_bytes(b"xyz"), blob_ref="file://ab/cd")
    assert backend.hydrate(row).payload == b"xyz"
    evil = msgspec.structs.replace(art(b"data"), digest="../../etc/passwd")
    stored = backend.put(evil)
    assert stored.blob_ref == f"file://{tmp_path / digest_bytes(b'data')[:2] / digest_bytes(b'data')[2:]}"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (None, ("inline", {})),
        ("", ("inline", {})),
        ("inline", ("inline", {})),
        ("none", ("inline", {})),
        ("null", ("null", {})),
        ("file:///abs/blobs", ("file", {"root": "/abs/blobs"})),
        ("file://rel/blobs", ("file", {"root": "rel/blobs"})),
        ("some/dir", ("file", {"root": "some/dir"})),
        ('{"kind": "file", "root": "/x", "min_bytes": 5}', ("file", {"root": "/x", "min_bytes": 5})),
        ('{"root": "/x"}', ("file", {"root": "/x"})),
        ({"kind": "null"}, ("null", {})),
        ({"root": "/y"}, ("file", {"root": "/y"})),
        # a URL names a (plugin's) kind by its scheme and hands the factory the whole URL
        ("s3://bucket/some/prefix", ("s3", {"url": "s3://bucket/some/prefix"})),
        ("S3://b", ("s3", {"url": "S3://b"})),
    ],
)
def test_spec_parsing(spec: Any, expected: tuple[str, dict[str, Any]]) -> None:
    assert parse_backend_spec(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": "file"}, "run.artifact_backend.root: required for kind 'file'"),
        ({"kind": "s3", "bucket": "b"}, "run.artifact_backend.kind: unknown artifact backend 's3'"),
        ("{not json", "run.artifact_backend: invalid JSON"),
        ('{"kind": "file", "root": 1', "run.artifact_backend: invalid JSON"),
        ('{"kind"', "run.artifact_backend: invalid JSON"),
        (
            '{"kind": "file", "root": "/x", "min_bytes": -1}',
            "run.artifact_backend.min_bytes: must be a non-negative",
        ),
        ({"root": "/x", "min_bytes": "big"}, "run.artifact_backend.min_bytes: must be a non-negative"),
        ({"root": "/x", "min_bytes": True}, "run.artifact_backend.min_bytes: must be a non-negative"),
        ({"root": "/x", "colour": 1}, "run.artifact_backend.colour: unknown parameter for kind 'file'"),
        ({"kind": "null", "root": "/x"}, "run.artifact_backend.root: unknown parameter for kind 'null'"),
        ({"kind": 3}, "run.artifact_backend.kind: must be a non-empty string"),
        (42, "run.artifact_backend: expected a string or a mapping, got int"),
        ({"root": ""}, "run.artifact_backend.root: required for kind 'file'"),
        ("nosuch://b/p", "run.artifact_backend.kind: unknown artifact backend 'nosuch'"),
    ],
)
def test_validation_errors(registry: Registry, spec: Any, message: str) -> None:
    problems = validate_backend_spec(spec, registry, "run.artifact_backend")
    assert problems and problems[0].startswith(message), problems
    with pytest.raises(ConfigError, match=r"run\.artifact_backend"):
        resolve_backend(spec, registry)


def test_validation_never_creates_directories(registry: Registry, tmp_path: Path) -> None:
    root = tmp_path / "not" / "yet"
    for spec in (str(root), f"file://{root}", {"kind": "file", "root": str(root), "min_bytes": 0}):
        assert validate_backend_spec(spec, registry, "run.artifact_backend") == []
        backend = resolve_backend(spec, registry)
        assert isinstance(backend, FileBackend) and backend.root == str(root)
    assert not (tmp_path / "not").exists()


def test_resolve_builds_each_kind(registry: Registry) -> None:
    assert isinstance(resolve_backend(None, registry), InlineBackend)
    assert isinstance(resolve_backend("null", registry), NullBackend)
    backend = resolve_backend('{"root": "rel", "min_bytes": 3}', registry)
    assert (
        isinstance(backend, FileBackend) and backend.root == os.path.abspath("rel") and backend.min_bytes == 3
    )
    ready = NullBackend()
    assert resolve_backend(ready, registry) is ready


def test_plugin_modules_register_their_kind() -> None:
    from pyattacker_plugins import backend_file, backend_inline, backend_null

    seen: dict[str, Any] = {}
    for module in (backend_inline, backend_null, backend_file):
        module.pyattacker_artifact_backends(register=lambda kind, factory: seen.setdefault(kind, factory))
    assert seen == {"inline": InlineBackend, "null": NullBackend, "file": FileBackend}


@pytest.mark.parametrize(
    ("spec", "kind"), [("NULL", "null"), ("Null", "null"), ("blobs", "file"), ("./nul", "file")]
)
def test_backend_names_in_any_case_and_folders(spec: str, kind: str) -> None:
    assert parse_backend_spec(spec)[0] == kind


@pytest.mark.parametrize(("spec", "hint"), [("nul", "null"), ("inlnie", "inline"), ("nulls", "null")])
def test_a_backend_name_typo_is_an_error_not_a_folder(spec: str, hint: str) -> None:
    """``artifact_backend = "nul"`` used to become a file backend rooted at ./nul."""
    with pytest.raises(
        ConfigError, match=rf"did you mean '{hint}'\?\); for a folder of that name write \./{spec}"
    ):
        parse_backend_spec(spec)


def test_a_root_that_cannot_hold_blobs_stops_a_writer_but_not_a_reader(tmp_path: Path) -> None:
    """The root is checked by ``prepare_to_write`` (a run's start), not by the constructor: a
    view that only reads blobs back (export) builds the backend on any root."""
    from pyattacker.plugins.manager import get_plugins

    a_file = tmp_path / "f"
    a_file.write_text("not a folder")
    spec = {"kind": "file", "root": str(a_file)}
    registry = get_plugins().artifact_backends
    with pytest.raises(ConfigError, match=r"run\.artifact_backend\.root: .* not a directory"):
        resolve_backend(spec, registry)
    reader = resolve_backend(spec, registry, for_writing=False)
    assert reader.describe()["root"] == str(a_file)


class _Counting(InlineBackend):
    """An inline backend that counts its ``put`` calls (``identity_put`` as given)."""

    def __init__(self, identity_put: Any) -> None:
        self.identity_put = identity_put
        self.puts: list[str] = []

    def put(self, artifact: ArtifactRecord) -> ArtifactRecord:
        self.puts.append(artifact.artifact_id)
        return artifact


@pytest.mark.parametrize(("flag", "called"), [(True, False), (False, True), (1, True), ("yes", True)])
def test_a_run_skips_put_only_for_a_declared_identity(flag: Any, called: bool) -> None:
    """``identity_put = True`` (the inline backend's) lets a run skip ``put``; any other value is
    not a declaration, and every artifact (the seed and each task's output) goes through it."""

    @task
    def double(x: Any) -> Any:
        return x * 2

    backend = _Counting(flag)
    store = MemoryStore()
    with vrunner(store=store, artifact_backend=backend) as runner:
        report = runner.run(pipeline("p", double, double).map([1, 2]))
    assert report.succeeded == 2
    stored = sorted(a.artifact_id for a in rows(store, "artifacts"))
    assert len(stored) == 6 and all(a.payload is not None for a in rows(store, "artifacts"))
    assert sorted(backend.puts) == (stored if called else [])


def test_the_inline_backend_declares_put_an_identity() -> None:
    a = art(b"x")
    assert InlineBackend.identity_put is True and InlineBackend().put(a) is a
    assert getattr(NullBackend, "identity_put", False) is False
    assert getattr(FileBackend, "identity_put", False) is False
