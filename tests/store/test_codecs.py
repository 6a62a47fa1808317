"""What a task gets back after a resume, for values JSON cannot hold as they are.

The first run hands a task's output to the next task in memory; a resume decodes it from the
store. Whatever the codecs do, the two must agree (or the difference be documented, see
docs/stores.md "Codecs"), and a value must never come back as a different one silently.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import math
import uuid
from pathlib import Path
from typing import Any

import pytest

from pyattacker import ConfigError, pipeline, task
from pyattacker.store.base import iter_rows
from pyattacker.store.codecs import CodecRegistry
from pyattacker.store.location import open_store
from tests.support.runner import vrunner


def _twice(tmp_path: Path, produced: Any, produce: Any = None) -> tuple[list[Any], Any]:
    """``produce -> consume``: the first run fails in ``consume`` (the output of ``produce``
    durable), a second runner (a fresh codec registry, as a new process has) resumes it.
    Returns what ``consume`` received in each run and the resume's report."""
    seen: list[Any] = []
    fail = {"on": True}

    @task
    def default_produce(x: Any) -> Any:
        return produced

    @task
    def consume(value: Any) -> Any:
        seen.append(value)
        if fail["on"]:
            raise ValueError("later")
        return "ok"

    tpl = pipeline("p", produce or default_produce, consume)
    path = str(tmp_path / "s.db")
    with vrunner(store=path) as r:
        first = r.run(tpl.map([{"i": 0}]))
    assert first.failed == 1
    fail["on"] = False
    with vrunner(store=path) as r:
        rep = r.run(tpl.map([{"i": 0}]))
    return seen, rep


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN included, and of the same types all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        {"score": float("nan"), "hi": float("inf"), "lo": float("-inf"), "none": None},
        [1.0, float("nan")],
        {1: "a", 2: "b"},
        {1: "a", "1": "b", None: 0, 2.5: "x", (1, 2): "t"},
    ],
    ids=["nan", "non-finite-in-dict", "nan-in-list", "int-keys", "mixed-keys"],
)
def test_values_json_cannot_hold_come_back_exactly_after_a_resume(tmp_path: Path, value: Any) -> None:
    """msgspec writes NaN and infinities as JSON null: a resume handed the next task None where
    the first run handed it NaN. A dict with integer keys failed the pipeline ("Only dicts with
    str keys are supported"). Both now go to the next codec (msgpack), which keeps them."""
    seen, rep = _twice(tmp_path, value)
    assert rep.succeeded == 1
    first, resumed = seen
    assert _same(first, value) and _same(resumed, value), (first, resumed)


@dataclasses.dataclass
class Scored:
    label: str
    score: float


@task
def scored(x: Any) -> Scored:
    return Scored(label="a", score=float("nan"))


def test_a_record_returned_by_an_annotated_task_comes_back_as_its_type(tmp_path: Path) -> None:
    """A dataclass output came back as a dict after a restart: only the types encoded in the
    process were known, and a resumed process had not encoded one yet (so ``value.score``
    raised). The task's return annotation names it. A NaN inside survives too."""
    seen, rep = _twice(tmp_path, None, produce=scored)
    assert rep.succeeded == 1
    first, resumed = seen
    assert isinstance(resumed, Scored) and resumed.label == "a" and math.isnan(resumed.score)
    assert isinstance(first, Scored)


@pytest.mark.parametrize(
    "value",
    [
        (1, 2),
        {3, 1, 2},
        {(1, 2), (3, 4)},
        frozenset({"a", "b"}),
        datetime.datetime(2024, 1, 2, 3, 4, 5),
        datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
        datetime.date(2024, 1, 2),
        datetime.time(3, 4, 5),
        datetime.timedelta(days=1, seconds=2),
        decimal.Decimal("1.10"),
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
    ],
    ids=lambda v: type(v).__name__,
)
def test_standard_types_at_the_top_come_back_as_their_type(value: Any) -> None:
    """A tuple came back as a tuple but a set as a list, a datetime or a Decimal as a string:
    the recorded type name now rebuilds each of them."""
    codecs = CodecRegistry.from_plugins()
    codec, type_name, data = codecs.encode(value)
    back = codecs.decode(codec, type_name, data)
    assert type(back) is type(value) and back == value


def test_nested_values_come_back_as_json_data_as_documented() -> None:
    """Inside a dict or a list, the JSON codec keeps JSON's types: tuples and sets are lists,
    bytes are base64 text, a datetime an ISO string (docs/stores.md, "Codecs")."""
    codecs = CodecRegistry.from_plugins()
    value = {"t": (1, 2), "s": {2, 1}, "b": b"\x00\xff", "d": datetime.date(2024, 1, 2)}
    codec, type_name, data = codecs.encode(value)
    assert codec == "json"
    assert codecs.decode(codec, type_name, data) == {"t": [1, 2], "s": [1, 2], "b": "AP8=", "d": "2024-01-02"}


class Opaque:
    def __init__(self) -> None:
        self.a = 1


def test_an_output_no_codec_takes_fails_its_pipeline_naming_task_and_pipeline(tmp_path: Path) -> None:
    @task
    def produce(x: Any) -> Any:
        return Opaque()

    path = str(tmp_path / "s.db")
    tpl = pipeline("p", produce)
    with vrunner(store=path) as r:
        rep = r.run(tpl.map([{"i": 0}]))
    assert rep.failed == 1
    key = tpl.bind({"i": 0}).key
    store = open_store(path, read_only=True)
    try:
        (row,) = iter_rows(store, "pipelines")
    finally:
        store.close()
    assert row.error_type == "ArtifactCodecError" and row.failed_task == "produce"
    assert row.error_message is not None
    assert row.error_message.startswith(f"the output of task 'produce' of pipeline '{key}' cannot be stored:")
    assert "no codec can encode a value of type Opaque" in row.error_message


def test_a_seed_no_codec_takes_names_its_pipeline() -> None:
    @task
    def echo(x: Any) -> Any:
        return x

    with vrunner() as r:
        rep = r.run(pipeline("named", echo).map([{"i": 0}, Opaque()]))
    assert rep.stop_reason == "producer_error" and rep.producer_error is not None
    assert "a seed of pipeline 'named': no codec can encode a value of type Opaque" in rep.producer_error


def test_a_seed_is_bound_with_exactly_what_the_registry_encodes_it_to() -> None:
    """Binding calls the codec function the registry keeps per type itself, and goes back to
    the registry for a type it has not seen and for a value that function refuses (NaN after
    a plain float, integer keys after string keys, a record): every seed's codec, type name,
    bytes and key must be what ``CodecRegistry.encode`` gives, in any order of types."""

    @task
    def keep(x: Any) -> Any:
        return x

    seeds = [
        "a", 1.0, float("nan"), 2.5, {"k": 1}, {1: "int key"}, {"k": float("inf")}, {"k": 2},
        [1, 2], (1, 2), None, True, 7, Scored(label="s", score=1.0), b"raw", "b", b"more",
        float("-inf"),
    ]  # fmt: skip
    template = pipeline("p", keep)
    reference = CodecRegistry.from_plugins()
    specs = list(template.map(seeds))
    assert [(s.seed_codec, s.seed_type, s.seed_bytes) for s in specs] == [
        reference.encode(seed) for seed in seeds
    ]
    assert {s.seed_codec for s in specs} == {"json", "msgpack", "bytes"}
    assert [s.key for s in specs] == [template.bind(seed).key for seed in seeds]


def test_a_template_maps_lazily_checks_repeats_at_once_and_binds_every_seed_once() -> None:
    """``map`` consumes nothing and looks up no codec before the first spec is asked for, refuses
    a bad ``repeats`` at the call, knows its length when the seeds have one, and hands out the
    same one-pass stream through ``next()`` and ``iter()``: every seed bound once, in order,
    with the key ``bind`` gives it."""

    @task
    def keep(x: Any) -> Any:
        return x

    taken: list[int] = []

    def source() -> Any:
        for i in range(5):
            taken.append(i)
            yield {"i": i}

    template = pipeline("p", keep)
    stream = template.map(source())
    assert taken == [] and stream.length is None and template.map([1, 2, 3]).length == 3
    assert template._codecs is None  # no registry made (no plugins discovered) by ``map`` itself
    with pytest.raises(ConfigError, match="repeats must be an integer >= 1"):
        template.map([1], repeats=0)
    first = next(stream)
    rest = list(stream)
    assert taken == [0, 1, 2, 3, 4] and list(stream) == [] and next(iter(stream), None) is None
    assert [s.seed for s in [first, *rest]] == [{"i": i} for i in range(5)]
    assert [s.key for s in [first, *rest]] == [template.bind({"i": i}).key for i in range(5)]
    twice = list(template.map([{"i": 0}], repeats=2))
    assert [(s.repeat, s.key) for s in twice] == [(r, template.bind({"i": 0}, repeat=r).key) for r in (0, 1)]
    assert twice[0].key == first.key and twice[1].key != first.key
