"""The shape of a config file: one msgspec Struct per section, and a checker that reports
*every* problem of a mapping (not just the first, as ``msgspec.convert`` would).

Each error is one line starting with its field path (``pipeline.tasks[1].retry.max_attempts``).
Unknown keys get a difflib "did you mean"; a YAML 1.1 bare ``on:`` key (parsed as ``true``)
is explained rather than reported as a baffling non-string key. Sections whose content
depends on plugins (task ``kwargs``, algorithms, backends, source options) are typed ``Any``
here and checked by ``build`` against the plugin that owns them. A number that converts
must also be finite: ``.inf`` / ``.nan`` are reported at their field in every section, and
anywhere inside the free-form data a section records as JSON (its ``DATA`` fields:
``run.meta.limits[2]``).
"""

from __future__ import annotations

import difflib
import math
import typing
from collections.abc import Iterable
from typing import Annotated, Any, ClassVar, Literal

import msgspec

from pyattacker.engine.settings import MAX_CONCURRENCY
from pyattacker.errors import type_name

__all__ = [
    "LimitsSection",
    "PipelineSection",
    "PoolSection",
    "ResourceSection",
    "RetrySection",
    "RunSection",
    "SECTIONS",
    "SourceSection",
    "TaskEntry",
    "check_mapping",
    "did_you_mean",
    "non_finite",
]

PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]
NonNegativeFloat = Annotated[float, msgspec.Meta(ge=0)]
Name = Annotated[str, msgspec.Meta(min_length=1)]


class RunSection(msgspec.Struct, kw_only=True):
    """``run:``: exactly the RunConfig fields a file may set (flags override them)."""

    DATA: ClassVar[frozenset[str]] = frozenset({"meta"})

    store: Name | None = None
    journal: Literal["full", "summary"] = "full"
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=MAX_CONCURRENCY)] = 16
    max_admitted: PositiveInt | None = None
    label: str = ""
    heartbeat_s: PositiveFloat = 5.0
    grace_s: NonNegativeFloat = 5.0
    stale_after_s: PositiveFloat = 30.0
    strict_leases: bool = False
    stop_after_failures: PositiveInt | None = None
    stop_after_s: PositiveFloat | None = None
    stall_after_s: PositiveFloat | None = 60.0
    max_handoffs: PositiveInt = 1000
    log_bytes_per_attempt: PositiveInt = 65536
    retry_succeeded: bool = False
    fresh_restart: bool = False
    seed: int = 0
    notes: str = ""
    write_behind: bool | None = None
    write_batch: PositiveInt = 512
    flush_interval: NonNegativeFloat = 1.0
    event_loop: Literal["auto", "asyncio", "uvloop"] = "auto"
    artifact_backend: Any = None
    events: Literal["standard", "all"] = "standard"
    event_sinks: list[str | dict[str, Any]] = []
    strict_metrics: bool = False
    meta: dict[str, Any] = {}


class LimitsSection(msgspec.Struct, kw_only=True):
    """``pools.<name>.resources[i].limits``: the provider's rate limits of one resource."""

    # each limit is a positive number when given (null is not "no limit": leave the key out)
    rpm: PositiveFloat | msgspec.UnsetType = msgspec.UNSET
    tpm: PositiveFloat | msgspec.UnsetType = msgspec.UNSET
    rpd: PositiveFloat | msgspec.UnsetType = msgspec.UNSET
    tpd: PositiveFloat | msgspec.UnsetType = msgspec.UNSET


class ResourceSection(msgspec.Struct, kw_only=True):
    """One entry of ``pools.<name>.resources`` (``limits`` is checked as a ``LimitsSection``)."""

    DATA: ClassVar[frozenset[str]] = frozenset({"options", "tags", "meta"})

    id: Name | None = None
    capacity: PositiveInt = 1
    options: dict[str, Any] = {}
    tags: list[str] | dict[str, Any] = []
    degrade_after: PositiveInt = 3
    dead_after: PositiveInt = 8
    cooldown_s: NonNegativeFloat = 30.0
    meta: dict[str, Any] = {}
    limits: Any = None


class PoolSection(msgspec.Struct, kw_only=True):
    """``pools.<name>``: resources plus the default acquisition algorithm.

    ``capacity`` and the health settings here are defaults for every resource that does not set
    its own (the reference's pool-level form); with no ``resources`` a ``capacity`` declares one.
    """

    kind: Name | None = None
    algorithm: Any = None
    resources: Any = None
    capacity: PositiveInt | None = None
    degrade_after: PositiveInt | None = None
    dead_after: PositiveInt | None = None
    cooldown_s: NonNegativeFloat | None = None


class RetrySection(msgspec.Struct, kw_only=True):
    """``retry:`` of a task entry (the fields of ``pyattacker.flow.retry.Retrying``)."""

    max_attempts: PositiveInt = 1
    on: list[str] | str = []
    retry_classified: bool = True
    retry_unknown: bool = False
    base: NonNegativeFloat = 0.5
    factor: NonNegativeFloat = 2.0
    cap: NonNegativeFloat = 30.0
    jitter: Literal["full", "equal", "none"] = "full"
    max_total_s: NonNegativeFloat | None = None


class TaskEntry(msgspec.Struct, kw_only=True):
    """One entry of ``pipeline.tasks``: a ``use:`` target plus the fields it overrides.

    ``kwargs`` are checked against the factory (non-finite ones only for a marked factory, whose
    arguments are its identity); ``args`` (the reference's name) are the same arguments, as a
    list (positional) or a mapping; ``config`` is identity data."""

    DATA: ClassVar[frozenset[str]] = frozenset({"config"})

    use: Name
    name: Name | None = None
    resource: Name | None = None
    algorithm: Any = None
    timeout_s: PositiveFloat | None = None
    kwargs: dict[str, Any] = {}
    args: list[Any] | dict[str, Any] | None = None
    retry: Any = None
    config: dict[str, Any] | None = None
    version: str | None = None


class PipelineSection(msgspec.Struct, kw_only=True):
    """``pipeline:``: the chain of tasks and its declared handoffs (``control``)."""

    DATA: ClassVar[frozenset[str]] = frozenset({"tags"})

    name: Name = "pipeline"
    tasks: Any = msgspec.field(default_factory=list)
    resource: Name | None = None
    tags: dict[str, Any] = {}
    control: Any = None


class SourceSection(msgspec.Struct, kw_only=True):
    """The fields every ``source:`` has; the rest belong to the kind's own options Struct."""

    kind: Name
    repeats: PositiveInt = 1


#: top-level section -> Struct (``pools`` is a mapping of PoolSection)
SECTIONS: dict[str, Any] = {
    "run": RunSection,
    "pools": None,
    "pipeline": PipelineSection,
    "source": SourceSection,
}


def did_you_mean(word: str, options: Iterable[str], prefix: str = "") -> str:
    hint = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {prefix}{hint[0]}?)" if hint else ""


def non_finite(value: Any, path: str) -> list[str]:
    """One problem per infinite or NaN number in ``value`` (walking nested mappings and lists).

    A config has no use for them: "never" is spelled by leaving a limit out (or ``null``), and
    a task's fields, ``config`` and factory arguments are strict JSON (its identity), where a
    non-finite number would surface later as ``pipeline: task 'x' fingerprint.timeout_s``,
    naming neither the entry nor the field."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{path}: must be a finite number, got {value}"]
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in non_finite(item, f"{path}.{key}")]
    if isinstance(value, list | tuple):
        return [p for i, item in enumerate(value) for p in non_finite(item, f"{path}[{i}]")]
    return []


def _field_error(path: str, value: Any, exc: msgspec.ValidationError) -> str:
    message = str(exc)
    head, sep, tail = message.partition(" - at `$")
    if sep:
        return f"{path}{tail.rstrip('`')}: {head}"
    if isinstance(value, dict | list) or ", got" in message:
        return f"{path}: {message}"
    return f"{path}: {message}, got {value!r}"


def check_mapping(
    data: Any,
    struct: type[msgspec.Struct],
    path: str,
    errors: list[str],
    *,
    skip: Iterable[str] = (),
    hints: dict[str, str] | None = None,
) -> dict[str, Any] | None:
    """Check ``data`` against ``struct``'s fields; append every problem to ``errors``.

    Returns the converted values of the fields that are present and valid (missing optional
    fields are absent, so callers can tell "not given" from "given"), or None when ``data``
    is not a mapping at all. Keys in ``skip`` are left for the caller.
    """
    if not isinstance(data, dict):
        errors.append(f"{path}: must be a mapping, got {type_name(data)}")
        return None
    fields = {f.name: f for f in msgspec.structs.fields(struct)}
    # ``DATA``: fields holding free-form data that is recorded as JSON (the run's config snapshot,
    # resource rows, pipeline rows, a task's identity). JSON has no inf/nan: refused at any depth
    data_fields: frozenset[str] = getattr(struct, "DATA", frozenset())
    skipped = set(skip)
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key is True and "on" in fields:
            errors.append(
                f"{path}: a bare YAML key `on` is read as the boolean true (YAML 1.1);"
                f' quote it: "on": {value!r}'
            )
            continue
        if not isinstance(key, str):
            errors.append(f"{path}: keys must be strings, got {type_name(key)} {key!r}")
            continue
        if key in skipped:
            continue
        field = fields.get(key)
        if field is None:
            where = f"{path}.{key}" if path else key
            prefix = f"{path}." if path else ""
            hint = did_you_mean(key, list(fields) + sorted(skipped), prefix)
            if not hint and hints:
                close = difflib.get_close_matches(key, list(hints), n=1, cutoff=0.6)
                hint = f" ({hints[close[0]]})" if close else ""
            errors.append(f"{where}: unknown field{hint}")
            continue
        where = f"{path}.{key}" if path else key
        try:
            converted = msgspec.convert(value, field.type)
        except msgspec.ValidationError as exc:
            choices = typing.get_args(field.type) if typing.get_origin(field.type) is Literal else ()
            if choices:  # name the accepted values, not just the rejected one
                errors.append(f"{where}: must be one of {', '.join(map(str, choices))}, got {value!r}")
            else:
                errors.append(_field_error(where, value, exc))
            continue
        if (isinstance(converted, float) and not math.isfinite(converted)) or key in data_fields:
            problems = non_finite(converted, where)
            if problems:
                errors.extend(problems)
                continue
        out[key] = converted
    for name, field in fields.items():
        required = field.default is msgspec.NODEFAULT and field.default_factory is msgspec.NODEFAULT
        if required and name not in data and name not in skipped:
            errors.append(f"{path}.{name}: required field is missing")
    return out
