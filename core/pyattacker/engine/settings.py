"""``RunConfig``: every run setting, with its default, validated where it is built.

The CLI's flags, a config file's ``run:`` block and ``Runner(**overrides)`` all end up here, so
the three accept and reject exactly the same values (precedence: flag > run block > default).
"""

from __future__ import annotations

import difflib
import math
from typing import Any

import msgspec

from pyattacker.engine.event_loop import check_event_loop
from pyattacker.errors import ConfigError

__all__ = ["JOURNALS", "MAX_CONCURRENCY", "RunConfig"]

JOURNALS = ("full", "summary")
#: Up to one worker per unit of concurrency (each a coroutine with its own memory), started as
#: work arrives. Far beyond any endpoint's limits, a typo such as ``1e20`` would otherwise let a
#: large dataset fill the memory of the machine before the run could even be interrupted.
MAX_CONCURRENCY = 100_000


def _positive_int(name: str, value: Any, *, allow_none: bool = False, maximum: int | None = None) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"run.{name}: must be a positive integer, got {value!r}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"run.{name}: must be at most {maximum:,}, got {value:,}")


def _positive_number(name: str, value: Any, *, allow_none: bool = False, allow_zero: bool = False) -> None:
    if value is None and allow_none:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not allow_zero)
    ):
        kind = "non-negative" if allow_zero else "positive"
        raise ConfigError(f"run.{name}: must be a finite {kind} number, got {value!r}")


class RunConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Settings of one run (see docs/configuration.md for each field)."""

    store: str | None = None
    journal: str = "full"
    concurrency: int = 16
    max_admitted: int | None = None
    label: str = ""
    run_id: str | None = None
    resume: bool = False
    retry_succeeded: bool = False
    fresh_restart: bool = False
    heartbeat_s: float = 5.0
    grace_s: float = 5.0
    stale_after_s: float = 30.0
    strict_leases: bool = False
    strict_metrics: bool = False
    stop_after_failures: int | None = None
    stop_after_s: float | None = None
    #: no pipeline finished for this long: say why (pyattacker.engine.stall); None: never
    stall_after_s: float | None = 60.0
    handle_signals: bool = True
    seed: int = 0
    notes: str = ""
    write_behind: bool = True
    write_batch: int = 512
    flush_interval: float = 1.0
    #: "auto": uvloop when installed, else asyncio (see pyattacker.engine.event_loop)
    event_loop: str = "auto"
    artifact_backend: Any = None
    event_sinks: list[Any] = []
    #: "standard": every fact once (per-lease and per-success facts live on attempt rows);
    #: "all": also one event per lease taken/returned and per task success
    events: str = "standard"
    meta: dict[str, Any] = {}
    max_handoffs: int = 1000
    #: bytes of log text an attempt keeps (``ctx.log``, ``logging``, ``shell_run``); the rest is counted
    log_bytes_per_attempt: int = 65536

    def __post_init__(self) -> None:
        if self.journal not in JOURNALS:
            raise ConfigError(f"run.journal: must be one of {', '.join(JOURNALS)}, got {self.journal!r}")
        check_event_loop(self.event_loop)
        if self.events not in ("standard", "all"):
            raise ConfigError(f"run.events: must be 'standard' or 'all', got {self.events!r}")
        _positive_int("concurrency", self.concurrency, maximum=MAX_CONCURRENCY)
        _positive_int("max_admitted", self.max_admitted, allow_none=True)
        _positive_int("stop_after_failures", self.stop_after_failures, allow_none=True)
        _positive_int("write_batch", self.write_batch)
        _positive_int("max_handoffs", self.max_handoffs)
        _positive_int("log_bytes_per_attempt", self.log_bytes_per_attempt)
        _positive_number("heartbeat_s", self.heartbeat_s)
        _positive_number("grace_s", self.grace_s, allow_zero=True)
        _positive_number("stale_after_s", self.stale_after_s)
        _positive_number("stop_after_s", self.stop_after_s, allow_none=True)
        _positive_number("stall_after_s", self.stall_after_s, allow_none=True)
        _positive_number("flush_interval", self.flush_interval, allow_zero=True)

    @property
    def admitted_limit(self) -> int:
        return self.max_admitted if self.max_admitted is not None else 4 * self.concurrency

    def replace(self, **changes: Any) -> RunConfig:
        unknown = set(changes) - set(self.__struct_fields__)
        if unknown:
            name = sorted(unknown)[0]
            hint = difflib.get_close_matches(name, self.__struct_fields__, n=1)
            extra = f" (did you mean {hint[0]}?)" if hint else ""
            raise ConfigError(f"unknown run setting {name!r}{extra}")
        return msgspec.structs.replace(self, **changes)
