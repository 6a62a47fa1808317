"""Suite configs: several member configs (experiments) checked as one file.

A suite file has ``suite: {id}``, ``run`` (the one execution block: concurrency and admission
are the suite's), ``output: {root, layout}``, ``pools`` (shared pools members bind to by name)
and ``experiments: {ID: {config, pool_bindings, label, limit}}``. Each member config is an
ordinary config (checked exactly as ``validate`` checks it), found relative to the suite
file; its ``run`` block is checked but ignored (listed in ``ignored_run_fields``). Every
problem is reported at once, each line starting with its field path
(``experiments.gpt4.pool_bindings.llm: ...``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyattacker.config.build import CheckedConfig, LoadedConfig, _check_run, check_config, load_config
from pyattacker.config.pools import PoolDef, check_pools
from pyattacker.config.schema import did_you_mean, type_name
from pyattacker.errors import ConfigError
from pyattacker.store.suite_dir import LAYOUTS

__all__ = ["SUITE_SECTIONS", "CheckedSuite", "Member", "check_suite", "check_suite_id", "is_suite"]

SUITE_SECTIONS = ("suite", "run", "output", "pools", "experiments")
_MEMBER_KEYS = ("config", "pool_bindings", "label", "limit")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,79}")
_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}
#: why a suite refuses a store of its own (``run.store``, ``--store``)
STORE_REFUSED = (
    "a suite writes every experiment under its output root (output.root or --output-root),"
    " so it takes no store of its own"
)


@dataclass
class Member:
    """One experiment: its checked config and how it joins the suite."""

    id: str
    checked: CheckedConfig
    pool_bindings: dict[str, str]
    label: str = ""
    limit: int | None = None
    ignored_run_fields: list[str] = field(default_factory=list)


@dataclass
class CheckedSuite:
    """A valid suite: its id, run block, output, shared pools and members (in file order)."""

    loaded: LoadedConfig
    id: str
    run: dict[str, Any]
    root: Path
    layout: str
    pools: dict[str, PoolDef]
    members: list[Member]


def is_suite(data: Any) -> bool:
    """Whether a parsed config document is a suite (it has ``suite`` or ``experiments``)."""
    return isinstance(data, dict) and ("suite" in data or "experiments" in data)


def check_suite_id(value: Any, where: str) -> str | None:
    """Why ``value`` is not a suite or experiment id (None: it is one)."""
    if not isinstance(value, str):
        return f"{where}: must be a string id, got {type_name(value)}"
    if not _ID.fullmatch(value):
        return (
            f"{where}: {value!r} is not an id (1-80 ASCII letters, digits, '-' or '_', starting"
            " with a letter or digit)"
        )
    if value.lower() in _RESERVED:
        return f"{where}: {value!r} is a reserved device name on Windows; choose another id"
    return None


def _check_head(data: dict[Any, Any], errors: list[str]) -> str | None:
    for key in data:
        if key not in SUITE_SECTIONS:
            errors.append(
                f"{key}: unknown top-level section of a suite{did_you_mean(str(key), SUITE_SECTIONS)}"
                f" (sections: {', '.join(SUITE_SECTIONS)})"
            )
    head = data.get("suite")
    if not isinstance(head, dict):
        errors.append(f"suite: must be a mapping with an id (suite: {{id: ...}}), got {type_name(head)}")
        return None
    for key in head:
        if key != "id":
            errors.append(f"suite.{key}: unknown field (suite has only: id)")
    problem = check_suite_id(head.get("id"), "suite.id")
    if problem is not None:
        errors.append(problem)
        return None
    return str(head["id"])


def _check_output(data: Any, base: Path, suite_id: str | None, errors: list[str]) -> tuple[Path, str]:
    """``output.root`` (relative to the suite file; default: a folder named after the suite)."""
    root = base / (suite_id or "suite")
    if data is None:
        return root, "combined"
    if not isinstance(data, dict):
        errors.append(
            f"output: must be a mapping (output: {{root: ..., layout: ...}}), got {type_name(data)}"
        )
        return root, "combined"
    for key in data:
        if key not in ("root", "layout"):
            errors.append(f"output.{key}: unknown field (output has: root, layout)")
    if "root" in data:
        if not isinstance(data["root"], str) or not data["root"]:
            errors.append(f"output.root: must be a non-empty path, got {type_name(data['root'])}")
        else:
            root = base / Path(data["root"]).expanduser()
    layout = data.get("layout", "combined")
    if layout not in LAYOUTS:
        errors.append(f"output.layout: must be one of {', '.join(LAYOUTS)}, got {layout!r}")
        return root, "combined"
    return root, str(layout)


def _check_run_block(data: Any, base: Path, errors: list[str]) -> dict[str, Any]:
    if data is None:
        return {}
    if isinstance(data, dict) and "store" in data:
        errors.append(f"run.store: not allowed in a suite: {STORE_REFUSED}")
        data = {k: v for k, v in data.items() if k != "store"}
    return _check_run(data, base, errors)


def _member_config(
    entry: dict[str, Any], where: str, base: Path, errors: list[str], strict_env: bool
) -> CheckedConfig | None:
    raw = entry.get("config")
    if not isinstance(raw, str) or not raw:
        errors.append(f"{where}.config: required: the member's config file (relative to the suite file)")
        return None
    path = base / Path(raw).expanduser()
    try:
        loaded = load_config(path, strict_env=strict_env)
        if is_suite(loaded.data):
            errors.append(f"{where}.config: {path} is a suite; a suite's members are ordinary configs")
            return None
        return check_config(loaded)
    except ConfigError as exc:
        lines = str(exc).splitlines()
        errors.append(f"{where}.config: {lines[0]}")
        errors.extend(f"{where}.config: {line.strip()}" for line in lines[1:])
        return None


def _check_bindings(
    raw: Any, where: str, member: CheckedConfig | None, shared: dict[str, PoolDef] | None, errors: list[str]
) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        errors.append(f"{where}: must be a mapping of member pool -> suite pool, got {type_name(raw)}")
        return {}
    out: dict[str, str] = {}
    for local, target in raw.items():
        at = f"{where}.{local}"
        if not isinstance(target, str) or not target:
            errors.append(f"{at}: must name a pool of the suite's pools section, got {type_name(target)}")
            continue
        if member is not None and local not in member.pools:
            known = ", ".join(member.pools) or "none"
            errors.append(f"{at}: the member config has no pool {local!r} (its pools: {known})")
            continue
        if shared is not None and target not in shared:
            known = ", ".join(shared) or "none; add a top-level pools section"
            errors.append(
                f"{at}: no suite pool named {target!r}{did_you_mean(target, list(shared))}"
                f" (suite pools: {known})"
            )
            continue
        out[str(local)] = target
    return out


def _check_member(
    exp_id: Any,
    entry: Any,
    base: Path,
    shared: dict[str, PoolDef] | None,
    errors: list[str],
    strict_env: bool = False,
) -> Member | None:
    where = f"experiments.{exp_id}"
    problem = check_suite_id(exp_id, where)
    if problem is not None:
        errors.append(problem)
    if not isinstance(entry, dict):
        errors.append(
            f"{where}: must be a mapping (config, pool_bindings, label, limit), got {type_name(entry)}"
        )
        return None
    for key in entry:
        if key not in _MEMBER_KEYS:
            errors.append(
                f"{where}.{key}: unknown field{did_you_mean(str(key), _MEMBER_KEYS)}"
                f" (fields: {', '.join(_MEMBER_KEYS)})"
            )
    label = entry.get("label", "")
    if not isinstance(label, str):
        errors.append(f"{where}.label: must be a string, got {type_name(label)}")
    limit = entry.get("limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        errors.append(f"{where}.limit: must be an integer >= 1, got {limit!r}")
    checked = _member_config(entry, where, base, errors, strict_env)
    bindings = _check_bindings(entry.get("pool_bindings"), f"{where}.pool_bindings", checked, shared, errors)
    if checked is None or problem is not None:
        return None
    ignored = sorted(str(k) for k in (checked.loaded.data.get("run") or {}))
    return Member(str(exp_id), checked, bindings, label if isinstance(label, str) else "", limit, ignored)


def check_suite(loaded: LoadedConfig, *, strict_env: bool = False) -> CheckedSuite:
    """Validate a suite file and every member config; one ``ConfigError`` lists all problems
    (``strict_env``: an unset ``${VAR}`` in a member is one of them)."""
    errors: list[str] = []
    data = loaded.data
    base = loaded.base_dir
    suite_id = _check_head(data, errors)
    run = _check_run_block(data.get("run"), base, errors)
    root, layout = _check_output(data.get("output"), base, suite_id, errors)
    shared = check_pools(data.get("pools"), errors)
    raw = data.get("experiments")
    members: list[Member] = []
    if not isinstance(raw, dict) or not raw:
        errors.append(f"experiments: must be a non-empty mapping of id -> experiment, got {type_name(raw)}")
    else:
        seen: dict[str, str] = {}
        for exp_id, entry in raw.items():
            folded = str(exp_id).lower()
            if folded in seen:
                errors.append(
                    f"experiments.{exp_id}: the same id as {seen[folded]!r} (ids are compared ignoring case)"
                )
            seen.setdefault(folded, str(exp_id))
            member = _check_member(exp_id, entry, base, shared, errors, strict_env)
            if member is not None:
                members.append(member)
    if errors or suite_id is None or shared is None:
        raise ConfigError(f"{loaded.path}: invalid suite config\n" + "\n".join(f"  {e}" for e in errors))
    return CheckedSuite(loaded, suite_id, run, root, layout, shared, members)
