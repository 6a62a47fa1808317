"""Running the command line as users do: ``python -m pyattacker`` in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def cli(
    args: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 150
) -> subprocess.CompletedProcess[str]:
    """``pyattacker ARGS`` with ``env``; its exit code and output (the timeout is a hang guard)."""
    return subprocess.run(
        [sys.executable, "-m", "pyattacker", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cli_env(home: Path, modules: Path, **extra: str) -> dict[str, str]:
    """The environment of a CLI subprocess: an isolated home, ``modules`` importable (the task
    modules a test wrote there), only the built-in plugins, plus ``extra`` variables."""
    out = dict(os.environ)
    out.update(
        PYATTACKER_HOME=str(home),
        PYTHONPATH=str(modules) + os.pathsep + out.get("PYTHONPATH", ""),
        PYATTACKER_ONLY_PLUGINS="pyattacker",
        **extra,
    )
    return out
