"""The ``null`` artifact backend: keep digest and size as evidence, drop the bytes.

For runs whose outputs are not worth storing; the row says what was produced
(``null:<digest>:<size>``) but resume cannot reuse it and recomputes the task.
"""

from __future__ import annotations

from typing import Any

import msgspec

from pyattacker import hookimpl
from pyattacker.model import ArtifactRecord

__all__ = ["NullBackend"]


class NullBackend:
    """Drops payloads on ``put``; its refs never hydrate (payload stays None)."""

    name = "null"

    def put(self, artifact: ArtifactRecord) -> ArtifactRecord:
        ref = f"null:{artifact.digest}:{artifact.size}"
        return msgspec.structs.replace(artifact, payload=None, blob_ref=ref)

    def hydrate(self, artifact: ArtifactRecord) -> ArtifactRecord:
        # a row written inline by an earlier run still carries usable bytes; nothing to fetch
        return artifact

    def describe(self) -> dict[str, Any]:
        return {"kind": self.name}


@hookimpl
def pyattacker_artifact_backends(register: Any) -> None:
    register("null", NullBackend)
