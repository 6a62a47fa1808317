"""``validate`` tells everything at once and names what the user wrote: every problem of a task
entry in one pass, a missing source file, a task module beside the config, a plain function
named by ``use:``, a pool's kind, the ``--store`` flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyattacker import ConfigError
from pyattacker.config.build import check_config, load_config
from tests.support.cli import cli, cli_env

THREE_PROBLEMS = """\
pools:
  apis:
    resources: [{id: a, capacity: 2}]
pipeline:
  tasks:
    - use: pyattacker.tasks:simulate_llm
      resource: apis
      kwargs: {latncy_ms: 5}
      retry:
        max_attempts: 0
        on: [RetryableError]
source: {kind: range, n: 3}
"""


def test_every_problem_of_one_task_entry_is_reported_in_one_pass(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(THREE_PROBLEMS)
    with pytest.raises(ConfigError) as info:
        check_config(load_config(path))
    lines = str(info.value).splitlines()[1:]
    assert any(line.startswith("  pipeline.tasks[0].kwargs.latncy_ms: unknown argument") for line in lines)
    assert any(line.startswith("  pipeline.tasks[0].retry.max_attempts:") for line in lines)
    assert any("a bare YAML key `on`" in line for line in lines)
    assert len(lines) == 3


def test_validate_warns_of_a_missing_source_file_and_strict_refuses_it(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(
        "pipeline: {tasks: [{use: echo}]}\nsource: {kind: jsonl, path: nope.jsonl}\n"
    )
    env = cli_env(tmp_path / "home", tmp_path)
    plain = cli(["validate", "-c", "c.yaml"], env, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert "source.path: file not found:" in plain.stderr and "nope.jsonl" in plain.stderr
    assert "config is valid" in plain.stdout
    strict = cli(["validate", "--strict", "-c", "c.yaml"], env, cwd=tmp_path)
    assert strict.returncode == 2
    assert "source.path: file not found:" in strict.stderr and "(--strict)" in strict.stderr


def _beside(tmp_path: Path, use: str) -> tuple[Path, dict[str, str]]:
    """A config and its task module in one folder; the command runs from another folder, with
    nothing of that folder on PYTHONPATH."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "beside_tasks.py").write_text(
        "from pyattacker import task\n\n\n@task\ndef parse(v):\n    return {'parsed': v}\n\n\n"
        "def plain(v):\n    return v\n"
    )
    (folder / "c.yaml").write_text(
        f"run: {{store: out.db}}\npipeline: {{tasks: [{{use: '{use}'}}]}}\nsource: {{kind: range, n: 3}}\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return folder / "c.yaml", cli_env(tmp_path / "home", elsewhere)


def test_a_task_module_beside_the_config_imports_without_pythonpath(tmp_path: Path) -> None:
    config, env = _beside(tmp_path, "beside_tasks:parse")
    result = cli(["run", "-c", str(config)], env, cwd=config.parent.parent / "elsewhere")
    assert result.returncode == 0, result.stderr
    assert (config.parent / "out.db").is_file()


def test_a_plain_function_named_by_use_says_what_to_do(tmp_path: Path) -> None:
    config, env = _beside(tmp_path, "beside_tasks:plain")
    result = cli(["validate", "-c", str(config)], env, cwd=config.parent.parent / "elsewhere")
    assert result.returncode == 2
    message = " ".join(result.stderr.split())
    assert "pipeline.tasks[0].use: beside_tasks:plain is a plain function, not a task" in message
    assert "decorate it with @task" in message and "@factory_task" in message
    assert "missing required argument" not in message


def test_validate_prints_the_kind_of_a_pool_that_takes_its_name(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(
        "pools: {apis: {resources: [{id: a}]}}\n"
        "pipeline: {tasks: [{use: echo, resource: apis}]}\nsource: {kind: range, n: 1}\n"
    )
    result = cli(["validate", "-c", "c.yaml"], cli_env(tmp_path / "home", tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "apis: kind=apis " in result.stdout
    assert "kind=None" not in result.stdout


def test_an_unusable_store_flag_is_named_as_the_flag(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("pipeline: {tasks: [{use: echo}]}\nsource: {kind: range, n: 1}\n")
    (tmp_path / "a_file").write_text("")
    env = cli_env(tmp_path / "home", tmp_path)
    result = cli(["run", "-c", "c.yaml", "--store", "a_file/x.db"], env, cwd=tmp_path)
    assert result.returncode == 2
    assert "--store: cannot create the folder" in result.stderr
    assert "run.store" not in result.stderr
