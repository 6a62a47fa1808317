"""A suite's output directory: its manifest, its catalog store and the ids of its pipelines.

A suite run writes every member experiment into one directory (``output.root``). The
``combined`` layout holds ``manifest.json`` and one store, ``state.db``, with every member's
pipelines in it. The manifest says whose directory it is (suite id, layout) and which
experiments have run into it, each with the digest of its definition, so a changed
definition under an existing id is refused rather than mixed with the old results.

A member's pipeline id is ``suite-<digest(suite, experiment)>-<digest(local key)>``: the same
seed in two experiments gives two pipelines, and the experiment of a stored row is read back
from the prefix alone (``experiment_of``), with no extra column per pipeline.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyattacker.digest import digest_of
from pyattacker.errors import ConfigError

__all__ = [
    "CATALOG",
    "CATALOGS",
    "LAYOUTS",
    "MANIFEST",
    "MANIFEST_VERSION",
    "SuiteManifest",
    "experiment_prefix",
    "is_suite_dir",
    "member_pipeline_id",
    "open_root",
    "read_manifest",
    "write_manifest",
]

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
#: the store of the ``combined`` layout, relative to the root
CATALOG = "state.db"
LAYOUTS = ("combined", "by_experiment")
#: each layout's catalog: the one store of ``combined``; the runs and pools of ``by_experiment``
#: (whose members' pipelines are in ``experiments/<ID>/state.db``)
CATALOGS = {"combined": CATALOG, "by_experiment": "suite.db"}


def experiment_prefix(suite_id: str, experiment_id: str) -> str:
    """The prefix every pipeline id of ``experiment_id`` in ``suite_id`` starts with."""
    return f"suite-{digest_of([suite_id, experiment_id])[:16]}-"


def member_pipeline_id(prefix: str, local_key: str) -> str:
    """A member pipeline's id: its experiment's prefix and a digest of its standalone key."""
    return prefix + digest_of(local_key)[:32]


@dataclass
class SuiteManifest:
    """What ``manifest.json`` records: the suite, its layout and each experiment that ran."""

    suite_id: str
    layout: str
    #: ``{experiment id: {"definition_digest", "label", "config", "prefix"}}``, in suite order
    experiments: dict[str, dict[str, Any]] = field(default_factory=dict)
    catalog: str = CATALOG

    def to_json(self) -> dict[str, Any]:
        return {
            "version": MANIFEST_VERSION,
            "suite_id": self.suite_id,
            "layout": self.layout,
            "catalog": self.catalog,
            "experiments": self.experiments,
        }

    def experiment_of(self, pipeline_id: str) -> str | None:
        """The experiment a stored pipeline id belongs to (None: not a member's id)."""
        for exp_id, entry in self.experiments.items():
            if pipeline_id.startswith(entry["prefix"]):
                return exp_id
        return None

    def select(self, wanted: Iterable[str]) -> list[str]:
        """The experiment ids ``wanted`` names (all when empty); an unknown one is an error."""
        names = list(wanted)
        unknown = [n for n in names if n not in self.experiments]
        if unknown:
            known = ", ".join(self.experiments) or "none"
            raise ConfigError(
                f"--experiment: no experiment {unknown[0]!r} in suite {self.suite_id!r} (known: {known})"
            )
        return names or list(self.experiments)


def is_suite_dir(location: str) -> bool:
    """Whether ``location`` is a folder holding a suite manifest."""
    return os.path.isdir(location) and os.path.isfile(os.path.join(location, MANIFEST))


def read_manifest(root: str | os.PathLike[str]) -> SuiteManifest:
    """The manifest of the suite directory ``root`` (a missing or broken one is an error)."""
    path = Path(root) / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{root}: not a suite directory (no {MANIFEST})") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: unreadable suite manifest: {exc}") from None
    if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
        raise ConfigError(f"{path}: not a version {MANIFEST_VERSION} suite manifest")
    experiments = data.get("experiments")
    if not isinstance(data.get("suite_id"), str) or not isinstance(experiments, dict):
        raise ConfigError(f"{path}: suite manifest without suite_id or experiments")
    for exp_id, entry in experiments.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("prefix"), str):
            raise ConfigError(f"{path}: experiments.{exp_id}: no prefix recorded")
    if data.get("layout") not in LAYOUTS:
        raise ConfigError(f"{path}: layout must be one of {', '.join(LAYOUTS)}, got {data.get('layout')!r}")
    return SuiteManifest(
        suite_id=data["suite_id"],
        layout=str(data.get("layout")),
        experiments=experiments,
        catalog=str(data.get("catalog") or CATALOG),
    )


def write_manifest(root: str | os.PathLike[str], manifest: SuiteManifest) -> None:
    """Write ``manifest.json`` atomically (temp file, then rename)."""
    path = Path(root) / MANIFEST
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest.to_json(), indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def open_root(
    root: Path, suite_id: str, layout: str, definitions: Mapping[str, dict[str, Any]]
) -> SuiteManifest:
    """The manifest a run of ``definitions`` (experiment id -> entry) writes into ``root``.

    A non-empty root without a manifest, another suite's or another layout's root, and an
    experiment whose definition changed under the same id are refused (nothing is written)."""
    if (root / MANIFEST).is_file():
        manifest = read_manifest(root)
        if manifest.suite_id != suite_id:
            raise ConfigError(
                f"output.root: {root} holds suite {manifest.suite_id!r}, not {suite_id!r};"
                " choose another root"
            )
        if manifest.layout != layout:
            raise ConfigError(
                f"output.layout: {root} was written with layout {manifest.layout!r}, not {layout!r}"
            )
    elif root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ConfigError(
            f"output.root: {root} exists and is not a suite directory (no {MANIFEST}); choose an empty"
            " or new folder"
        )
    else:
        manifest = SuiteManifest(suite_id=suite_id, layout=layout, catalog=CATALOGS[layout])
    for exp_id, entry in definitions.items():
        known = manifest.experiments.get(exp_id)
        if known is not None and known.get("definition_digest") != entry["definition_digest"]:
            raise ConfigError(
                f"experiments.{exp_id}: its definition changed since it ran into {root} (tasks,"
                " source, pools, bindings or limit); give the changed experiment a new id"
            )
        manifest.experiments[exp_id] = {**(known or {}), **entry}
    return manifest
