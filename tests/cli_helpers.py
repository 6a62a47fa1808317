"""Running the command line as users do: ``python -m pyattacker`` in a subprocess."""

from __future__ import annotations

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
