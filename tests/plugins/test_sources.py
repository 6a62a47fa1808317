"""The range and jsonl seed sources: lazy, line-numbered errors, keys, limits and repeats."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyattacker import ConfigError
from pyattacker.plugins.manager import get_plugins


def _source(kind: str):  # type: ignore[no-untyped-def]
    source = get_plugins().sources.get(kind)
    assert source is not None, f"source {kind!r} not registered"
    return source


def test_range_seeds_and_count(tmp_path: Path) -> None:
    src = _source("range")
    opts = src.options(n=3)
    assert list(src.open(opts, tmp_path)) == [(None, {"i": 0}), (None, {"i": 1}), (None, {"i": 2})]
    assert src.count(opts, tmp_path) == 3


def test_jsonl_streams_with_limit_and_keys(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"id": 1, "q": "a"}\n\n{"id": "b", "q": "b"}\n{"id": 3}\n')
    src = _source("jsonl")
    rows = list(src.open(src.options(path="d.jsonl", key_field="id", limit=2), tmp_path))
    assert rows == [("1", {"id": 1, "q": "a"}), ("b", {"id": "b", "q": "b"})]
    assert [k for k, _ in src.open(src.options(path=str(tmp_path / "d.jsonl")), Path("/"))] == [None] * 3


def test_jsonl_is_lazy(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"i": 1}\nnot json\n')
    src = _source("jsonl")
    it = src.open(src.options(path="d.jsonl"), tmp_path)
    assert next(it) == (None, {"i": 1})  # the bad line is not read yet
    with pytest.raises(ConfigError, match=r"d\.jsonl:2: invalid JSON line"):
        next(it)


def test_jsonl_missing_key_field_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"id": 1}\n{"other": 2}\n')
    src = _source("jsonl")
    with pytest.raises(ConfigError, match=r"d\.jsonl:2: key_field 'id' is missing"):
        list(src.open(src.options(path="d.jsonl", key_field="id"), tmp_path))


def test_jsonl_missing_file(tmp_path: Path) -> None:
    src = _source("jsonl")
    opts = src.options(path="nope.jsonl")
    with pytest.raises(ConfigError, match=r"source\.path: file not found"):
        src.check(opts, tmp_path)
    with pytest.raises(ConfigError, match=r"source\.path: file not found"):
        list(src.open(opts, tmp_path))


def test_repeats_is_pass_at_k(tmp_path: Path) -> None:
    from pyattacker.config.build import build, load_config

    (tmp_path / "d.jsonl").write_text('{"id": "a"}\n')
    cfg = tmp_path / "c.json"
    cfg.write_text(
        '{"pipeline": {"tasks": [{"use": "echo"}]},'
        ' "source": {"kind": "jsonl", "path": "d.jsonl", "repeats": 3}}'
    )
    specs = list(build(load_config(cfg)).specs())
    assert [s.repeat for s in specs] == [0, 1, 2]
    assert len({s.key for s in specs}) == 3  # three independent pipelines for one seed


def test_jsonl_with_a_byte_order_mark_and_crlf_reads_every_row(tmp_path: Path) -> None:
    """A file saved by a Windows editor starts with a UTF-8 BOM (and ends lines with CRLF): its
    first row was 'invalid JSON line: invalid character' and the run stopped before starting."""
    (tmp_path / "d.jsonl").write_bytes(b'\xef\xbb\xbf{"id": 1, "q": "\xc3\xa9"}\r\n\r\n{"id": 2}\r\n')
    src = _source("jsonl")
    rows = list(src.open(src.options(path="d.jsonl", key_field="id"), tmp_path))
    assert rows == [("1", {"id": 1, "q": "é"}), ("2", {"id": 2})]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", None),
        (b"\n\n", None),
        (b"[1, 2]\n", r"d\.jsonl:1: key_field 'id' needs a JSON object on each line, got list"),
        (b"null\n", r"d\.jsonl:1: key_field 'id' needs a JSON object on each line, got null"),
        (b'{"id": 1}\n{"id": 2\n', r"d\.jsonl:2: invalid JSON line"),
        (b'{"id": 1, "v": "\xff"}\n', r"d\.jsonl:1: invalid JSON line: .*UTF-8"),
        # 100,000 levels deep: a bare RecursionError without file and line before
        (
            b'{"id": 1}\n' + b"[" * 100_000 + b"]" * 100_000 + b"\n",
            r"d\.jsonl:2: invalid JSON line: nested too deeply",
        ),
    ],
    ids=["empty", "blank", "list", "null", "truncated-line", "bad-utf8", "nested-too-deep"],
)
def test_jsonl_rows_that_are_not_usable_name_file_and_line(
    tmp_path: Path, content: bytes, message: str | None
) -> None:
    (tmp_path / "d.jsonl").write_bytes(content)
    src = _source("jsonl")
    rows = src.open(src.options(path="d.jsonl", key_field="id"), tmp_path)
    if message is None:
        assert list(rows) == []
        return
    with pytest.raises(ConfigError, match=message):
        list(rows)


def test_jsonl_a_gzip_file_says_so(tmp_path: Path) -> None:
    import gzip

    (tmp_path / "d.jsonl").write_bytes(gzip.compress(b'{"id": 1}\n'))
    src = _source("jsonl")
    with pytest.raises(ConfigError, match=r"d\.jsonl:1: invalid JSON line: .*gzip-compressed"):
        list(src.open(src.options(path="d.jsonl"), tmp_path))


def test_jsonl_a_directory_is_not_reported_as_missing(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").mkdir()
    src = _source("jsonl")
    with pytest.raises(ConfigError, match=r"source\.path: .*d\.jsonl is a directory"):
        src.check(src.options(path="d.jsonl"), tmp_path)
