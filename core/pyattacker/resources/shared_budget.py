"""One rate budget shared by several processes: the shards of ``--shards N`` on one machine.

Each process keeps its own sliding windows (``limits.py``); a *shared budget* makes every
process's windows hold every process's grants. It is a log of grants that all of them append
to, and a lock that makes "pull what the others granted, decide, record mine" one step: the
budget gate of a pool with limited resources holds it for each grant. Unlimited resources never
touch it, and a pool without limited resources has no gate at all. A server's Retry-After on
one process's request is a record too: every process holds that resource until the same time.

``SharedBudget`` is the interface; ``FileBudget`` the built-in one, a file of fixed-size records
beside the shard stores, locked with ``flock``. Grant times are ``time.monotonic()``, one clock
for every process of a machine. A cluster executor (Ray) can plug in its own (an actor that
keeps the log) through ``BUDGET_ENV``: ``py:package.module:factory`` names a callable that takes
the pool's name and returns a ``SharedBudget``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import os
import secrets
import struct
from collections.abc import Iterator
from typing import NamedTuple, Protocol, runtime_checkable

from pyattacker.errors import ConfigError

__all__ = [
    "BUDGET_ENV",
    "BudgetEntry",
    "FileBudget",
    "SharedBudget",
    "budget_key",
    "compact_budget_file",
    "open_shared_budget",
]

#: Set in each shard's environment by ``--shards N`` when a pool has rate-limited resources:
#: ``file:PATH`` (the built-in file) or ``py:module:factory`` (a budget of your own).
BUDGET_ENV = "PYATTACKER_SHARED_BUDGET"

CHARGE = 0
SETTLE = 1
#: a server's Retry-After: no grant of the resource until ``at`` (``tokens``: the seconds asked)
HOLD = 2


class BudgetEntry(NamedTuple):
    """One record: a grant (``kind`` CHARGE: ``tokens`` its estimate), a settlement of one
    (``kind`` SETTLE: ``tokens`` the change) or a server's hold (``kind`` HOLD: none until
    ``at``), of the resource ``key``; ``ref`` names the grant (or the hold)."""

    key: bytes
    kind: int
    ref: int
    at: float
    tokens: float


@runtime_checkable
class SharedBudget(Protocol):
    """A grant log shared with other processes. ``hold()`` is exclusive across all of them;
    ``pull()`` and ``push()`` are called inside it (``push`` of a settlement may hold on its own).
    ``pull()`` returns only the entries the *others* pushed since the last pull, in order."""

    def hold(self) -> contextlib.AbstractContextManager[None]: ...

    def pull(self) -> list[BudgetEntry]: ...

    def push(self, entry: BudgetEntry) -> None: ...

    def new_ref(self) -> int:
        """A name for one of this process's grants, unique among the processes sharing it."""
        ...

    def close(self) -> None: ...


def budget_key(pool: str, resource_id: str) -> bytes:
    """The 16-byte name of a resource in the log (every shard builds the same pools)."""
    return hashlib.blake2b(f"{pool}\0{resource_id}".encode(), digest_size=16).digest()


_RECORD = struct.Struct("<16sBxxxxxxxqdd")  # key, kind, pad, ref, at, tokens: 48 bytes


class FileBudget:
    """``SharedBudget`` over one append-only file and ``flock`` (processes of one machine).

    Records are appended whole with one ``write`` under the lock; a reader remembers how far it
    read. A ``ref`` is this opener's random 38-bit origin and a counter, so an opener skips its
    own records (two openers in one process share like two processes).
    """

    __slots__ = ("_count", "_fd", "_offset", "_origin", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise ConfigError(f"shared rate budget {path!r}: cannot open: {exc.strerror}") from None
        self._offset = 0
        self._origin = secrets.randbits(38) | 1
        self._count = 0

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def pull(self) -> list[BudgetEntry]:
        end = os.fstat(self._fd).st_size
        end -= (end - self._offset) % _RECORD.size
        if end <= self._offset:
            return []
        data = os.pread(self._fd, end - self._offset, self._offset)
        self._offset = end
        mine = self._origin
        return [
            BudgetEntry(*fields)
            for fields in _RECORD.iter_unpack(data)
            if fields[2] >> 24 != mine  # ref: origin << 24 | counter
        ]

    def push(self, entry: BudgetEntry) -> None:
        os.write(self._fd, _RECORD.pack(*entry))

    def new_ref(self) -> int:
        self._count = (self._count + 1) & 0xFFFFFF
        return self._origin << 24 | self._count

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


def compact_budget_file(path: str, since: float) -> None:
    """Keep only the records of ``path`` made at ``since`` or later (under its lock): a budget
    file is read whole by each process that opens it, so it holds no more than its windows."""
    budget = FileBudget(path)
    try:
        with budget.hold():
            fd = budget._fd
            data = os.pread(fd, os.fstat(fd).st_size, 0)
            data = data[: len(data) - len(data) % _RECORD.size]
            kept = b"".join(
                data[i : i + _RECORD.size]
                for i in range(0, len(data), _RECORD.size)
                if _RECORD.unpack_from(data, i)[3] >= since
            )
            if len(kept) != len(data):
                os.ftruncate(fd, 0)
                os.write(fd, kept)
    finally:
        budget.close()


def open_shared_budget(spec: str, pool: str) -> SharedBudget:
    """The shared budget ``spec`` names (see ``BUDGET_ENV``) for pool ``pool``."""
    scheme, _, rest = spec.partition(":")
    if scheme == "file" and rest:
        return FileBudget(rest)
    if scheme == "py" and ":" in rest:
        module, _, attr = rest.partition(":")
        try:
            factory = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"{BUDGET_ENV}={spec!r}: cannot load {rest!r}: {exc}") from None
        budget = factory(pool)
        if not isinstance(budget, SharedBudget):
            raise ConfigError(
                f"{BUDGET_ENV}={spec!r}: {rest} returned {type(budget).__name__}, not a SharedBudget"
            )
        return budget
    raise ConfigError(f"{BUDGET_ENV}={spec!r}: expected file:PATH or py:module:factory")
