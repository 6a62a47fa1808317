"""The ``pools:`` section: each pool and its resources checked, with pool-level defaults.

A pool-level ``capacity`` (and ``degrade_after``, ``dead_after``, ``cooldown_s``) is the default
of each resource that sets none (the reference's form); with no ``resources``, a ``capacity``
declares one resource. Missing resource ids are filled in, unique within the pool, and the
pools an algorithm names are checked against the ones declared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyattacker.config.schema import LimitsSection, PoolSection, ResourceSection, check_mapping, type_name
from pyattacker.errors import ConfigError
from pyattacker.flow.chain import PipelineTemplate
from pyattacker.plugins.manager import get_plugins
from pyattacker.plugins.registry import Registry
from pyattacker.resources.algorithm import FallbackRef, resolve_algorithm, validate_algorithm_spec

__all__ = ["POOL_DEFAULTS", "PoolDef", "check_pools", "pool_reference_problems"]


@dataclass
class PoolDef:
    name: str
    kind: str | None
    algorithm: Any
    resources: list[dict[str, Any]]


def check_pools(data: Any, errors: list[str]) -> dict[str, PoolDef] | None:
    """Every pool by name; None when the section itself is unusable, so pool references are not
    checked against it (each would repeat the one problem as "no pool named ...")."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        errors.append(f"pools: must be a mapping of pool name -> pool, got {type_name(data)}")
        return None
    algorithms = get_plugins().algorithms
    pools: dict[str, PoolDef] = {}
    for name, body in data.items():
        if isinstance(name, str) and not name.strip():
            errors.append(f"pools.{name!r}: a pool name must be a non-empty string")
            continue
        pools[str(name)] = _check_pool(str(name), body, algorithms, errors)
    return pools


def pool_reference_problems(pools: Mapping[str, PoolDef], template: PipelineTemplate) -> list[str]:
    """Pools an algorithm names (``failover``'s ``pools``) that the config does not declare.

    Such a name is only looked up when a lease is asked for, so unchecked, every pipeline of the
    run would fail with "unknown pool" after ``validate`` passed. An algorithm says which pools
    it names with an optional ``referenced_pools()`` (docs/plugins.md); its fallbacks are asked
    too.
    """
    declared = sorted(pools)
    problems: list[str] = []
    where = [(f"pools.{p.name}.algorithm", p.algorithm) for p in pools.values()]
    where += [
        (f"pipeline.tasks[{i}].algorithm (task {t.name!r})", t.algorithm)
        for i, t in enumerate(template.tasks)
    ]
    for path, spec in where:
        if spec is None:
            continue
        try:
            algorithm: Any = resolve_algorithm(spec, get_plugins().algorithms)
        except ConfigError:  # reported where the spec was checked
            continue
        for name in _referenced_pools(algorithm, get_plugins().algorithms):
            if name not in pools:
                listed = ", ".join(map(repr, declared)) or "none"
                problems.append(f"{path}: names the pool {name!r}, which is not declared (pools: {listed})")
    return problems


def _referenced_pools(algorithm: Any, registry: Registry) -> list[str]:
    """The pool names ``algorithm`` and the fallbacks it wraps (``FallbackRef``s, resolved
    here as the pool would resolve them) refer to."""
    names: list[str] = []
    for _ in range(16):  # a fallback chain, never a cycle in practice; bounded all the same
        referenced = getattr(algorithm, "referenced_pools", None)
        if callable(referenced):
            names.extend(str(n) for n in referenced())
        fallback = getattr(algorithm, "fallback", None)
        if isinstance(fallback, FallbackRef):
            try:
                fallback = None if fallback.spec is None else resolve_algorithm(fallback.spec, registry)
            except ConfigError:  # a bad fallback is reported where the spec is checked
                break
        if fallback is None or not hasattr(fallback, "acquire"):
            break
        algorithm = fallback
    return names


def _check_pool(name: str, body: Any, algorithms: Registry, errors: list[str]) -> PoolDef:
    """One pool. A broken one is still declared (with no resources; nothing is built once there
    are errors): its name is known, so a reference to it is not another error."""
    path = f"pools.{name}"
    per_resource = {
        f: f"did you mean {path}.resources[i].{f}? {f} is set per resource"
        for f in ResourceSection.__struct_fields__
    }
    values = check_mapping(body, PoolSection, path, errors, hints=per_resource)
    if values is None:
        return PoolDef(name, None, None, [])
    if values.get("algorithm") is not None:
        errors.extend(validate_algorithm_spec(values["algorithm"], algorithms, f"{path}.algorithm"))
    defaults = {f: values[f] for f in POOL_DEFAULTS if values.get(f) is not None}
    # the reference's pool-level form: `capacity: 2` alone is one resource of capacity 2 (an
    # invalid capacity is reported at its field, not again as a pool without resources)
    implicit: list[dict[str, Any]] = [{}] if "capacity" in body else []
    raw = values.get("resources", implicit)
    resources = _check_resources(raw, path, name, values.get("kind"), errors, defaults)
    return PoolDef(name, values.get("kind"), values.get("algorithm"), resources)


#: pool fields that are defaults for each of its resources (a resource's own value wins)
POOL_DEFAULTS = ("capacity", "degrade_after", "dead_after", "cooldown_s")


def _check_resources(
    raw: Any, path: str, name: str, kind: str | None, errors: list[str], defaults: dict[str, Any]
) -> list[dict[str, Any]]:
    """A pool's resources, each checked (the pool's ``defaults`` filling what it leaves out),
    ids unique and missing ones filled in."""
    if not isinstance(raw, list):
        errors.append(f"{path}.resources: must be a list of resources, got {type_name(raw)}")
        return []
    if not raw:
        errors.append(
            f"{path}.resources: a pool needs at least one resource (tasks would wait forever);"
            f" list them, or give the pool a capacity ({path}.capacity: 4) for one resource"
        )
    resources: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        res = check_mapping(item, ResourceSection, f"{path}.resources[{i}]", errors)
        if res is None:
            continue
        if res.get("limits") is not None:
            limits = check_mapping(res["limits"], LimitsSection, f"{path}.resources[{i}].limits", errors)
            res["limits"] = limits or {}
        res = {**defaults, **res}
        rid = res.get("id")
        if rid is not None:
            if rid in seen:
                errors.append(f"{path}.resources[{i}].id: duplicate resource id {rid!r} in pool {name!r}")
            seen.add(rid)
        resources.append(res)
    _default_ids(resources, kind or name, seen)
    return resources


def _default_ids(resources: list[dict[str, Any]], pool_kind: str, taken: set[str]) -> None:
    """``<kind>-<n>`` for each resource without an id, counted within its pool and never equal to
    an id given explicitly (a process-wide counter could hand out ``llm-1`` next to an explicit
    ``llm-1``, and the second resource would silently replace the first)."""
    counters: dict[str, int] = {}
    for res in resources:
        if res.get("id") is not None:
            continue
        kind = res.get("kind") or pool_kind
        n = counters.get(kind, 0)
        while True:
            n += 1
            candidate = f"{kind}-{n}"
            if candidate not in taken:
                break
        counters[kind] = n
        taken.add(candidate)
        res["id"] = candidate
