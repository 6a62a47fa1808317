"""S3 clients the way boto3 users expect, and the few request helpers both parts share.

Credentials come from boto3's usual chain (environment, ``AWS_PROFILE`` or ``profile``, config
files, instance roles); the endpoint from ``endpoint_url`` or boto3's own ``AWS_ENDPOINT_URL_S3``
/ ``AWS_ENDPOINT_URL``, so MinIO, R2 and other S3-compatible stores work. Nothing here prints or
returns a credential: only the bucket, the prefix, the endpoint and the profile name are ever
described.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

__all__ = ["RequestCounter", "is_missing", "is_precondition_failed", "make_client", "split_url"]


def split_url(url: str) -> tuple[str, str, dict[str, str]]:
    """``(bucket, prefix, options)`` of ``s3://bucket/some/prefix?opt=v`` (the prefix without
    leading or trailing slashes). Raises ``ValueError`` when there is no bucket."""
    rest = url[5:] if url.startswith("s3://") else url.removeprefix("s3:")
    rest, _, query = rest.partition("?")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {url!r} (expected s3://bucket/prefix)")
    return bucket, prefix.strip("/"), dict(parse_qsl(query, keep_blank_values=True))


def make_client(
    *, endpoint_url: str | None = None, region: str | None = None, profile: str | None = None
) -> Any:
    """A boto3 S3 client: bounded retries and timeouts, so a store that is gone fails a commit
    in seconds with a clear error instead of hanging the run."""
    import boto3
    from botocore.config import Config

    session = boto3.session.Session(profile_name=profile) if profile else boto3.session.Session()
    config = Config(
        retries={"max_attempts": 4, "mode": "standard"},
        connect_timeout=5,
        read_timeout=30,
        max_pool_connections=32,
    )
    return session.client("s3", endpoint_url=endpoint_url or None, region_name=region or None, config=config)


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return ""
    error = response.get("Error", {})
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return str(error.get("Code") or status or "")


def is_precondition_failed(exc: BaseException) -> bool:
    """A conditional write refused (``If-None-Match: *`` on an existing key, a stale ``If-Match``)."""
    return _code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")


def is_missing(exc: BaseException) -> bool:
    """A key (or bucket) that is not there."""
    return _code(exc) in ("NoSuchKey", "404", "NotFound", "NoSuchBucket")


class RequestCounter:
    """Counts the requests a client sends (a botocore event hook): the benchmark's measure."""

    def __init__(self, client: Any) -> None:
        self.by_operation: dict[str, int] = {}
        client.meta.events.register("before-send.s3", self._count)

    def _count(self, request: Any = None, **kwargs: Any) -> None:
        op = str(kwargs.get("event_name", "s3")).rsplit(".", 1)[-1]
        self.by_operation[op] = self.by_operation.get(op, 0) + 1

    @property
    def total(self) -> int:
        return sum(self.by_operation.values())
