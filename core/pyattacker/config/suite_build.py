"""A checked suite turned into one run: one RunConfig, one set of pools, one seed stream.

Every selected member runs in the same runner, so the suite's ``concurrency`` and
``max_admitted`` are one budget for all of them. A member's pools are renamed
``experiment:<ID>:<name>`` (private to it) unless ``pool_bindings`` maps them to a shared
suite pool (the same ``Pool`` object, so capacity, health and quota are shared). Members'
seeds are admitted round-robin; each pipeline gets its suite id (``member_pipeline_id``), keeps
its standalone key as ``seed_key`` (the local key) and carries ``suite_id``/``experiment_id``
tags. A member whose source fails is reported and dropped; the others go on.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from pyattacker.config.build import _specs, _total, make_pools
from pyattacker.config.load import read_document
from pyattacker.config.pools import PoolDef
from pyattacker.config.suite import STORE_REFUSED, CheckedSuite, Member
from pyattacker.digest import digest_of
from pyattacker.engine.settings import RunConfig
from pyattacker.errors import ConfigError, PyAttackerError, StoreUnavailable
from pyattacker.flow.chain import PipelineSpec, PipelineTemplate
from pyattacker.paths import make_parent
from pyattacker.plugins.store_base import StoreBase
from pyattacker.store.location import open_store
from pyattacker.store.suite_dir import (
    SuiteManifest,
    experiment_prefix,
    is_suite_dir,
    member_pipeline_id,
    open_root,
    read_manifest,
    write_manifest,
)
from pyattacker.store.suite_store import SuiteStore, experiment_store_path

__all__ = ["BuiltSuite", "build_suite", "definition_digest", "member_template", "suite_root"]


@dataclass
class BuiltSuite:
    """What a suite run needs: settings, every pool, the seed stream and the manifest."""

    config: RunConfig
    pools: list[Any]
    root: Path
    manifest: SuiteManifest
    members: list[Member]
    specs: Callable[[], Iterator[PipelineSpec]]
    total: int | None
    #: ``{experiment id: message}`` of each member whose source failed during the run
    source_errors: dict[str, str] = field(default_factory=dict)

    def open_store(self) -> StoreBase | None:
        """The store the run writes: None for ``combined`` (its ``state.db``, by location);
        for ``by_experiment`` the catalog and the selected members' stores, and no other's."""
        if self.manifest.layout != "by_experiment":
            return None
        try:
            store = SuiteStore(
                self.root,
                self.manifest,
                experiments=[m.id for m in self.members],
                read_only=False,
                opener=lambda path, read_only: open_store(path, read_only=read_only),
            )
        except PyAttackerError:
            raise
        except Exception as exc:
            what = f"{type(exc).__name__}: {exc}"
            raise StoreUnavailable(f"cannot open the stores of {self.root}: {what}") from exc
        for m in self.members:  # from now on a missing store is a lost one (refused)
            path = experiment_store_path(self.root, m.id).relative_to(self.root)
            self.manifest.experiments[m.id]["store"] = path.as_posix()
        write_manifest(self.root, self.manifest)
        return store

    def record_outcome(self) -> None:
        """Note in the manifest which members' sources failed in this run (and clear the note
        of those that ran through), so views can tell a member that failed as a whole."""
        for member in self.members:
            entry = self.manifest.experiments[member.id]
            if member.id in self.source_errors:
                entry["source_error"] = self.source_errors[member.id]
            else:
                entry.pop("source_error", None)
        write_manifest(self.root, self.manifest)


def suite_root(checked: CheckedSuite, output_root: str | None) -> Path:
    """``--output-root`` (relative to the cwd) > ``output.root`` (relative to the suite file)."""
    if output_root is not None:
        return Path(os.path.abspath(os.path.expanduser(output_root)))
    return Path(os.path.abspath(checked.root))


def definition_digest(member: Member) -> str:
    """What makes a member's results what they are: its tasks, source, pool declarations (as
    written, before ``${VAR}`` expansion, so a rotated credential is no new definition),
    bindings and limit. Labels and member order are not part of it."""
    checked = member.checked
    try:
        raw_pools = read_document(checked.loaded.path).get("pools")
    except ConfigError:
        raw_pools = None
    src = checked.source
    source = {"kind": src.kind, "repeats": src.repeats, **msgspec.structs.asdict(src.options)}
    return digest_of(
        {
            "spec": checked.template.spec_digest,
            "source": msgspec.to_builtins(source, enc_hook=repr),
            "pools": msgspec.to_builtins(raw_pools, enc_hook=repr),
            "bindings": member.pool_bindings,
            "limit": member.limit,
        }
    )


def _aliases(member: Member) -> dict[str, str]:
    return {
        name: member.pool_bindings.get(name, f"experiment:{member.id}:{name}")
        for name in member.checked.pools
    }


def member_template(suite_id: str, member: Member) -> PipelineTemplate:
    """The member's template with its pools renamed as the suite runs them and the suite's
    identity in its tags (stored on every pipeline row)."""
    original = member.checked.template
    aliases = _aliases(member)
    tasks = tuple(
        t.with_overrides(resource=aliases.get(t.resource, t.resource)) if t.resource else t
        for t in original.tasks
    )
    tags = {**original.tags, "suite_id": suite_id, "experiment_id": member.id}
    template = PipelineTemplate(
        original.name, tasks, tags=tags, include_code=original.include_code, control=original.control
    )
    template.pool_aliases = aliases
    return template


def _private_pools(member: Member) -> list[PoolDef]:
    """The member's pools no binding maps to a suite pool, renamed to be its own."""
    return [
        dataclasses.replace(pdef, name=f"experiment:{member.id}:{name}", kind=pdef.kind or name)
        for name, pdef in member.checked.pools.items()
        if name not in member.pool_bindings
    ]


def _member_specs(suite_id: str, member: Member) -> Iterator[PipelineSpec]:
    """The member's specs, bound as standalone (their keys are the local keys), re-keyed."""
    template = member_template(suite_id, member)
    prefix = experiment_prefix(suite_id, member.id)
    for s in _specs(member.checked, member.limit)():
        yield PipelineSpec(
            template,
            s.seed,
            s.seed_codec,
            s.seed_type,
            s.seed_bytes,
            member_pipeline_id(prefix, s.key),
            s.repeat,
            s.key,
            s.seed_digest,
        )


def _round_robin(
    streams: list[tuple[str, Iterator[PipelineSpec]]], errors: dict[str, str]
) -> Iterator[PipelineSpec]:
    """One spec of each member in turn; a member whose source raises is noted and dropped."""
    live = list(streams)
    while live:
        for entry in list(live):
            exp_id, stream = entry
            try:
                spec = next(stream)
            except StopIteration:
                live.remove(entry)
                continue
            except Exception as exc:  # a bad row or an unreadable file: this member's failure only
                errors[exp_id] = f"{type(exc).__name__}: {exc}"
                live.remove(entry)
                continue
            yield spec


def _run_config(
    checked: CheckedSuite, overrides: dict[str, Any], root: Path, manifest: SuiteManifest
) -> RunConfig:
    if overrides.get("store") is not None:
        raise ConfigError(f"--store: not allowed with a suite: {STORE_REFUSED}")
    values = dict(checked.run)
    values.update({k: v for k, v in overrides.items() if v is not None and k != "store"})
    values["store"] = str(root / manifest.catalog) if manifest.layout == "combined" else str(root)
    values.setdefault("label", checked.id)
    values["meta"] = {**values.get("meta", {}), "suite_id": checked.id}
    return RunConfig(**values)


def _missing_member_store(root: Path, members: list[Member]) -> None:
    """With ``by_experiment``, a member whose store was created (the manifest says so) must
    still have it: a missing one is refused, never recreated (its pipelines would run again
    from nothing)."""
    if not is_suite_dir(str(root)):
        return
    manifest = read_manifest(root)
    if manifest.layout != "by_experiment":
        return
    for m in members:
        path = experiment_store_path(root, m.id)
        if "store" in manifest.experiments.get(m.id, {}) and not path.exists():
            raise ConfigError(
                f"experiments.{m.id}: its store {path} is missing; restore it, or give the"
                " experiment a new id"
            )


def build_suite(
    checked: CheckedSuite,
    overrides: dict[str, Any],
    *,
    selected: tuple[str, ...] = (),
    output_root: str | None = None,
    limit: int | None = None,
) -> BuiltSuite:
    """Instantiate the selected members (all when ``selected`` is empty) into one run; write
    the manifest. Refuses unknown ids, a foreign root and a changed definition (exit 2)."""
    known = {m.id: m for m in checked.members}
    unknown = [name for name in selected if name not in known]
    if unknown:
        raise ConfigError(
            f"--experiment: no experiment {unknown[0]!r} in suite {checked.id!r}"
            f" (experiments: {', '.join(known)})"
        )
    members = [m for m in checked.members if not selected or m.id in selected]
    root = suite_root(checked, output_root)
    definitions = {
        m.id: {
            "definition_digest": definition_digest(m),
            "label": m.label,
            "config": str(m.checked.loaded.path),
            "prefix": experiment_prefix(checked.id, m.id),
        }
        for m in members
    }
    manifest = open_root(root, checked.id, checked.layout, definitions)
    _missing_member_store(root, members)
    config = _run_config(checked, overrides, root, manifest)
    for m in members:
        src = m.checked.source
        check = getattr(src.source, "check", None)
        if callable(check):
            try:
                check(src.options, m.checked.loaded.base_dir)
            except ConfigError as exc:
                raise ConfigError(f"experiments.{m.id}.config: {exc}") from None
    make_parent(str(root / manifest.catalog), "output.root")
    write_manifest(root, manifest)
    defs = list(checked.pools.values()) + [d for m in members for d in _private_pools(m)]
    errors: dict[str, str] = {}

    def specs() -> Iterator[PipelineSpec]:
        streams = [(m.id, _member_specs(checked.id, m)) for m in members]
        merged = _round_robin(streams, errors)
        return merged if limit is None else itertools.islice(merged, limit)

    totals = [_total(m.checked, m.limit) for m in members]
    total = None if any(t is None for t in totals) else sum(t for t in totals if t is not None)
    if total is not None and limit is not None:
        total = min(total, limit)
    return BuiltSuite(config, make_pools(defs), root, manifest, members, specs, total, errors)
