"""The README's commands and the runnable examples cannot rot."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.support import REPO
from tests.support.cli import cli, cli_env

ROOT = REPO


def _first_block(text: str) -> list[str]:
    start = text.index("```bash\n") + len("```bash\n")
    return [line for line in text[start : text.index("```", start)].splitlines() if line.strip()]


def test_readme_opens_with_the_two_commands_and_ci_runs_the_second() -> None:
    lines = _first_block((ROOT / "README.md").read_text())
    assert lines == [
        "pip install -e . && pyattacker demo",
        'pip install -e ".[test]" && pip install --no-deps ./examples/plugin_package && python -m pytest',
    ]
    assert lines[1] in (ROOT / ".ci" / "run").read_text()


def test_quickstart_example_runs_and_resumes(tmp_path: Path) -> None:
    store = tmp_path / "qs.db"
    cmd = [sys.executable, str(ROOT / "examples" / "sdk" / "quickstart.py"), str(store)]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert "succeeded=200" in first.stdout
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "skipped=200" in again.stdout


def _readme_yaml() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("```yaml\n") + len("```yaml\n")
    return text[start : text.index("```", start)]


def test_yaml_configs_work_with_the_default_install() -> None:
    """The README's config is YAML: PyYAML comes with ``pip install -e .`` (the first README
    command), not only with an extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[<>=!~;\[ ]", dep, maxsplit=1)[0].lower() for dep in project["dependencies"]]
    assert "pyyaml" in names


def test_readme_yaml_example_validates_runs_and_never_polls_a_busy_slot(tmp_path: Path) -> None:
    """The README's config as written: valid, every pipeline succeeds, and with more pipelines at
    once than slots, a task that finds every slot busy queues for the next one instead of
    sleeping and polling (no ``acquire.backoff`` event)."""
    (tmp_path / "qa.yaml").write_text(_readme_yaml())
    (tmp_path / "data.jsonl").write_text(
        "".join(json.dumps({"id": f"r{i}", "q": i}) + "\n" for i in range(60))
    )
    env = cli_env(tmp_path / "home", tmp_path)
    checked = cli(["validate", "-c", "qa.yaml"], env, cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    ran = cli(["run", "-c", "qa.yaml", "--summary-format", "json"], env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["counters"]["pipelines_succeeded"] == 60
    events = cli(["export", "runs/qa.db", "-", "--rows", "events"], env, cwd=tmp_path)
    kinds = [json.loads(line)["kind"] for line in events.stdout.splitlines() if line.strip()]
    assert kinds.count("pipeline.succeeded") == 60
    assert "acquire.backoff" not in kinds
