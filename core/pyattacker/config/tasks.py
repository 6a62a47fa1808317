"""``use:`` resolution and task-entry overrides for declarative pipelines.

A ``use:`` target is a registered task name (any plugin), ``pyattacker.tasks:NAME`` for a
built-in, or an importable ``module:attr`` that is a ``TaskSpec`` or a factory returning one.
``kwargs`` are checked against the factory's signature *before* it is called, so a misspelt
argument is a config error with a suggestion, never a crash in the middle of a run. The
entry then overrides only the fields it names (``TaskSpec.with_overrides``: omitted keeps,
an explicit null clears resource / algorithm / timeout_s / version).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path
from typing import Any

from pyattacker.config.schema import RetrySection, TaskEntry, check_mapping, did_you_mean, non_finite
from pyattacker.errors import ConfigError
from pyattacker.flow.retry import Retrying, resolve_exception_name
from pyattacker.flow.taskspec import CLEARABLE, UNSET, TaskSpec
from pyattacker.plugins.registry import Registry
from pyattacker.resources.algorithm import validate_algorithm_spec

__all__ = ["BUILTIN_PREFIX", "build_retry", "import_from", "resolve_task_entry", "resolve_use"]

#: ``pyattacker.tasks:NAME`` names a built-in task through the registry (never an import).
BUILTIN_PREFIX = "pyattacker.tasks:"


class UseError(Exception):
    """Internal: a ``use:`` target that cannot be resolved (the message is user-facing)."""


def _registered(name: str, registry: Registry) -> Any:
    obj = registry.get(name)
    if obj is None:
        known = registry.names()
        hint = did_you_mean(name, known)
        listing = f"; registered tasks: {', '.join(known)}" if known else "; no tasks are registered"
        raise UseError(f"unknown task {name!r}{hint}{listing} (or use module:attr for your own task)")
    return obj


def import_from(folder: Path) -> None:
    """Put ``folder`` (a config's folder) first on ``sys.path``, once, so a task module beside
    the config imports as ``python script.py`` imports the script's neighbours."""
    entry = str(folder)
    if entry not in sys.path:
        sys.path.insert(0, entry)
        importlib.invalidate_caches()


def resolve_use(target: str, registry: Registry, folder: Path | None = None) -> Any:
    """The TaskSpec or factory that ``target`` names; raises ``UseError`` with a suggestion.

    ``folder``: the config's folder, put on the import path before a ``module:attr`` is imported."""
    if target.startswith(BUILTIN_PREFIX):
        return _registered(target[len(BUILTIN_PREFIX) :], registry)
    if ":" not in target:
        return _registered(target, registry)
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise UseError(f"{target!r} is not of the form module:attr")
    if folder is not None:
        import_from(folder)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        where = f"the config's folder {folder} and " if folder is not None else ""
        raise UseError(f"cannot import module {module_name!r}: {exc} (looked in {where}PYTHONPATH)") from None
    except (Exception, SystemExit) as exc:  # sys.exit() in a module is its failure, not ours to obey
        raise UseError(f"importing module {module_name!r} failed: {type(exc).__name__}: {exc}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = [n for n in dir(obj) if not n.startswith("_")]
            raise UseError(f"{module_name!r} has no attribute {part!r}{did_you_mean(part, public)}")
        obj = getattr(obj, part)
    return obj


def _kwargs_problems(
    factory: Any, kwargs: dict[str, Any], path: str, target: str, origin: dict[str, str]
) -> list[str]:
    """What is wrong with ``kwargs`` for ``factory``; ``origin``: the field path of an argument
    given under ``args:`` (the others are under ``kwargs:``)."""
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return []
    params = sig.parameters.values()
    named = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    problems = []
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        for key in kwargs:
            if key not in named:
                accepted = (
                    f"; {target} accepts: {', '.join(named)}" if named else f"; {target} takes no arguments"
                )
                where = origin.get(key, f"{path}.kwargs.{key}")
                problems.append(f"{where}: unknown argument{did_you_mean(key, named)}{accepted}")
    for p in params:
        if (
            p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and p.default is p.empty
            and p.name not in kwargs
        ):
            problems.append(f"{path}.kwargs: missing required argument {p.name!r} of {target}")
    return problems


def _positional_names(factory: Any) -> list[str] | None:
    """The names ``args: [...]`` fills, in order (None: the signature cannot be read)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    return [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]


def _arguments(
    obj: Any, values: dict[str, Any], path: str, target: str, errors: list[str]
) -> tuple[dict[str, Any], dict[str, str]] | None:
    """A factory's keyword arguments from ``kwargs:`` and the reference's ``args:`` (a list is
    positional, a mapping keyword); with where each one given under ``args`` came from."""
    kwargs = dict(values.get("kwargs", {}))
    args = values.get("args")
    if args is None:
        return kwargs, {}
    if isinstance(obj, TaskSpec):
        errors.append(f"{path}.args: {target} is a task, not a factory; it takes no args")
        return None
    if isinstance(args, dict):
        given = {str(k): (v, f"{path}.args.{k}") for k, v in args.items()}
    else:
        names = _positional_names(obj) if callable(obj) else []
        if names is None:
            errors.append(f"{path}.args: the arguments of {target} cannot be read; name them under kwargs")
            return None
        if len(args) > len(names):
            takes = f"at most {len(names)} ({', '.join(names)})" if names else "none"
            errors.append(f"{path}.args: {target} takes {takes} positional arguments, got {len(args)}")
            return None
        given = {name: (v, f"{path}.args[{i}]") for i, (name, v) in enumerate(zip(names, args, strict=False))}
    before = len(errors)
    for name, (_, where) in given.items():
        if name in kwargs:
            errors.append(f"{where}: {name!r} is given in kwargs too; give it once")
    if len(errors) > before:
        return None
    kwargs.update({name: value for name, (value, _) in given.items()})
    return kwargs, {name: where for name, (_, where) in given.items()}


def _instantiate(
    obj: Any, kwargs: dict[str, Any], path: str, target: str, errors: list[str], origin: dict[str, str]
) -> TaskSpec | None:
    """The TaskSpec ``obj`` is, or that the factory ``obj`` returns for ``kwargs``."""
    if isinstance(obj, TaskSpec):
        if kwargs:
            errors.append(f"{path}.kwargs: {target} is a task, not a factory; it takes no kwargs")
            return None
        return obj
    if not callable(obj):
        errors.append(f"{path}.use: {target} is a {type(obj).__name__}, not a task or a task factory")
        return None
    marked = getattr(obj, "__pyattacker_factory__", False)
    problems = _kwargs_problems(obj, kwargs, path, target, origin)
    if marked:  # its arguments are part of the identity
        problems += non_finite(kwargs, f"{path}.kwargs")
    elif not kwargs and problems:
        # an unmarked callable needing arguments, given none: a plain function meant as a task
        errors.append(
            f"{path}.use: {target} is a plain function, not a task; decorate it with @task"
            " (from pyattacker import task) to run it as one. If it is a factory that returns a"
            " task, mark it with @factory_task and give its arguments in kwargs"
        )
        return None
    if problems:
        errors.extend(problems)
        return None
    try:
        spec = obj(**kwargs)
    except ConfigError as exc:
        errors.append(f"{path}.kwargs: {exc}")
        return None
    except (Exception, SystemExit) as exc:
        errors.append(f"{path}.use: factory {target} failed: {type(exc).__name__}: {exc}")
        return None
    if not isinstance(spec, TaskSpec):
        errors.append(
            f"{path}.use: {target} returned {type(spec).__name__}, not a TaskSpec"
            " (decorate the function with @task, or return one from the factory)"
        )
        return None
    return spec


def _resource_of(spec: TaskSpec) -> str | None:
    resource: str | None = spec.resource
    return resource


def build_retry(data: Any, path: str, errors: list[str]) -> Retrying | None:
    """A ``Retrying`` from a ``retry:`` mapping; every problem goes to ``errors`` with its path."""
    values = check_mapping(data, RetrySection, path, errors)
    if values is None:
        return None
    on = values.get("on", [])
    names = [on] if isinstance(on, str) else list(on)
    classes = []
    for i, name in enumerate(names):
        try:
            classes.append(resolve_exception_name(name))
        except ConfigError as exc:
            errors.append(
                f"{path}.on[{i}]: {exc} (a pyattacker error like RetryableError, a builtin"
                " like TimeoutError, or module:Class)"
            )
    values["on"] = tuple(classes)
    if len(classes) != len(names):
        return None
    try:
        return Retrying(**values)
    except ConfigError as exc:
        errors.append(f"{path}: {exc}")
        return None


def resolve_task_entry(
    entry: Any,
    path: str,
    registry: Registry,
    errors: list[str],
    *,
    default_resource: str | None = None,
    algorithms: Registry | None = None,
    folder: Path | None = None,
) -> tuple[TaskSpec | None, str]:
    """The effective TaskSpec of one ``pipeline.tasks`` entry, and where its resource came from.

    Every field of the entry is checked, each problem reported at its path, before giving up:
    a bad ``kwargs``, ``retry`` and ``use`` in one entry are all reported in one pass.

    The second value is the field path to blame for a bad pool reference (the entry's own
    ``resource``, ``pipeline.resource``, or the ``use:`` target that declares it). With
    ``algorithms``, the entry's algorithm (or the one its target declares) is built once, so a
    bad one is reported at its field rather than by the pipeline that would build it.
    ``folder``: the config's folder, where a ``module:attr`` target is looked for first.
    """
    before = len(errors)
    values = check_mapping(entry, TaskEntry, path, errors)
    if values is None:
        return None, path
    if algorithms is not None and values.get("algorithm") is not None:
        errors.extend(validate_algorithm_spec(values["algorithm"], algorithms, f"{path}.algorithm"))
    target = values.get("use")
    spec = None if target is None else _resolve_target(target, values, path, registry, errors, folder)
    changes = _entry_changes(values, path, errors)
    if spec is None or target is None or len(errors) > before:
        return None, path
    origin = f"{path}.resource" if "resource" in values else f"{path}.use ({target} declares it)"
    if "resource" not in values and _resource_of(spec) is None and default_resource is not None:
        changes["resource"] = default_resource
        origin = "pipeline.resource"
    try:
        effective = spec.with_overrides(**{k: changes.get(k, UNSET) for k in changes})
    except ConfigError as exc:
        errors.append(f"{path}: {exc}")
        return None, path
    problems = _declared_problems(effective, values, f"{path}.use ({target} declares it)", algorithms)
    errors.extend(problems)
    return (None, path) if problems else (effective, origin)


def _resolve_target(
    target: str,
    values: dict[str, Any],
    path: str,
    registry: Registry,
    errors: list[str],
    folder: Path | None,
) -> TaskSpec | None:
    """The TaskSpec ``use:`` names, built with the entry's ``kwargs``; problems go to ``errors``."""
    try:
        obj = resolve_use(target, registry, folder)
    except UseError as exc:
        errors.append(f"{path}.use: {exc}")
        return None
    arguments = _arguments(obj, values, path, target, errors)
    if arguments is None:
        return None
    kwargs, given_as = arguments
    return _instantiate(obj, kwargs, path, target, errors, given_as)


def _entry_changes(values: dict[str, Any], path: str, errors: list[str]) -> dict[str, Any]:
    """The overrides an entry's own fields make (its ``retry`` built), every problem reported;
    checked whatever ``use`` names, so one pass shows them all."""
    changes: dict[str, Any] = {}
    for key in ("name", "resource", "algorithm", "timeout_s", "config", "version"):
        if key in values:
            if values[key] is None and key not in CLEARABLE:
                errors.append(
                    f"{path}.{key}: cannot be cleared with null (only {', '.join(sorted(CLEARABLE))} can)"
                )
                continue
            changes[key] = values[key]
    if "retry" in values:
        if values["retry"] is None:
            errors.append(f"{path}.retry: cannot be cleared with null; omit it to keep the target's policy")
        else:
            retry = build_retry(values["retry"], f"{path}.retry", errors)
            if retry is not None:
                changes["retry"] = retry
    return changes


def _declared_problems(
    effective: TaskSpec, values: dict[str, Any], where: str, algorithms: Registry | None
) -> list[str]:
    """Problems of what the ``use:`` target itself declares (the entry's own fields are checked
    at their paths already), reported at ``where`` (its ``use``). Without this, a target's bad
    algorithm or infinite timeout would fail in the pipeline's fingerprint as ``pipeline: ...``.

    The effective task's fingerprint is computed here once, so whatever still breaks it is
    reported at this entry; an entry field can override the bad value (``algorithm: null``).
    """
    if algorithms is not None and "algorithm" not in values and effective.algorithm is not None:
        # the target's own @task declares it: not a field of the file, so reported at ``use``
        problems = validate_algorithm_spec(effective.algorithm, algorithms, where, param_fields=False)
        if problems:
            return problems
    try:
        effective.fingerprint()
    except ConfigError as exc:
        return [f"{where}: {exc}"]
    return []
