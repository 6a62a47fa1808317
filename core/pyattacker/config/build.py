"""Declarative configs: the one entry point shared by ``validate``, ``run`` and ``resume``.

``load_config(path)`` reads and env-expands a file; ``check_config(loaded)`` validates every
section (reporting *all* errors, one per line, each with its field path) without opening the
dataset, creating directories or calling tasks; ``build(loaded, overrides)`` turns a valid
config into a ``RunConfig``, fresh pools, the pipeline template and a lazy seed stream. Since
``run`` goes through ``check_config`` first, it accepts and rejects exactly what ``validate``
does.

Relative paths (``run.store``, ``source.path``, a file artifact backend's ``root``) are
resolved from the config file's folder, so a config means the same thing from any cwd.
"""

from __future__ import annotations

import difflib
import inspect
import itertools
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import msgspec

from pyattacker.config.load import expand_env, read_document
from pyattacker.config.pools import PoolDef, check_pools, pool_reference_problems
from pyattacker.config.schema import (
    SECTIONS,
    PipelineSection,
    RunSection,
    SourceSection,
    check_mapping,
    did_you_mean,
    type_name,
)
from pyattacker.config.tasks import resolve_task_entry
from pyattacker.engine.settings import RunConfig
from pyattacker.errors import ConfigError
from pyattacker.flow.chain import PipelineSpec, PipelineTemplate, pipeline
from pyattacker.flow.handoff import check_control
from pyattacker.flow.taskspec import TaskSpec
from pyattacker.paths import make_parent
from pyattacker.plugins.manager import get_plugins
from pyattacker.plugins.registry import Registry
from pyattacker.resources.algorithm import AlgorithmResolver
from pyattacker.resources.pool import Pool
from pyattacker.resources.redact import mask_secrets
from pyattacker.resources.shared_budget import BUDGET_ENV, open_shared_budget
from pyattacker.shard.plan import capacity_share as share
from pyattacker.store.backends import parse_backend_spec, validate_backend_spec
from pyattacker.store.location import default_store_path, local_file, location_problem, rebase_local

__all__ = [
    "Built",
    "CheckedConfig",
    "LoadedConfig",
    "build",
    "check_config",
    "effective_config",
    "load_config",
    "make_pools",
    "resolve_store",
    "source_problem",
    "store_location",
    "store_problem",
]


@dataclass
class LoadedConfig:
    """A parsed, env-expanded config file (not yet validated)."""

    path: Path
    data: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    @property
    def base_dir(self) -> Path:
        """Relative paths in the file are resolved from here (the file's folder)."""
        return self.path.parent


@dataclass
class SourceDef:
    kind: str
    source: Any
    options: Any
    repeats: int


@dataclass
class CheckedConfig:
    """Everything validation established; ``build`` only has to instantiate it."""

    loaded: LoadedConfig
    run: dict[str, Any]
    pools: dict[str, PoolDef]
    template: PipelineTemplate
    source: SourceDef
    #: what the file left to a default worth saying (printed as warnings by the commands)
    notes: list[str] = field(default_factory=list)


class SpecsFactory(Protocol):
    """A fresh pass over the config's specs; ``keep``: only those whose key it accepts (a shard's
    share, tested before a given key's seed is bound)."""

    def __call__(self, keep: Callable[[str], bool] | None = None) -> Iterator[PipelineSpec]: ...


@dataclass
class Built:
    """What ``run`` needs: settings, pools, the template and a factory of the seed stream."""

    config: RunConfig
    pools: list[Any]
    template: PipelineTemplate
    specs: SpecsFactory
    total: int | None
    checked: CheckedConfig


def load_config(path: str | os.PathLike[str], *, strict_env: bool = False) -> LoadedConfig:
    """Read ``path`` (parser by suffix) and expand ``${VAR}``; unset variables warn or, strict, fail."""
    p = Path(path).expanduser().absolute()
    try:
        data = read_document(p)
        try:
            expanded, unset = expand_env(data)
        except ConfigError as exc:
            raise ConfigError(f"{p}: {exc}") from None
    except RecursionError:
        why = "the config is nested too deeply (or a YAML alias refers to itself)"
        raise ConfigError(f"{p}: {why}") from None
    if unset and strict_env:
        raise ConfigError("\n".join(f"{p}: {msg} (--strict-env)" for msg in unset))
    return LoadedConfig(path=p, data=expanded, warnings=[f"{p}: {msg}" for msg in unset])


# -- validation ------------------------------------------------------------------------------
def _resolve_path(value: str, base: Path) -> str:
    path = Path(os.path.expanduser(value))
    return str(path if path.is_absolute() else (base / path))


def store_location(location: str, base: Path | None = None) -> str:
    """A store location as it will be opened: the path of a local store (plain, ``file://``,
    ``sqlite:``, ``jsonl:``) made absolute from ``base`` (the cwd when None), anything else
    (``:memory:``, a plugin scheme) unchanged."""
    if base is None:
        return rebase_local(location, os.path.abspath)
    return rebase_local(location, lambda path: _resolve_path(path, base))


def store_problem(location: str) -> str | None:
    """Why ``location`` cannot name a store with the installed store plugins, or None."""
    return location_problem(location, get_plugins().stores.objects())


def _resolve_backend_paths(spec: Any, base: Path) -> Any:
    """A file backend's relative ``root`` made absolute from the config folder (others unchanged)."""
    if spec is None or not isinstance(spec, str | Mapping):
        return spec
    try:
        kind, params = parse_backend_spec(spec)
    except ConfigError:
        return spec
    root = params.get("root")
    if kind != "file" or not isinstance(root, str) or not root:
        return spec
    return {"kind": "file", **params, "root": _resolve_path(root, base)}


def _check_run(data: Any, base: Path, errors: list[str]) -> dict[str, Any]:
    # check_mapping refuses .inf/.nan too: ``grace_s: .inf`` would make a first Ctrl-C wait for ever
    values = check_mapping(data, RunSection, "run", errors) or {}
    if values.get("store"):
        problem = store_problem(values["store"])
        if problem is not None:
            errors.append(f"run.store: {problem}")
        values["store"] = store_location(values["store"], base)
    if values.get("write_behind", False) is None:
        values.pop("write_behind")
    if "artifact_backend" in values:
        problems = validate_backend_spec(
            values["artifact_backend"], get_plugins().artifact_backends, "run.artifact_backend"
        )
        errors.extend(problems)
        if not problems:
            values["artifact_backend"] = _resolve_backend_paths(values["artifact_backend"], base)
    errors.extend(_check_sinks(values.get("event_sinks") or []))
    if values.get("event_sinks"):
        values["event_sinks"] = _resolve_sink_paths(values["event_sinks"], base)
    return values


def _check_sinks(items: list[Any]) -> list[str]:
    """Every sink names a registered event-sink plugin, and its options fit the plugin (checked
    without building it: a sink may open a file)."""
    registry = get_plugins().event_sinks
    return [
        p for i, item in enumerate(items) for p in _sink_problems(item, f"run.event_sinks[{i}]", registry)
    ]


def _sink_problems(item: Any, path: str, registry: Registry) -> list[str]:
    """One sink entry: a known name, options its factory's signature accepts, then the values
    its optional ``validate(options)`` accepts (``path: 5`` passes the signature check and would
    end the run with a traceback when the sink is built)."""
    known = registry.names()
    name = item if isinstance(item, str) else item.get("name")
    if not isinstance(name, str) or name not in known:
        hint = difflib.get_close_matches(str(name), known, n=1)
        extra = f" (did you mean {hint[0]!r}?)" if hint else f" (known: {', '.join(known) or 'none'})"
        return [f"{path}: unknown event sink {name!r}{extra}"]
    options = {} if isinstance(item, str) else {k: v for k, v in item.items() if k != "name"}
    factory: Any = registry.get(name)
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        signature = None  # a factory Python cannot describe: its own checks tell
    try:
        if signature is not None:
            signature.bind(**options)
    except TypeError as exc:
        return [f"{path}: event sink {name!r}: {exc}"]
    return _plugin_validate(factory, options, path, f"event sink {name!r}")


#: "field: message" from a plugin's validate(): a field path such as ``kinds[1]`` or ``a.b``
_FIELD = re.compile(r"[A-Za-z_]\w*(\[\d+\])*(\.[A-Za-z_]\w*(\[\d+\])*)*")


def _plugin_validate(factory: Any, options: Mapping[str, Any], path: str, label: str) -> list[str]:
    """What a plugin factory's optional ``validate(options)`` finds, each ``"field: message"``
    reported at ``path.field`` (anything else at ``path``). A validate() that raises is that
    plugin's problem, reported as one, never a traceback."""
    check = getattr(factory, "validate", None)
    if not callable(check):
        return []
    try:
        answer = [str(item) for item in check(options)]
    except Exception as exc:
        return [f"{path}: {label}: its validate() failed: {type(exc).__name__}: {exc}"]
    problems = []
    for item in answer:
        field, sep, message = item.partition(": ")
        problems.append(
            f"{path}.{field}: {message}" if sep and _FIELD.fullmatch(field) else f"{path}: {item}"
        )
    return problems


def _resolve_sink_paths(items: list[Any], base: Path) -> list[Any]:
    """A sink's relative ``path`` option is relative to the config's folder, like every path."""
    out: list[Any] = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("path"), str) and item["path"]:
            item = {**item, "path": _resolve_path(item["path"], base)}
        out.append(item)
    return out


def _check_pipeline(
    data: Any, pools: Mapping[str, PoolDef] | None, errors: list[str], folder: Path
) -> PipelineTemplate | None:
    """The template of ``pipeline:``; ``pools`` None means pool references cannot be checked."""
    if data is None:
        errors.append("pipeline: required section is missing (pipeline: {name: ..., tasks: [...]})")
        return None
    values = check_mapping(data, PipelineSection, "pipeline", errors)
    if values is None:
        return None
    raw = values.get("tasks")
    if not isinstance(raw, list) or not raw:
        errors.append(f"pipeline.tasks: must be a non-empty list of task entries, got {type_name(raw)}")
        return None
    default_resource = values.get("resource")
    if not _pool_exists(default_resource, "pipeline.resource", pools, errors):
        default_resource = None
    specs = [
        _check_task(entry, f"pipeline.tasks[{i}]", pools, default_resource, errors, folder)
        for i, entry in enumerate(raw)
    ]
    if any(spec is None for spec in specs):
        return None
    control = None
    if values.get("control") is not None:
        names = [spec.name for spec in specs if spec is not None]
        control = check_control(values["control"], names, "pipeline.control", errors)
        if control is None:
            return None
    try:
        return pipeline(values.get("name", "pipeline"), *specs, tags=values.get("tags"), control=control)
    except ConfigError as exc:
        errors.append(f"pipeline: {exc}")
        return None


def _check_task(
    entry: Any,
    path: str,
    pools: Mapping[str, PoolDef] | None,
    default_resource: str | None,
    errors: list[str],
    folder: Path,
) -> TaskSpec | None:
    """One task entry resolved, with every pool it refers to checked at the field that names it."""
    plugins = get_plugins()
    own_resource = entry.get("resource") if isinstance(entry, dict) else None
    if isinstance(own_resource, str) and own_resource:
        _pool_exists(own_resource, f"{path}.resource", pools, errors)
    spec, origin = resolve_task_entry(
        entry,
        path,
        plugins.tasks,
        errors,
        default_resource=default_resource,
        algorithms=plugins.algorithms,
        folder=folder,
    )
    if spec is None:
        return None
    declared: Any = spec.resource
    if declared is not None and not isinstance(declared, str):
        errors.append(f"{origin}: resource must be a pool name (a string), got {type_name(declared)}")
    elif declared != own_resource:
        _pool_exists(declared, origin, pools, errors)
    return spec


def _pool_exists(
    name: str | None, where: str, pools: Mapping[str, PoolDef] | None, errors: list[str]
) -> bool:
    """False (and an error at ``where``) when ``name`` is set but no pool has it; a ``pools``
    section too broken to read (None) is reported once, not at every reference."""
    if name is None or pools is None or name in pools:
        return True
    errors.append(f"{where}: no pool named {name!r}{_pool_hint(name, pools)}")
    return False


def _pool_hint(name: str, pools: Mapping[str, Any]) -> str:
    known = f" (pools: {', '.join(pools)})" if pools else " (no pools are declared; add a pools: section)"
    return did_you_mean(name, list(pools)) + known


#: the source of a config without a ``source:`` section (the reference's default): one pipeline
DEFAULT_SOURCE: dict[str, Any] = {"kind": "range", "n": 1}
DEFAULT_SOURCE_NOTE = (
    'no source: section: one pipeline runs, seeded {"i": 0} (the default source,'
    " source: {kind: range, n: 1}; write a source: section to run more)"
)


def _check_source(data: Any, errors: list[str]) -> SourceDef | None:
    registry = get_plugins().sources
    if not isinstance(data, dict):
        errors.append(f"source: must be a mapping, got {type_name(data)}")
        return None
    kind = data.get("kind")
    source = registry.get(kind) if isinstance(kind, str) else None
    options_type: Any = getattr(source, "options", None)
    skip = [f.name for f in msgspec.structs.fields(options_type)] if options_type is not None else list(data)
    common = check_mapping(
        data, SourceSection, "source", errors, skip=[k for k in skip if k not in ("kind", "repeats")]
    )
    if common is None or "kind" not in common:
        return None
    kind = common["kind"]
    if source is None:
        known = registry.names()
        errors.append(
            f"source.kind: unknown source kind {kind!r}{did_you_mean(kind, known)}"
            f" (known: {', '.join(known) or 'none'})"
        )
        return None
    own = {k: v for k, v in data.items() if k in skip and k not in ("kind", "repeats")}
    before = len(errors)
    values = check_mapping(own, options_type, "source", errors)
    if values is None or len(errors) > before:
        return None
    try:
        options = options_type(**values)
    except (TypeError, ValueError, ConfigError) as exc:
        errors.append(f"source: {exc}")
        return None
    return SourceDef(kind, source, options, common.get("repeats", 1))


def check_config(loaded: LoadedConfig) -> CheckedConfig:
    """Validate every section; raise one ``ConfigError`` listing all problems (one per line)."""
    errors: list[str] = []
    data = loaded.data
    if isinstance(data, dict) and ("suite" in data or "experiments" in data):
        # one clear answer instead of a line per suite section and the missing standalone ones
        raise ConfigError(
            f"{loaded.path}: invalid config\n  suite: this is an experiment suite (suite, experiments"
            " sections); run, resume and validate take it with -c, but it is not one experiment's config"
        )
    for key in data:
        if not isinstance(key, str) or key not in SECTIONS:
            errors.append(
                f"{key}: unknown top-level section{did_you_mean(str(key), SECTIONS)}"
                f" (sections: {', '.join(SECTIONS)})"
            )
    run_data = data.get("run")
    run = _check_run(run_data, loaded.base_dir, errors) if run_data is not None else {}
    pools = check_pools(data.get("pools"), errors)
    template = _check_pipeline(data.get("pipeline"), pools, errors, loaded.base_dir)
    if not errors and pools is not None and template is not None:
        errors.extend(pool_reference_problems(pools, template))
    notes: list[str] = []
    source_data = data.get("source")
    if source_data is None:  # absent, or an empty `source:` in YAML
        source_data = DEFAULT_SOURCE
        notes.append(DEFAULT_SOURCE_NOTE)
    source = _check_source(source_data, errors)
    if errors or pools is None or template is None or source is None:
        raise ConfigError(f"{loaded.path}: invalid config\n" + "\n".join(f"  {e}" for e in errors))
    return CheckedConfig(loaded=loaded, run=run, pools=pools, template=template, source=source, notes=notes)


def source_problem(checked: CheckedConfig) -> str | None:
    """What the source's own ``check`` says about its data (a missing ``source.path``), or None.

    ``validate`` shows it as a warning (an error with ``--strict``): the file may be written
    before the run; ``run`` refuses to start without it."""
    check = getattr(checked.source.source, "check", None)
    if not callable(check):
        return None
    try:
        check(checked.source.options, checked.loaded.base_dir)
    except ConfigError as exc:
        return str(exc)
    return None


# -- building --------------------------------------------------------------------------------
def resolve_store(checked: CheckedConfig, flag: str | None) -> str:
    """``--store`` (relative to the cwd) > ``run.store`` (relative to the config) > the default."""
    if flag is not None:
        return store_location(flag)
    store = checked.run.get("store")
    if store:
        return str(store)

    return str(default_store_path())


def _run_config(checked: CheckedConfig, overrides: Mapping[str, Any]) -> RunConfig:
    values = dict(checked.run)
    values.update({k: v for k, v in overrides.items() if v is not None and k != "store"})
    values["store"] = resolve_store(checked, overrides.get("store"))
    return RunConfig(**values)


def _make_pools(checked: CheckedConfig, capacity_share: tuple[int, int] | None = None) -> list[Any]:
    return make_pools(checked.pools.values(), capacity_share)


def make_pools(defs: Iterable[PoolDef], capacity_share: tuple[int, int] | None = None) -> list[Any]:
    """Fresh pools, each handed its algorithm resolved through the plugins; with
    ``capacity_share=(slot, slots)`` every resource gets only that slot's slice of its
    capacity, so concurrently running shards never exceed what an endpoint allows."""
    algorithms = AlgorithmResolver(get_plugins().algorithms)
    pools = []
    for pdef in defs:
        resources = [{"kind": pdef.kind or pdef.name, **res} for res in pdef.resources]
        if capacity_share is not None:
            slot, slots = capacity_share
            for res in resources:
                res["capacity"] = share(int(res.get("capacity", 1)), slot, slots)
        algorithm = None if pdef.algorithm is None else algorithms.resolve(pdef.algorithm)
        pools.append(Pool(pdef.name, resources, kind=pdef.kind, algorithm=algorithm, algorithms=algorithms))
    shared = os.environ.get(BUDGET_ENV)
    if shared:  # a shard of `--shards N`: one rate budget for all of them
        for pool in pools:
            if pool.rate_limited:
                pool.share_budget(open_shared_budget(shared, pool.name))
    return pools


def _specs(checked: CheckedConfig, limit: int | None) -> SpecsFactory:
    src = checked.source
    template = checked.template
    base = checked.loaded.base_dir

    def bind(keep: Callable[[str], bool] | None = None) -> Iterator[PipelineSpec]:
        return template.map_keyed(src.source.open(src.options, base), repeats=src.repeats, keep=keep)

    def specs(keep: Callable[[str], bool] | None = None) -> Iterator[PipelineSpec]:
        if limit is None:
            return bind(keep)
        # the limit counts the dataset's first specs, every shard's (``--shards 2 --limit 100``
        # runs the same 100 pipelines as ``--limit 100``): bound, then kept
        first = itertools.islice(bind(), limit)
        return first if keep is None else (spec for spec in first if keep(spec.key))

    return specs


def _total(checked: CheckedConfig, limit: int | None) -> int | None:
    """How many pipelines will be offered, when the source can tell without reading data."""
    src = checked.source
    count = getattr(src.source, "count", None)
    n = count(src.options, checked.loaded.base_dir) if callable(count) else None
    if not isinstance(n, int):
        return None
    total = n * src.repeats
    return total if limit is None else min(total, limit)


def build(
    loaded: LoadedConfig | CheckedConfig,
    overrides: Mapping[str, Any] | None = None,
    *,
    limit: int | None = None,
    capacity_share: tuple[int, int] | None = None,
) -> Built:
    """Validate (if needed) and instantiate: RunConfig (flags > run block > defaults), pools,
    template and the lazy seed stream. Checks that the source's data exists (exit 2 before
    anything starts) and creates the default store's folder; reads no rows.

    ``capacity_share=(slot, slots)``: this process is one of ``slots`` concurrently running
    shards and gets slot ``slot``'s slice of every resource's capacity (see ``pyattacker.shard.plan``).
    """
    checked = loaded if isinstance(loaded, CheckedConfig) else check_config(loaded)
    overrides = dict(overrides or {})
    config = _run_config(checked, overrides)
    check = getattr(checked.source.source, "check", None)
    if callable(check):
        check(checked.source.options, checked.loaded.base_dir)
    local = local_file(config.store) if config.store else None
    if local is not None:
        # the error names the setting the user wrote: the flag wins over the file
        make_parent(local, "--store" if overrides.get("store") is not None else "run.store")
    return Built(
        config=config,
        pools=_make_pools(checked, capacity_share),
        template=checked.template,
        specs=_specs(checked, limit),
        total=_total(checked, limit),
        checked=checked,
    )


def effective_config(checked: CheckedConfig, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The config as it would run (defaults filled in, paths resolved, secrets masked)."""
    overrides = dict(overrides or {})
    values = dict(checked.run)
    values.update({k: v for k, v in overrides.items() if v is not None and k != "store"})
    values["store"] = resolve_store(checked, overrides.get("store"))
    config = RunConfig(**values)
    # ``run`` holds exactly the fields a ``run:`` block accepts, so it can be copied back into
    # one; whether the store is the embedded default is a fact about it, kept beside it
    run = {name: getattr(config, name) for name in RunSection.__struct_fields__}
    src = checked.source
    return {
        "config": str(checked.loaded.path),
        "base_dir": str(checked.loaded.base_dir),
        "run": mask_secrets(run),
        "store_is_default": not checked.run.get("store") and overrides.get("store") is None,
        "source_is_default": DEFAULT_SOURCE_NOTE in checked.notes,
        "pools": {
            name: {
                "kind": p.kind or name,  # a pool without `kind:` is of its name's kind
                "algorithm": p.algorithm,
                "resources": [mask_secrets(r) for r in p.resources],
            }
            for name, p in checked.pools.items()
        },
        "pipeline": checked.template.describe(),
        "source": {"kind": src.kind, "repeats": src.repeats, **msgspec.structs.asdict(src.options)},
        "warnings": list(checked.loaded.warnings),
    }
