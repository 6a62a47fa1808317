"""The ``inline`` artifact backend (the default): payload bytes stay in the store row.

Nothing to move and nothing to fetch, so a checkpoint is a single store commit and resume
reads the payload straight from the row.
"""

from __future__ import annotations

from typing import Any

from pyattacker import hookimpl
from pyattacker.model import ArtifactRecord

__all__ = ["InlineBackend"]


class InlineBackend:
    """Keeps bytes in the row; ``put`` and ``hydrate`` are identities."""

    name = "inline"
    #: ``put`` returns its argument unchanged: a runner skips the call (once per task)
    identity_put = True

    def put(self, artifact: ArtifactRecord) -> ArtifactRecord:
        return artifact

    def hydrate(self, artifact: ArtifactRecord) -> ArtifactRecord:
        return artifact

    def describe(self) -> dict[str, Any]:
        return {"kind": self.name}


@hookimpl
def pyattacker_artifact_backends(register: Any) -> None:
    register("inline", InlineBackend)
