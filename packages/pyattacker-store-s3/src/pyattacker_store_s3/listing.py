"""Which stores exist under a location: one LIST of the prefix's children, one HEAD each.

A sharded run writes ``s3://b/run.shard{i}ofN`` beside ``s3://b/run``; the views find them
from the base location as they glob files on disk. Only the folders that hold a store marker
count, so a prefix that merely shares the name (``s3://b/run-old/`` without a marker) is not a store.
"""

from __future__ import annotations

from pyattacker_store_s3.client import is_missing, make_client, split_url

__all__ = ["list_store_locations"]


def list_store_locations(location: str) -> list[str]:
    """The store locations (as ``s3://bucket/prefix`` plus the same ``?options``) whose prefix
    begins with ``location``'s prefix."""
    bucket, prefix, options = split_url(location)
    query = location.partition("?")[2]
    client = make_client(
        endpoint_url=options.get("endpoint_url"), region=options.get("region"), profile=options.get("profile")
    )
    found: list[str] = []
    for folder in _children(client, bucket, prefix):
        try:
            client.head_object(Bucket=bucket, Key=f"{folder}store.json")
        except Exception as exc:
            if is_missing(exc):
                continue
            raise
        found.append(f"s3://{bucket}/{folder.rstrip('/')}" + (f"?{query}" if query else ""))
    return found


def _children(client: object, bucket: str, prefix: str) -> list[str]:
    """The "folders" (common prefixes ending in ``/``) whose name begins with ``prefix``."""
    paginator = client.get_paginator("list_objects_v2")  # type: ignore[attr-defined]
    folders: list[str] = []
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
        folders.extend(p["Prefix"] for p in page.get("CommonPrefixes", ()))
    return folders
