"""``--executor-option KEY=VALUE``: how a shard executor gets its options from the command line,
and the summary line an executor may add (``summary_note``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyattacker import ConfigError
from pyattacker.shard.executor import executor_note, get_executor, parse_executor_options
from tests.support.cli import cli, cli_env

CONFIG = """
pipeline:
  name: opts
  tasks:
    - {use: "pyattacker.tasks:echo"}
source: {kind: range, n: 6}
"""


def test_options_parse_as_strings_and_bad_ones_name_themselves() -> None:
    assert parse_executor_options(["start=spawn", "grace_s=2.5", "address=h:1=x"]) == {
        "start": "spawn",
        "grace_s": "2.5",
        "address": "h:1=x",
    }
    with pytest.raises(ConfigError, match=r"expected KEY=VALUE, got 'spawn'"):
        parse_executor_options(["spawn"])
    with pytest.raises(ConfigError, match=r"expected KEY=VALUE, got '=1'"):
        parse_executor_options(["=1"])
    with pytest.raises(ConfigError, match="start given twice"):
        parse_executor_options(["start=fork", "start=spawn"])


def test_an_option_the_executor_does_not_take_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"--executor local: bad --executor-option \(colour='red'\)"):
        get_executor("local", colour="red")
    with pytest.raises(ConfigError, match=r"--executor local: bad --executor-option \(grace_s='soon'\)"):
        get_executor("local", grace_s="soon")
    executor = get_executor("local", grace_s="2.5", tail_lines="7", relay_stderr=False)
    assert (executor.grace_s, executor.tail_lines) == (2.5, 7)  # type: ignore[attr-defined]


def test_summary_note_is_optional_and_never_breaks_the_summary() -> None:
    class Noted:
        def summary_note(self) -> str:
            return "stores shipped"

    class Broken:
        def summary_note(self) -> str:
            raise RuntimeError("gone")

    assert executor_note(object()) is None
    assert executor_note(Noted()) == "stores shipped"
    assert "RuntimeError: gone" in (executor_note(Broken()) or "")


def test_executor_options_reach_the_executor_through_the_cli(tmp_path: Path, _isolated_home: Path) -> None:
    (tmp_path / "c.yaml").write_text(CONFIG)
    env = cli_env(_isolated_home, tmp_path)
    env.pop("PYATACKER_SHARD", None)
    base = ["run", "-c", "c.yaml", "--store", "x.db"]
    ok = cli(
        [*base, "--shards", "2", "--executor-option", "start=spawn", "--summary-format", "json"],
        env,
        tmp_path,
    )
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["merged"]["pipelines"]["by_state"] == {"succeeded": 6}
    assert doc["executor_note"] is None  # the local executor adds no line

    bad = cli([*base, "--shards", "2", "--executor-option", "start=teleport"], env, tmp_path)
    assert bad.returncode == 2
    assert "the shard start method must be one of auto, fork, spawn, got 'teleport'" in bad.stderr
    unknown = cli([*base, "--shards", "2", "--executor-option", "colour=red"], env, tmp_path)
    assert unknown.returncode == 2
    assert "bad --executor-option (colour='red')" in unknown.stderr
    alone = cli([*base, "--executor-option", "start=spawn"], env, tmp_path)
    assert alone.returncode == 2
    assert "--executor-option: only with --shards N" in alone.stderr
