"""Payloads kept outside the store (``blob_ref``), read back for the views.

A run records the artifact backend it wrote with (``config.artifact_backend`` of its run row,
the backend's ``describe()``). ``export`` rebuilds those backends for reading only (no
``prepare_to_write``, so a read-only blob folder still works) and asks them to ``hydrate`` each
artifact whose bytes live elsewhere, so results kept in blobs export like inline ones.
``--artifact-backend`` names the backend instead (the blob folder moved). A backend that cannot
be built is reported once and its artifacts stay ``absent``: a view never fails on them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from pyattacker.errors import ConfigError
from pyattacker.model import ArtifactRecord
from pyattacker.plugins.manager import get_plugins
from pyattacker.plugins.store_base import StoreBase
from pyattacker.store.backends import parse_backend_spec, resolve_backend

__all__ = ["BlobReader", "ViewCodecs"]

#: backend kinds that never leave bytes elsewhere: nothing to read back
_NO_BLOBS = frozenset({"inline", "null"})


def _keeps_blobs(spec: Any) -> bool:
    """Whether a run's recorded backend may have put bytes elsewhere (an unparsable record is
    tried: building it names the problem once)."""
    try:
        kind, _params = parse_backend_spec(spec)
    except ConfigError:
        return True
    return kind not in _NO_BLOBS


class BlobReader:
    """Hydrates artifacts of one store through the backends its runs wrote with (built lazily:
    a store without blobs builds none)."""

    def __init__(
        self,
        store: StoreBase,
        override: Any = None,
        *,
        registry: Any = None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self._store = store
        self._override = override
        self._registry = registry
        self._warn = warn or (lambda message: print(f"warning: {message}", file=sys.stderr))
        self._backends: list[Any] | None = None

    def _specs(self) -> list[tuple[str, Any]]:
        """(where it came from, spec) of every backend to try, the override alone if given."""
        if self._override is not None:
            return [("--artifact-backend", self._override)]
        found: list[tuple[str, Any]] = []
        seen: set[str] = set()
        for run in self._store.runs():
            spec = (run.config or {}).get("artifact_backend")
            key = repr(spec)
            if key in seen or not _keeps_blobs(spec):
                continue
            seen.add(key)
            found.append((f"run {run.run_id}'s artifact_backend", spec))
        return found

    def _build(self) -> list[Any]:
        registry = self._registry
        if registry is None:
            registry = get_plugins().artifact_backends
        built = []
        for where, spec in self._specs():
            try:
                built.append(resolve_backend(spec, registry, where, for_writing=False))
            except ConfigError as exc:
                self._warn(f"blobs of {self._store.location} cannot be read back: {exc}")
        return built

    def hydrate(self, artifact: ArtifactRecord) -> ArtifactRecord:
        """``artifact`` with its payload read back from its blob when a backend can; else as is."""
        if artifact.payload is not None or not artifact.blob_ref:
            return artifact
        if self._backends is None:
            self._backends = self._build()
        for backend in self._backends:
            try:
                found: ArtifactRecord = backend.hydrate(artifact)
            except Exception:  # a backend plugin that raises on one blob: that blob is absent
                continue
            if found.payload is not None:
                return found
        return artifact


class ViewCodecs:
    """What ``render_payload`` decodes with: a codec registry, and the blobs of one store."""

    def __init__(self, codecs: Any, blobs: BlobReader) -> None:
        self.codecs = codecs
        self.blobs = blobs
        #: payloads whose bytes did not match their stored digest (shown ``damaged``, counted
        #: so that a view can say so once)
        self.damaged = 0

    def decode(self, codec_name: str, type_name: str, data: bytes) -> Any:
        return self.codecs.decode(codec_name, type_name, data)
