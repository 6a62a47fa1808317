"""A real browser for the dashboard's tests: headless Chromium, run to completion per page.

``render(url)`` loads the page, lets its script run (``--virtual-time-budget``: timers and
fetches go on until that much page time has passed) and returns the DOM as serialised HTML.
Chromium comes from the system (Debian's ``chromium`` package, which ``.ci/run`` installs);
the test tools that download their own browser do not work on these machines. Without it the
browser tests are skipped, except in CI (``CI`` set), where that is a failure: a browser test
that silently does not run is no test.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any

import pytest

__all__ = ["Session", "chromium", "render"]

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


class Session:
    """Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: file
    descriptors 3 and 4, messages as JSON ended by NUL): no port, no extra package. One page;
    ``evaluate`` runs an expression in it (outside the page's CSP, as DevTools does), ``wait``
    polls one until it is true, ``screenshot`` writes a PNG. Stopped by its pid on exit."""

    def __init__(self, width: int = 1280, height: int = 900, timeout: float = 60.0) -> None:
        self.timeout = timeout
        exe = chromium()
        self._profile = tempfile.TemporaryDirectory(prefix="pyattacker-chromium-")
        to_child, self._out = os.pipe()
        self._in, from_child = os.pipe()

        def fds() -> None:  # the child's 3 reads our commands, its 4 writes the answers
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_child, from_child)]
            os.dup2(high[0], 3)  # (inheritable, the one pair of descriptors the child keeps)
            os.dup2(high[1], 4)

        args = [
            f"--user-data-dir={self._profile.name}",
            "--remote-debugging-pipe",
            f"--window-size={width},{height}",
        ]
        self.proc = subprocess.Popen(
            [exe, *_FLAGS, *args, "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,  # only 3 and 4 are inheritable (PEP 446): the others close anyway
            preexec_fn=fds,
            start_new_session=True,
        )
        os.close(to_child)
        os.close(from_child)
        self._buffer = b""
        self._id = 0
        targets = self.send("Target.getTargets")["targetInfos"]
        page = next(t["targetId"] for t in targets if t["type"] == "page")
        self.session = self.send("Target.attachToTarget", targetId=page, flatten=True)["sessionId"]
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
            session=True,
        )

    def send(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events in between are skipped)."""
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                answer = json.loads(raw)
                if answer.get("id") == self._id:
                    if "error" in answer:
                        raise AssertionError(f"{method}: {answer['error']}")
                    result: dict[str, Any] = answer.get("result", {})
                    return result
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._in], [], [], left)[0]:
                raise AssertionError(f"chromium did not answer {method} within {self.timeout} s")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise AssertionError(f"chromium exited while answering {method}")
            self._buffer += chunk

    def goto(self, url: str) -> None:
        self.send("Page.navigate", session=True, url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of ``expression`` in the page (a promise is awaited)."""
        result = self.send(
            "Runtime.evaluate", session=True, expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait(self, expression: str, what: str = "") -> Any:
        """Poll ``expression`` until it is truthy (page load, a fetch answered); its value."""
        deadline = time.monotonic() + self.timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {self.timeout} s for {what or expression}")
            time.sleep(0.1)

    def screenshot(self, path: str, clip: dict[str, float] | None = None) -> None:
        """A PNG at ``path`` of the page rectangle ``clip`` (page coordinates), by default the
        whole page (beyond the window's height)."""
        if clip is None:
            height = int(self.evaluate("document.documentElement.scrollHeight"))
            width = int(self.evaluate("document.documentElement.scrollWidth"))
            clip = {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}
        shot = self.send(
            "Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True, clip=clip
        )
        with open(path, "wb") as out:
            out.write(base64.b64decode(shot["data"]))

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        finally:
            for fd in (self._in, self._out):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._profile.cleanup()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
