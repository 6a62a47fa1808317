"""The README's commands and the runnable examples cannot rot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support import REPO

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
