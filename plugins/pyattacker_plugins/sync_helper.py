"""The sync helper: a small process that ``fdatasync``s one file whenever it is asked to.

Why a process and not a thread: a thread must take the interpreter's lock back after every
``fdatasync`` and every wake-up, and the event loop, which holds it nearly all the time, then
waits for it in turn; on a machine with few cores each of those hand-overs puts a thread to sleep
and wakes it through another core. A process fed through a pipe shares no lock with the run
(docs/performance.md compares the two).

The protocol, over two pipes: the helper first answers ``+`` (it runs: ``sys.executable`` of an
application that embeds Python may be something else, which is then stopped and left to the
thread). The writer sends one byte per request, once the data to make
durable is written. The helper reads every byte waiting, makes one ``fdatasync`` of the file
(an inherited descriptor: the very file the writer writes, never a path opened again), and
answers with one ``k`` per byte read and a ``.``: each request it read was written before that
sync began. A failed sync is answered ``E<errno> <message>`` and a newline, and the helper ends
(it never syncs again: after an error the kernel may have dropped the pages, and a later sync
that succeeds proves nothing). It ends when its request pipe closes: the store closed it, or the
writer's process died. It runs in a session of its own, so that a Ctrl-C at the terminal, which
the run handles by stopping gracefully (and committing), does not end it first.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys

__all__ = ["GREETING_S", "HELPER_SOURCE", "Replies", "SyncHelper", "helper_possible"]

#: the helper's whole program (``python -I -S -c``: no site, no environment, nothing imported
#: but ``os``); argv[1] is the inherited descriptor of the file to sync
HELPER_SOURCE = """\
import os, sys
fd = int(sys.argv[1])
sync = getattr(os, "fdatasync", os.fsync)
os.write(1, b"+")
while True:
    got = os.read(0, 65536)
    if not got:
        break
    try:
        sync(fd)
    except OSError as exc:
        why = (exc.strerror or str(exc)).replace("\\n", " ")
        os.write(1, b"E%d %s\\n" % (exc.errno or 0, why.encode("utf-8", "replace")))
        break
    os.write(1, b"k" * len(got) + b".")
"""


#: bytes read from the answers' pipe at a time (an answer is two bytes per commit or so)
_CHUNK = 65536

#: seconds the helper has to say it runs (``+``) before it is given up for the thread: an
#: interpreter that is not Python (an application embedding one) fails here, not in a commit
GREETING_S = 10.0


def helper_possible() -> bool:
    """Whether this process can start the helper: a POSIX system (the event loop watches the
    answers' pipe) and an interpreter to run it with (not a frozen application, whose
    executable is the application itself)."""
    return os.name == "posix" and bool(sys.executable) and not getattr(sys, "frozen", False)


class Replies:
    """What one read of the answers' pipe said."""

    __slots__ = ("covered", "ended", "error", "syncs")

    def __init__(self) -> None:
        #: requests made durable, and syncs that did it
        self.covered = 0
        self.syncs = 0
        #: the sync's error, once the helper reported one
        self.error: OSError | None = None
        #: the pipe closed: the helper ended (after an error, or killed)
        self.ended = False


class SyncHelper:
    """One helper process syncing the file open at ``fd`` (``path`` names it in messages)."""

    def __init__(self, fd: int, path: str) -> None:
        self.path = path
        requests_r, requests_w = os.pipe()
        answers_r, answers_w = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", HELPER_SOURCE, str(fd)],
                stdin=requests_r,
                stdout=answers_w,
                stderr=subprocess.DEVNULL,
                pass_fds=(fd,),
                start_new_session=True,
            )
        except BaseException:
            for end in (requests_r, requests_w, answers_r, answers_w):
                os.close(end)
            raise
        os.close(requests_r)
        os.close(answers_w)
        self._requests = requests_w
        #: the answers' end, non-blocking: the event loop reads it when it is readable
        self.answers = answers_r
        os.set_blocking(answers_r, False)
        self._partial = b""  # an error line not yet read to its end
        try:
            self._greeted()
        except OSError:
            self._abandon()
            raise

    def _greeted(self) -> None:
        """Wait (``GREETING_S`` at most) for the helper's ``+``; ``OSError`` if it does not come:
        ``sys.executable`` did not run the helper (it exited, or is something else that waits)."""
        poller = select.poll()
        poller.register(self.answers, select.POLLIN)
        poller.poll(int(GREETING_S * 1000))
        try:
            got = os.read(self.answers, 1)
        except BlockingIOError:
            got = None
        if got != b"+":
            why = "no answer" if got is None else f"it answered {got!r}" if got else "it ended"
            raise OSError(f"{sys.executable} -I -S did not run the sync helper ({why})")

    def _abandon(self) -> None:
        """Stop a helper that never said it runs, and release its pipes."""
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        os.close(self._requests)
        os.close(self.answers)
        self._requests = self.answers = -1

    @property
    def pid(self) -> int:
        return self._proc.pid

    def ask(self) -> None:
        """One request: everything written to the file before this call is to be synced.
        Raises ``OSError`` if the helper is gone (its pipe is broken)."""
        os.write(self._requests, b"r")

    def read(self) -> Replies:
        """Parse whatever the helper has answered so far (never blocks)."""
        out = Replies()
        chunks = []
        while True:
            try:
                got = os.read(self.answers, _CHUNK)
            except BlockingIOError:
                break
            if not got:
                out.ended = True
                break
            chunks.append(got)
            if len(got) < _CHUNK:  # all there was (a read more would only say so)
                break
        data = self._partial + b"".join(chunks)
        error_at = data.find(b"E")
        oks = data if error_at < 0 else data[:error_at]
        out.covered = oks.count(b"k")
        out.syncs = oks.count(b".")
        self._partial = b""
        if error_at >= 0:
            line = data[error_at + 1 :]
            if line.endswith(b"\n") or out.ended:
                code, _, why = line.rstrip(b"\n").partition(b" ")
                errno = int(code) if code.isdigit() else 0
                out.error = OSError(errno, why.decode("utf-8", "replace") or "the sync failed")
            else:  # the rest of the line comes with the next read
                self._partial = data[error_at:]
        return out

    def close(self) -> None:
        """No more requests: the helper answers what it has read, then ends."""
        if self._requests >= 0:
            os.close(self._requests)
            self._requests = -1

    def reap(self) -> None:
        """Wait for the helper to end (after ``close``) and release the answers' pipe."""
        self._proc.wait()
        if self.answers >= 0:
            os.close(self.answers)
            self.answers = -1
