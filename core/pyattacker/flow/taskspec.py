"""Tasks: the ``@task`` decorator and the immutable ``TaskSpec`` it builds.

A task is a unary function (invariant 2): ``(value)`` or ``(value, ctx)``, sync or async.
Everything that changes what a task does (its source, config, version, retry policy,
algorithm, factory arguments) is part of its fingerprint, and so of the pipeline key: a
resume never mixes answers from a changed task with answers from the old one.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from pyattacker.errors import ConfigError, PipelineBuildError, type_name
from pyattacker.flow.retry import Retrying, coerce_retry
from pyattacker.resources.algorithm import spec_fingerprint

__all__ = ["UNSET", "Chain", "TaskSpec", "build_task_spec", "factory_task", "task", "with_retry"]


class _Unset:
    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


#: "not given" (distinct from an explicit ``None``, which clears a clearable field)
UNSET: Any = _Unset()

CLEARABLE = frozenset({"resource", "algorithm", "timeout_s", "version"})
OVERRIDABLE = CLEARABLE | {"name", "retry", "config"}


def _strict_json(value: Any, where: str) -> None:
    """Identity data must be plain JSON: no tuples, non-string keys, NaN, or subclasses."""
    if value is None or type(value) in (str, bool, int):
        return
    if type(value) is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise ConfigError(f"{where}: non-finite float {value!r} cannot be part of an identity")
        return
    if type(value) is list:
        for i, item in enumerate(value):
            _strict_json(item, f"{where}[{i}]")
        return
    if type(value) is dict:
        for k, item in value.items():
            if type(k) is not str:
                raise ConfigError(f"{where}: key {k!r} is not a string")
            _strict_json(item, f"{where}.{k}")
        return
    raise ConfigError(f"{where}: {type(value).__name__} is not strict JSON (use lists, dicts, str, numbers)")


def _unpartial(fn: Callable[..., Any]) -> tuple[Callable[..., Any], list[Any]]:
    """The function under ``functools.partial`` layers, and the arguments they bind."""
    bound: list[Any] = []
    while isinstance(fn, functools.partial):
        bound.append([fn.args, fn.keywords])
        fn = fn.func
    return fn, bound


def _source_digest(fn: Callable[..., Any]) -> str:
    """A digest of the task's code that is the same in every process (resume compares it).

    A ``functools.partial`` is its function's source plus the arguments it binds, and a callable
    object without a ``__qualname__`` its class's: neither may fall back on a ``repr`` holding a
    memory address, which would make every resume a changed-identity conflict.
    """
    target, bound = _unpartial(fn)
    target = getattr(target, "__wrapped__", target)
    if not hasattr(target, "__qualname__"):
        target = type(target)
    try:
        text = inspect.getsource(target)
    except (OSError, TypeError):
        text = f"{getattr(target, '__module__', '?')}:{target.__qualname__}"
    if bound:
        text += msgspec.json.encode(bound, enc_hook=_type_name).decode()
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _type_name(value: Any) -> str:
    """Bound arguments JSON cannot hold count by their type (their repr may hold an address)."""
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def _check_callable(fn: Any, name: str) -> None:
    """A task body must be a function that returns its result: refuse what never could."""
    if not callable(fn):
        raise PipelineBuildError(f"task {name!r}: a task must be callable, got {type(fn).__name__}")
    target = _unpartial(fn)[0]
    if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
        raise PipelineBuildError(
            f"task {name!r}: {getattr(target, '__qualname__', target)} is a generator function; a task"
            " returns its result (return a list, or use fanout/map for many values)"
        )


def _arity(fn: Callable[..., Any], name: str) -> bool:
    """True when the task takes a context. Exactly one or two positional parameters are allowed."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    params = [
        p
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    if any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values()) and not params:
        return False
    if len(params) == 1:
        return False
    if len(params) == 2:
        return True
    raise PipelineBuildError(
        f"task {name!r}: a task takes (value) or (value, ctx), but {fn.__qualname__} has"
        f" {len(params)} required positional parameters"
    )


class Chain:
    """``a | b | c``: an unvalidated sequence of tasks (``pipeline()`` validates it)."""

    __slots__ = ("tasks",)

    def __init__(self, tasks: tuple[Any, ...]) -> None:
        self.tasks = tasks

    def __or__(self, other: Any) -> Chain:
        extra = other.tasks if isinstance(other, Chain) else (other,)
        return Chain(self.tasks + extra)


class TaskSpec:
    """An immutable task: the function and everything that shapes what it does."""

    __pyattacker_task__ = True
    fn: Callable[..., Any]
    name: str
    resource: str | None
    algorithm: Any
    retry: Retrying
    timeout_s: float | None
    config: dict[str, Any]
    version: str | None
    factory: dict[str, Any] | None
    children: tuple[TaskSpec, ...]
    on_error: str
    takes_ctx: bool
    is_async: bool
    target: str
    _fingerprint: dict[str, Any] | None
    _source: str | None
    __slots__ = (
        "_fingerprint",
        "_source",
        "algorithm",
        "children",
        "config",
        "factory",
        "fn",
        "is_async",
        "name",
        "on_error",
        "resource",
        "retry",
        "takes_ctx",
        "target",
        "timeout_s",
        "version",
    )

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str,
        resource: str | None = None,
        algorithm: Any = None,
        retry: Retrying | Mapping[str, Any] | None = None,
        timeout_s: float | None = None,
        config: Mapping[str, Any] | None = None,
        version: str | None = None,
        factory: dict[str, Any] | None = None,
        children: tuple[TaskSpec, ...] = (),
        on_error: str = "raise",
    ) -> None:
        if not isinstance(name, str) or not name:
            raise PipelineBuildError(f"task name must be a non-empty string, got {name!r}")
        if timeout_s is not None and (
            isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not timeout_s > 0
        ):  # ``not > 0``: NaN fails too (inf is refused with the identity, where a config can clear it)
            raise ConfigError(f"task {name!r}: timeout_s must be a positive number, got {timeout_s!r}")
        if resource is not None and (not isinstance(resource, str) or not resource):
            raise ConfigError(
                f"task {name!r}: resource must be a pool name (a string), got {type_name(resource)}"
            )
        if not children:
            _check_callable(fn, name)
        if version is not None and not isinstance(version, str):
            raise ConfigError(f"task {name!r}: version must be a string, got {version!r}")
        cfg = dict(config or {})
        _strict_json(cfg, f"task {name!r} config")
        object.__setattr__(self, "fn", fn)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "resource", resource)
        object.__setattr__(self, "algorithm", algorithm)
        object.__setattr__(self, "retry", coerce_retry(retry))
        object.__setattr__(self, "timeout_s", timeout_s)
        object.__setattr__(self, "config", cfg)
        object.__setattr__(self, "version", version)
        object.__setattr__(self, "factory", factory)
        object.__setattr__(self, "children", tuple(children))
        object.__setattr__(self, "on_error", on_error)
        object.__setattr__(self, "takes_ctx", True if children else _arity(fn, name))
        object.__setattr__(
            self,
            "is_async",
            bool(children)
            or inspect.iscoroutinefunction(fn)
            or inspect.iscoroutinefunction(
                getattr(fn, "__call__", None)  # noqa: B004 - callable objects with async __call__
            ),
        )
        object.__setattr__(self, "_source", None)  # ``source_digest``, read on first use
        code = _unpartial(fn)[0]
        object.__setattr__(
            self, "target", f"{getattr(code, '__module__', '?')}:{getattr(code, '__qualname__', '?')}"
        )
        object.__setattr__(self, "_fingerprint", None)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("TaskSpec is immutable; use with_overrides()")

    @property
    def source_digest(self) -> str:
        """The digest of the body's source (``_source_digest``), read when the fingerprint is
        first made: reading a function's source costs milliseconds (the file, then its tokens),
        and a process discovers every task a plugin offers though it runs few of them."""
        digest = self._source
        if digest is None:
            digest = _source_digest(self.fn)
            object.__setattr__(self, "_source", digest)
        return digest

    def __repr__(self) -> str:
        return f"TaskSpec({self.name!r}, target={self.target!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function (handy in unit tests of a task)."""
        return self.fn(*args, **kwargs)

    def __or__(self, other: Any) -> Any:
        return Chain((self,)) | other

    def _fields(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "resource": self.resource,
            "algorithm": self.algorithm,
            "retry": self.retry,
            "timeout_s": self.timeout_s,
            "config": self.config,
            "version": self.version,
            "factory": self.factory,
            "children": self.children,
            "on_error": self.on_error,
        }

    def with_overrides(self, **changes: Any) -> TaskSpec:
        """A copy with some fields replaced: omitted or ``UNSET`` keeps, ``None`` clears a clearable field."""
        fields = self._fields()
        for key, value in changes.items():
            if key not in OVERRIDABLE:
                raise ConfigError(f"task {self.name!r}: cannot override {key!r}")
            if value is UNSET:
                continue
            if value is None and key not in CLEARABLE:
                raise ConfigError(f"task {self.name!r}: {key!r} cannot be cleared with None")
            fields[key] = value
        copy = TaskSpec(self.fn, **fields)
        object.__setattr__(copy, "_source", self._source)  # the same body: its digest, if read
        return copy

    def fingerprint(self, include_code: bool = True) -> dict[str, Any]:
        """Strict-JSON description of everything that determines this task's behaviour."""
        cached = self._fingerprint
        if cached is not None and include_code:
            return cached
        fp: dict[str, Any] = {
            "name": self.name,
            "target": self.target,
            "resource": self.resource,
            "timeout_s": self.timeout_s,
            "retry": self.retry.fingerprint(),
            "algorithm": algorithm_fingerprint(self.algorithm),
            "config": self.config,
            "version": self.version,
            "factory": self.factory,
        }
        if self.children:
            fp["children"] = [c.fingerprint(include_code) for c in self.children]
            fp["on_error"] = self.on_error
        if include_code:
            fp["source"] = self.source_digest
            object.__setattr__(self, "_fingerprint", fp)
        _strict_json(fp, f"task {self.name!r} fingerprint")
        return fp


def build_task_spec(fn: Callable[..., Any], **options: Any) -> TaskSpec:
    """The programmatic form of ``@task(...)``."""
    name = options.pop("name", None) or getattr(_unpartial(fn)[0], "__name__", None) or "task"
    return TaskSpec(fn, name=name, **options)


def task(fn: Callable[..., Any] | str | None = None, **options: Any) -> Any:
    """Make a task: ``@task``, ``@task("name")`` or ``@task(name=..., resource=..., retry=...)``."""
    if callable(fn) and not isinstance(fn, str):
        return build_task_spec(fn, **options)
    if isinstance(fn, str):
        options.setdefault("name", fn)
    elif fn is not None:
        raise TypeError(f"@task takes a function or a name, got {type(fn).__name__}: {fn!r}")

    def wrap(f: Callable[..., Any]) -> TaskSpec:
        return build_task_spec(f, **options)

    return wrap


def with_retry(spec: TaskSpec, retry: Retrying | Mapping[str, Any]) -> TaskSpec:
    """A copy of ``spec`` with another retry policy (this changes the pipeline identity)."""
    return spec.with_overrides(retry=coerce_retry(retry))


def factory_task(build: Callable[..., TaskSpec]) -> Callable[..., TaskSpec]:
    """Mark a task factory: its keyword arguments become part of the produced task's identity.

    ``use: my_pkg:ask_model`` with ``kwargs: {...}`` calls the factory; validation checks the
    kwargs against the factory's signature before anything runs.
    """

    @functools.wraps(build)
    def make(**kwargs: Any) -> TaskSpec:
        spec = build(**kwargs)
        if not isinstance(spec, TaskSpec):
            raise ConfigError(
                f"task factory {build.__qualname__} returned {type(spec).__name__}, not a TaskSpec"
            )
        args = {k: v for k, v in sorted(kwargs.items())}
        _strict_json(args, f"task factory {build.__qualname__} arguments")
        fields = spec._fields()
        fields["factory"] = {"target": f"{build.__module__}:{build.__qualname__}", "args": args}
        return TaskSpec(spec.fn, **fields)

    make.__pyattacker_factory__ = True  # type: ignore[attr-defined]
    return make


def algorithm_fingerprint(spec: Any) -> Any:
    """Equivalent specs (a name, a mapping, an instance) give the same fingerprint.

    ``None`` stays ``None``: the task then uses its pool's algorithm, which is a property of
    the pool (a resource), not of the task.
    """
    if spec is None:
        return None
    return spec_fingerprint(spec)
