"""The ``shell_run`` task factory: run a command per pipeline, the value as JSON on stdin.

``use: shell_run`` with ``kwargs: {command: ["python", "score.py"], timeout_s: 60, check: true}``.
A list is executed directly; a string goes through ``/bin/sh -c``. The result is
``{"returncode": int, "stdout": str, "stderr": str, "json": Any}`` where ``stdout`` is always
the decoded text and ``json`` is stdout parsed as JSON when (and only when) it is one JSON
document, else ``None`` (a stable shape is easier to consume than a type that depends on output).
Each line of stdout and stderr also goes to the attempt's log as it arrives (``ctx.log``,
streams ``stdout`` / ``stderr``; ``pyattacker logs`` shows them).

The child runs in its own process group (``start_new_session=True``). On timeout, on
cancellation (including cancellation while the process is being created) and after a normal
exit, the whole group is killed and the child reaped, so a command never leaves orphans or
zombies behind. With ``check`` a non-zero exit raises ``ShellCommandError``
(``error_class="command_failed"``: not retried unless ``retry.on`` names it).
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from pyattacker import ConfigError, PyAttackerError, TaskSpec, hookimpl
from pyattacker.flow.taskspec import factory_task
from pyattacker.plugins.hookspecs import Register

__all__ = ["ShellCommandError", "kill_group", "run_command", "shell_run"]

_TAIL = 2000
#: ``(stream, line)``: a line of the command's output ("stdout" or "stderr"), as it arrives
OnLine = Callable[[str, str], Any]


class ShellCommandError(PyAttackerError):
    """The command exited non-zero under ``check=True``."""

    error_class = "command_failed"

    def __init__(self, returncode: int, stderr: str) -> None:
        self.returncode = returncode
        self.stderr = stderr
        tail = stderr[-_TAIL:].strip()
        super().__init__(f"command exited with {returncode}" + (f": {tail}" if tail else ""))


def _check_command(command: Any) -> str | list[str]:
    if isinstance(command, str) and command.strip():
        return command
    if (
        isinstance(command, Sequence)
        and not isinstance(command, str)
        and command
        and all(isinstance(part, str) for part in command)
    ):
        return list(command)
    raise ConfigError(f"shell_run: command must be a non-empty string or list of strings, got {command!r}")


async def _spawn(command: str | list[str]) -> asyncio.subprocess.Process:
    pipes: dict[str, Any] = {
        "stdin": asyncio.subprocess.PIPE,
        "stdout": asyncio.subprocess.PIPE,
        "stderr": asyncio.subprocess.PIPE,
        "start_new_session": True,
    }
    if isinstance(command, str):
        return await asyncio.create_subprocess_shell(command, **pipes)
    return await asyncio.create_subprocess_exec(*command, **pipes)


async def _uncancellable(aw: asyncio.Future[Any]) -> Any:
    """Wait for ``aw`` to finish even if we are cancelled meanwhile (cleanup must complete)."""
    while True:
        try:
            return await asyncio.shield(aw)
        except asyncio.CancelledError:
            if aw.done():
                return aw.result()


def kill_group(pid: int) -> None:
    """SIGKILL every process of the group led by ``pid`` (already gone is fine)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _kill_and_reap(proc: asyncio.subprocess.Process) -> None:
    kill_group(proc.pid)
    await _uncancellable(asyncio.ensure_future(proc.wait()))


async def _feed_stdin(stdin: asyncio.StreamWriter, data: bytes) -> None:
    """Write ``data`` to the child's stdin and close it; a child that does not read it is fine.

    ``proc.communicate`` is not used: a command that never reads stdin (``true``, ``echo hi``)
    may exit before the write, and uvloop then has already closed the pipe's transport, so its
    ``write`` raises ``RuntimeError`` where asyncio's loop raises ``BrokenPipeError`` (which
    ``communicate`` ignores). A closing transport here means the same thing: nobody reads.
    """
    try:
        if data and not stdin.transport.is_closing():
            stdin.write(data)
            await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        stdin.close()


async def _drain(stream: asyncio.StreamReader, name: str, on_line: OnLine | None) -> bytes:
    """Everything ``stream`` gives until EOF; each complete line also goes to ``on_line`` as it
    arrives (the last one at EOF even without its newline)."""
    if on_line is None:
        return await stream.read()
    chunks: list[bytes] = []
    partial = b""
    while chunk := await stream.read(65536):
        chunks.append(chunk)
        *lines, partial = (partial + chunk).split(b"\n")
        for line in lines:
            on_line(name, line.decode(errors="replace"))
    if partial:
        on_line(name, partial.decode(errors="replace"))
    return b"".join(chunks)


async def _exchange(
    proc: asyncio.subprocess.Process, data: bytes, on_line: OnLine | None
) -> tuple[bytes, bytes]:
    """Feed stdin while draining stdout and stderr (no pipe can fill up), then reap the child."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    _, out, err = await asyncio.gather(
        _feed_stdin(proc.stdin, data),
        _drain(proc.stdout, "stdout", on_line),
        _drain(proc.stderr, "stderr", on_line),
    )
    await proc.wait()
    return out, err


async def run_command(
    command: str | list[str], data: bytes, timeout_s: float | None, on_line: OnLine | None = None
) -> tuple[int, str, str]:
    """Run ``command`` with ``data`` on stdin; ``(returncode, stdout, stderr)``; never leaks
    processes. ``on_line(stream, line)`` gets each line of output as it arrives."""
    creation = asyncio.ensure_future(_spawn(command))
    try:
        proc = await asyncio.shield(creation)
    except asyncio.CancelledError:
        try:
            late = await _uncancellable(creation)
        except Exception:
            late = None
        if late is not None:
            await _kill_and_reap(late)
        raise
    try:
        out, err = await asyncio.wait_for(_exchange(proc, data, on_line), timeout_s)
    except TimeoutError:
        await _kill_and_reap(proc)
        raise TimeoutError(
            f"shell_run: command timed out after {timeout_s}s (process group killed)"
        ) from None
    except BaseException:
        await _kill_and_reap(proc)
        raise
    kill_group(proc.pid)  # leftovers that closed their stdout must not outlive the task
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


def _parse_json(text: str) -> Any:
    if not text.strip():
        return None
    try:
        return msgspec.json.decode(text.encode())
    except msgspec.DecodeError:
        return None


def _log_line(ctx: Any, stream: str, line: str) -> None:
    ctx.log(line, stream=stream)


@factory_task
def shell_run(command: str | list[str], timeout_s: float = 60, check: bool = True) -> TaskSpec:
    """Build the task; the command is checked here so ``validate`` reports a bad one."""
    argv = _check_command(command)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
        raise ConfigError(f"shell_run: timeout_s must be a positive number, got {timeout_s!r}")
    if not isinstance(check, bool):
        raise ConfigError(f"shell_run: check must be true or false, got {check!r}")

    async def run(value: Any, ctx: Any) -> dict[str, Any]:
        try:
            data = msgspec.json.encode(value)
        except (TypeError, msgspec.EncodeError) as exc:
            raise ConfigError(f"shell_run: the input is not JSON-encodable: {exc}") from None

        on_line = None if ctx is None else functools.partial(_log_line, ctx)
        code, out, err = await run_command(argv, data, float(timeout_s), on_line)
        if check and code != 0:
            raise ShellCommandError(code, err)
        return {"returncode": code, "stdout": out, "stderr": err, "json": _parse_json(out)}

    run.__qualname__ = "shell_run.run"
    return TaskSpec(run, name="shell_run")


@hookimpl
def pyattacker_tasks(register: Register) -> None:
    register("shell_run", shell_run)
