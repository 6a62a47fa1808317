"""A real browser for the dashboard's tests: headless Chromium, run to completion per page.

``render(url)`` loads the page, lets its script run (``--virtual-time-budget``: timers and
fetches go on until that much page time has passed) and returns the DOM as serialised HTML.
Chromium comes from the system (Debian's ``chromium`` package, which ``.ci/run`` installs);
the test tools that download their own browser do not work on these machines. Without it the
browser tests are skipped, except in CI (``CI`` set), where that is a failure: a browser test
that silently does not run is no test.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile

import pytest

__all__ = ["chromium", "render"]

#: the flags that keep Chromium quiet on a machine with a closed network and no display
_FLAGS = (
    "--headless",
    "--no-sandbox",  # tests run as root in CI
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


def chromium() -> str:
    """The Chromium executable (``PYATTACKER_TEST_CHROMIUM`` overrides the search)."""
    found = os.environ.get("PYATTACKER_TEST_CHROMIUM") or next(
        filter(None, (shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome"))),
        None,
    )
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("no Chromium for the browser tests: .ci/run installs Debian's chromium package")
    pytest.skip("no Chromium installed (apt-get install chromium); CI runs these tests")


def render(url: str, budget_ms: int = 3000, timeout: float = 90.0) -> str:
    """The DOM of ``url`` after ``budget_ms`` of page time; the browser is stopped by its pid."""
    exe = chromium()
    with tempfile.TemporaryDirectory(prefix="pyattacker-chromium-") as profile:
        args = [f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", "--dump-dom", url]
        proc = subprocess.Popen(
            [exe, *_FLAGS, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its helper processes share the group: stop them together
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if proc.returncode != 0 or "<html" not in out:
            raise AssertionError(f"chromium exited {proc.returncode}: {err[-2000:]}")
        return out
