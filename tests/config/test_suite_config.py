"""Suite configs: every problem reported at once, each at its field path, on real files; the
shipped example suite validates; ``validate`` takes a suite (exit 0 or 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyattacker import ConfigError
from pyattacker.config.build import load_config
from pyattacker.config.suite import check_suite
from tests.support import REPO
from tests.support.cli import cli, cli_env

MEMBER = """
pools:
  model: {resources: [{id: m1, capacity: 2}]}
pipeline: {name: p, tasks: [{use: echo, resource: model}]}
source: {kind: range, n: 4}
"""


def _suite(tmp_path: Path, body: str, member: str = MEMBER) -> Path:
    (tmp_path / "m.yaml").write_text(member)
    path = tmp_path / "suite.yaml"
    path.write_text(body)
    return path


def _errors(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        check_suite(load_config(path))
    return [line.strip() for line in str(info.value).splitlines()[1:]]


GOOD = """
suite: {id: s1}
run: {concurrency: 3}
output: {root: out}
pools: {shared: {resources: [{id: r, capacity: 1}]}}
experiments:
  a: {config: m.yaml, pool_bindings: {model: shared}, label: first}
  b: {config: m.yaml, limit: 2}
"""


def test_a_good_suite_is_checked_with_members_relative_to_the_suite_file(tmp_path: Path) -> None:
    checked = check_suite(load_config(_suite(tmp_path, GOOD)))
    assert checked.id == "s1" and checked.root == tmp_path / "out" and checked.layout == "combined"
    assert [m.id for m in checked.members] == ["a", "b"]
    assert checked.members[0].pool_bindings == {"model": "shared"} and checked.members[1].limit == 2
    assert checked.run["concurrency"] == 3


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("suite: {id: 'bad id'}\nexperiments: {a: {config: m.yaml}}", "suite.id: 'bad id' is not an id"),
        ("suite: {id: nul}\nexperiments: {a: {config: m.yaml}}", "suite.id: 'nul' is a reserved device name"),
        ("suite: {id: s, x: 1}\nexperiments: {a: {config: m.yaml}}", "suite.x: unknown field"),
        ("suite: {id: s}\nexperimnts: {}", "experimnts: unknown top-level section of a suite (did you mean"),
        ("suite: {id: s}\nexperiments: {}", "experiments: must be a non-empty mapping"),
        ("suite: {id: s}\nexperiments: {a: {}}", "experiments.a.config: required"),
        ("suite: {id: s}\nexperiments: {a: {config: nope.yaml}}", "experiments.a.config: "),
        ("suite: {id: s}\nexperiments: {-a: {config: m.yaml}}", "experiments.-a: '-a' is not an id"),
        (
            "suite: {id: s}\nexperiments: {a: {config: m.yaml, lable: x}}",
            "experiments.a.lable: unknown field",
        ),
        (
            "suite: {id: s}\nexperiments: {a: {config: m.yaml, limit: 0}}",
            "experiments.a.limit: must be an integer",
        ),
        (
            "suite: {id: s}\nexperiments: {a: {config: m.yaml, label: 3}}",
            "experiments.a.label: must be a string",
        ),
        (
            "suite: {id: s}\nexperiments: {a: {config: m.yaml}, A: {config: m.yaml}}",
            "experiments.A: the same id as 'a'",
        ),
        (
            "suite: {id: s}\nexperiments: {a: {config: m.yaml, pool_bindings: {modl: x}}}",
            "experiments.a.pool_bindings.modl: the member config has no pool 'modl'",
        ),
        (
            "suite: {id: s}\nexperiments: {a: {config: m.yaml, pool_bindings: {model: shard}}}",
            "experiments.a.pool_bindings.model: no suite pool named 'shard'",
        ),
        (
            "suite: {id: s}\nrun: {store: x.db}\nexperiments: {a: {config: m.yaml}}",
            "run.store: not allowed in a suite",
        ),
        ("suite: {id: s}\nrun: {concurrency: 0}\nexperiments: {a: {config: m.yaml}}", "run.concurrency:"),
        ("suite: {id: s}\noutput: {root: 5}\nexperiments: {a: {config: m.yaml}}", "output.root: must be"),
        (
            "suite: {id: s}\noutput: {layout: flat}\nexperiments: {a: {config: m.yaml}}",
            "output.layout: must be one of",
        ),
        ("suite: {id: s}\nexperiments: {a: {config: suite.yaml}}", "experiments.a.config: "),
    ],
)
def test_every_bad_suite_config_names_the_field(tmp_path: Path, body: str, expected: str) -> None:
    lines = _errors(_suite(tmp_path, body))
    assert any(line.startswith(expected) for line in lines), lines


def test_a_broken_member_is_reported_at_its_config_field(tmp_path: Path) -> None:
    member = "pipeline: {name: p, tasks: [{use: ech}]}\nsource: {kind: range, n: 1}\n"
    lines = _errors(_suite(tmp_path, "suite: {id: s}\nexperiments: {a: {config: m.yaml}}", member))
    assert any(line.startswith("experiments.a.config: pipeline.tasks[0]") for line in lines), lines


def test_all_problems_come_at_once(tmp_path: Path) -> None:
    body = "suite: {id: 's s'}\nrun: {store: x.db}\nexperiments: {a: {config: m.yaml, limit: -1}}"
    lines = _errors(_suite(tmp_path, body))
    assert [line.split(":", 1)[0] for line in lines] == ["suite.id", "run.store", "experiments.a.limit"]


def test_member_run_blocks_are_listed_as_ignored(tmp_path: Path) -> None:
    path = _suite(tmp_path, GOOD, MEMBER + "run: {concurrency: 99, label: own}\n")
    checked = check_suite(load_config(path))
    assert checked.members[0].ignored_run_fields == ["concurrency", "label"]


def test_validate_takes_a_suite(tmp_path: Path, _isolated_home: Path) -> None:
    env = cli_env(_isolated_home, tmp_path)
    path = _suite(tmp_path, GOOD, MEMBER + "run: {concurrency: 99}\n")
    result = cli(["validate", "-c", str(path), "--format", "json"], env)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["suite"] == "s1" and list(doc["experiments"]) == ["a", "b"]
    assert doc["experiments"]["a"]["ignored_run_fields"] == ["concurrency"]
    assert "experiments.a: run fields ignored in a suite" in result.stderr
    assert not (tmp_path / "out").exists()  # validate writes nothing
    bad = _suite(tmp_path, "suite: {id: s}\nexperiments: {a: {config: m.yaml, limit: 0}}")
    refused = cli(["validate", "-c", str(bad)], env)
    assert refused.returncode == 2 and "experiments.a.limit: must be an integer" in refused.stderr


def test_the_example_suite_validates() -> None:
    checked = check_suite(load_config(REPO / "examples" / "suite" / "suite.yaml"))
    assert [m.id for m in checked.members] == ["steady", "flaky"]


def test_validate_a_suite_whose_member_data_is_missing_and_strict_env(
    tmp_path: Path, _isolated_home: Path
) -> None:
    env = cli_env(_isolated_home, tmp_path)
    member = "pipeline: {name: p, tasks: [{use: echo}]}\nsource: {kind: jsonl, path: gone.jsonl}\n"
    path = _suite(tmp_path, "suite: {id: s}\nexperiments: {a: {config: m.yaml}}", member)
    loose = cli(["validate", "-c", str(path)], env)
    assert loose.returncode == 0 and "experiments.a.config: source.path: file not found" in loose.stderr
    strict = cli(["validate", "-c", str(path), "--strict"], env)
    assert strict.returncode == 2 and "experiments.a.config: source.path: file not found" in strict.stderr
    unset = "pipeline: {name: p, tags: {t: '${UNSET_NAME_H48}'}, tasks: [{use: echo}]}\n"
    (tmp_path / "m.yaml").write_text(unset)
    warned = cli(["validate", "-c", str(path)], env)
    assert warned.returncode == 0 and "experiments.a: " in warned.stderr and "UNSET_NAME_H48" in warned.stderr
    refused = cli(["validate", "-c", str(path), "--strict-env"], env)
    assert (
        refused.returncode == 2
        and "experiments.a.config: " in refused.stderr
        and "UNSET_NAME_H48" in refused.stderr
    )
