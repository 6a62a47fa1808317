"""The ``s3`` artifact backend: large payloads go to content-addressed objects in a bucket.

A payload of at least ``min_bytes`` is stored once at ``<prefix>/blobs/<2 hex>/<digest>``
(``blob_ref = "s3://bucket/<key>"``); smaller ones stay inline in the row. The PUT carries
``If-None-Match: *``, so identical payloads are stored once and an existing object is never
rewritten (a refusal means it is there already); a digest stored by this process is not even
asked for again. Bytes read back are checked against the row's size and digest: damaged or
reused objects are unavailable (payload None: resume recomputes), never another value.

``describe()`` holds the bucket, prefix, endpoint, region, profile name and ``min_bytes``:
no credential ever (boto3 finds those itself, see ``client.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from pyattacker.digest import digest_bytes
from pyattacker.model import ArtifactRecord
from pyattacker_store_s3.client import is_missing, is_precondition_failed, make_client, split_url

__all__ = ["DEFAULT_MIN_BYTES", "S3Backend"]

DEFAULT_MIN_BYTES = 4096
_PARAMS = ("url", "bucket", "prefix", "endpoint_url", "region", "profile", "min_bytes")


class S3Backend:
    """Content-addressed blobs in ``s3://bucket/prefix`` (see the module docstring)."""

    name = "s3"
    identity_put = False

    def __init__(
        self,
        url: str | None = None,
        *,
        bucket: str | None = None,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
        profile: str | None = None,
        min_bytes: int = DEFAULT_MIN_BYTES,
        client: Any = None,
    ) -> None:
        problems = self.validate({"url": url, "bucket": bucket, "prefix": prefix, "min_bytes": min_bytes})
        if problems:
            raise ValueError("; ".join(problems))
        if url:
            bucket, prefix, options = split_url(url)
            endpoint_url = endpoint_url or options.get("endpoint_url")
            region = region or options.get("region")
            profile = profile or options.get("profile")
        assert bucket
        self.bucket, self.prefix = bucket, str(prefix).strip("/")
        self.endpoint_url, self.region, self.profile = endpoint_url, region, profile
        self.min_bytes = min_bytes
        self._client = client
        self._stored: set[str] = set()  # keys this process stored or saw stored

    @staticmethod
    def validate(params: Mapping[str, Any]) -> list[str]:
        """Parameter problems as ``"field: message"``; sends no request."""
        problems = [
            f"{k}: unknown parameter for kind 's3' (allowed: {', '.join(_PARAMS)})"
            for k in params
            if k not in _PARAMS
        ]
        url, bucket = params.get("url"), params.get("bucket")
        if url is not None and (
            not isinstance(url, str) or not url.startswith("s3://") or not url[5:].split("/")[0]
        ):
            problems.append(f"url: expected s3://bucket/prefix, got {url!r}")
        if not url and (not isinstance(bucket, str) or not bucket):
            problems.append("bucket: required for kind 's3' (or write the spec as s3://bucket/prefix)")
        if not isinstance(params.get("prefix", ""), str):
            problems.append("prefix: must be a string")
        min_bytes = params.get("min_bytes", DEFAULT_MIN_BYTES)
        if isinstance(min_bytes, bool) or not isinstance(min_bytes, int) or min_bytes < 0:
            problems.append(f"min_bytes: must be a non-negative integer, got {min_bytes!r}")
        return problems

    @property
    def client(self) -> Any:
        if self._client is None:  # boto3 is imported when the first blob moves, not at config time
            self._client = make_client(
                endpoint_url=self.endpoint_url, region=self.region, profile=self.profile
            )
        return self._client

    def key_for(self, digest: str) -> str:
        name = f"blobs/{digest[:2]}/{digest}"
        return f"{self.prefix}/{name}" if self.prefix else name

    # -- the backend protocol ------------------------------------------------------------------------
    def put(self, artifact: ArtifactRecord) -> ArtifactRecord:
        payload = artifact.payload
        if payload is None or len(payload) < self.min_bytes:
            return artifact
        digest = artifact.digest if artifact.digest else digest_bytes(payload)
        key = self.key_for(digest)
        if key not in self._stored:
            try:
                self.client.put_object(Bucket=self.bucket, Key=key, Body=payload, IfNoneMatch="*")
            except Exception as exc:
                if not is_precondition_failed(exc):  # refused: the same bytes are there already
                    raise
            self._stored.add(key)
        return msgspec.structs.replace(artifact, payload=None, blob_ref=f"s3://{self.bucket}/{key}")

    def hydrate(self, artifact: ArtifactRecord) -> ArtifactRecord:
        ref = artifact.blob_ref
        if artifact.payload is not None or not ref or not ref.startswith("s3://"):
            return artifact
        bucket, _, key = ref[5:].partition("/")
        try:
            data = self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except Exception as exc:
            if is_missing(exc):
                return artifact  # gone: unavailable, resume recomputes it
            raise
        if len(data) != artifact.size or digest_bytes(data) != artifact.digest:
            return msgspec.structs.replace(artifact, payload=None)
        return msgspec.structs.replace(artifact, payload=data)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.name, "bucket": self.bucket, "prefix": self.prefix}
        for name in ("endpoint_url", "region", "profile"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        out["min_bytes"] = self.min_bytes
        return out
