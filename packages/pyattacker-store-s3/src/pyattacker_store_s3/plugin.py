"""The plugin module: registers the ``s3`` store opener and the ``s3`` artifact backend.

Every pyattacker process imports every plugin module, so this one stays cheap: boto3 and the
store are imported only when an S3 store is opened or an S3 backend is built.

* store: ``pyattacker run -c cfg.yaml --store s3://bucket/prefix/run`` (``?endpoint_url=...``,
  ``?profile=...``, ``?region=...``, ``?lease_ttl=30`` as options)
* artifact backend: ``--artifact-backend s3://bucket/prefix`` or
  ``{kind: s3, bucket: b, prefix: p, endpoint_url: ..., min_bytes: 4096}``
"""

from __future__ import annotations

from typing import Any

from pyattacker import hookimpl
from pyattacker.plugins.api import StoreBase, StoreOpenerBase

#: the version of the plugin API this module was written for (docs/plugins.md, "The plugin API")
PYATTACKER_PLUGIN_API = 2


class S3StoreOpener(StoreOpenerBase):
    """Opens ``s3://bucket/prefix/run`` (the location is kept as written, for messages)."""

    name = "s3"
    schemes = ("s3",)

    def open(self, location: str, *, read_only: bool = False) -> StoreBase:
        from pyattacker_store_s3.store import S3Store  # boto3 only when a store is opened

        return S3Store(location, read_only=read_only)

    def list_stores(self, location: str) -> list[str]:
        """Stores under ``s3://bucket/<prefix>*`` (a ``store.json`` marker in each): how
        ``report s3://b/run`` finds ``s3://b/run.shard0of2`` and its siblings."""
        from pyattacker_store_s3.listing import list_store_locations

        return list_store_locations(location)


def s3_backend(**params: Any) -> Any:
    """The ``s3`` artifact backend's factory (see ``pyattacker_store_s3.backend.S3Backend``)."""
    from pyattacker_store_s3.backend import S3Backend

    return S3Backend(**params)


def _validate(params: Any) -> list[str]:
    from pyattacker_store_s3.backend import S3Backend

    return S3Backend.validate(params)


s3_backend.validate = _validate  # type: ignore[attr-defined]


@hookimpl
def pyattacker_stores(register: Any) -> None:
    register(S3StoreOpener())


@hookimpl
def pyattacker_artifact_backends(register: Any) -> None:
    register("s3", s3_backend)
