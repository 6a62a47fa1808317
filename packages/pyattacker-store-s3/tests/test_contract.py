"""The store and the artifact backend against pyattacker's contract suites, on a real S3 server."""

from __future__ import annotations

from pyattacker.testing import ArtifactBackendContract, StoreContract

from .conftest import BUCKET


class TestS3Store(StoreContract):
    location = f"s3://{BUCKET}/contract{{tmp}}/run"  # {tmp}: a new folder path per test: a new prefix


class TestS3Backend(ArtifactBackendContract):
    kind = "s3"
    params = {"bucket": BUCKET, "prefix": "blobs{tmp}", "min_bytes": 16}
