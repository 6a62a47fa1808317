"""Artifact byte backends: where an artifact's payload lives, and how a spec picks one.

A store row always keeps digest, size and codec; the backend decides whether the bytes stay in
the row (``inline``), are dropped (``null``) or move elsewhere with an opaque ``blob_ref``
(``file``, plugins such as S3). ``put`` runs before the checkpoint commit and must be durable
when it returns, so a committed row never points at bytes that could still vanish; ``hydrate``
turns a row back into bytes, or into ``payload=None`` (unavailable: resume recomputes).

Backends are plugins registered by kind (``pyattacker_artifact_backends``). This module turns
a user's spec (string, JSON string or mapping) into ``(kind, params)``, validates it without
side effects (config checking must not create directories) and builds the backend.
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import msgspec

from pyattacker.errors import ConfigError
from pyattacker.model import ArtifactRecord
from pyattacker.plugins.registry import Registry

__all__ = [
    "DEFAULT_BACKEND",
    "ArtifactBackend",
    "parse_backend_spec",
    "resolve_backend",
    "validate_backend_spec",
]

DEFAULT_BACKEND = "inline"
_INLINE_ALIASES = frozenset({"", "inline", "none"})
#: ``<kind>://...`` names a backend kind by its URL scheme (``s3://bucket/prefix``)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+")


@runtime_checkable
class ArtifactBackend(Protocol):
    """What an artifact backend plugin's factory returns."""

    name: str

    def put(self, artifact: ArtifactRecord) -> ArtifactRecord:
        """The row to store: payload possibly moved out (``blob_ref`` set); durable on return."""

    def hydrate(self, artifact: ArtifactRecord) -> ArtifactRecord:
        """The row with ``payload`` filled from ``blob_ref`` when possible, else payload None."""

    def describe(self) -> dict[str, Any]:
        """A JSON-able description for reports (``kind`` plus non-secret params)."""

    # optional: ``identity_put = True`` (a class attribute) declares that ``put`` returns its
    # argument unchanged and does nothing else; a run then does not call it (the ``inline``
    # backend). Only the value ``True`` counts.
    # optional: ``prepare_to_write()`` raises (``ValueError("field: why")``) when the backend
    # could not store bytes (a root that is a file, a folder it cannot write). A run calls it
    # when it starts; a view that only reads blobs back (``export``) does not.


class _SpecError(Exception):
    """A spec that cannot even be parsed; carries the field suffix and the message."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def parse_backend_spec(spec: Any) -> tuple[str, dict[str, Any]]:
    """``(kind, params)`` for a spec; raises ``ConfigError`` when it cannot be parsed.

    None/""/"inline"/"none" → inline; "null" (any case) → null; "file://path" → file;
    "<kind>://..." → that kind with ``{"url": the string}`` (``s3://bucket/prefix``); a string
    starting with ``{`` is JSON; a bare word close to one of those names is a typo (an error);
    any other string is a file root; a mapping has ``kind`` (default file).
    """
    try:
        return _parse(spec)
    except _SpecError as exc:
        raise ConfigError(_field_message("artifact_backend", exc.field, exc.message)) from None


def _parse(spec: Any) -> tuple[str, dict[str, Any]]:
    if spec is None:
        return DEFAULT_BACKEND, {}
    if isinstance(spec, str):
        return _parse_string(spec)
    if isinstance(spec, Mapping):
        return _parse_mapping(spec)
    raise _SpecError("", f"expected a string or a mapping, got {type(spec).__name__}")


def _parse_string(spec: str) -> tuple[str, dict[str, Any]]:
    text = spec.strip()
    if text.lower() in _INLINE_ALIASES:
        return DEFAULT_BACKEND, {}
    if text.lower() == "null":
        return "null", {}
    if text.startswith("file://"):
        return "file", {"root": text[len("file://") :]}
    scheme, sep, _ = text.partition("://")
    if sep and _SCHEME.fullmatch(scheme):  # s3://bucket/prefix: a plugin's kind, given the URL
        return scheme.lower(), {"url": text}
    if not text.startswith("{") and _looks_like_a_name(text):
        hint = difflib.get_close_matches(text.lower(), _NAMES, n=1, cutoff=0.6)
        if hint:  # "nul" or "inlnie" is a typo, not a folder the user wanted blobs in
            raise _SpecError(
                "",
                f"{spec!r} is not a backend name (did you mean {hint[0]!r}?); for a folder of"
                f" that name write ./{text} or file://{text}",
            )
    if text.startswith("{"):
        try:
            decoded = msgspec.json.decode(text.encode())
        except msgspec.DecodeError as exc:
            raise _SpecError("", f"invalid JSON: {exc}") from None
        if not isinstance(decoded, dict):
            raise _SpecError("", "JSON spec must be an object")
        return _parse_mapping(decoded)
    return "file", {"root": text}


#: the names a bare word may mean; anything close to one of them is taken as a typo
_NAMES = ("inline", "none", "null")


def _looks_like_a_name(text: str) -> bool:
    """A bare word: no folder separator, no leading dot or tilde (``./x``, ``~/x`` are paths)."""
    return bool(text) and not any(c in text for c in "/\\") and text[0] not in ".~"


def _parse_mapping(spec: Mapping[Any, Any]) -> tuple[str, dict[str, Any]]:
    params = {str(k): v for k, v in spec.items()}
    kind = params.pop("kind", "file")
    if not isinstance(kind, str) or not kind:
        raise _SpecError("kind", f"must be a non-empty string, got {kind!r}")
    return kind, params


def _field_message(path: str, field: str, message: str) -> str:
    where = f"{path}.{field}" if field else path
    return f"{where}: {message}"


def validate_backend_spec(spec: Any, registry: Registry, path: str = "run.artifact_backend") -> list[str]:
    """Every problem with ``spec`` as ``"<path>[.field]: message"``; empty when it is usable.

    Checks parameters against the factory's signature and its optional ``validate(params)``
    hook; never constructs the backend, so nothing on disk is touched.
    """
    if _is_backend_object(spec):
        return []
    try:
        kind, params = _parse(spec)
    except _SpecError as exc:
        return [_field_message(path, exc.field, exc.message)]
    factory = registry.get(kind)
    if factory is None:
        known = ", ".join(registry.names()) or "none"
        return [_field_message(path, "kind", f"unknown artifact backend {kind!r} (known: {known})")]
    problems = [_field_message(path, f, m) for f, m in _signature_problems(kind, factory, params)]
    if problems:
        return problems
    check = getattr(factory, "validate", None)
    if callable(check):
        for item in check(params):
            field, _, message = str(item).partition(": ")
            problems.append(_field_message(path, field, message) if message else f"{path}: {item}")
    return problems


def _signature_problems(
    kind: str, factory: Callable[..., Any], params: dict[str, Any]
) -> list[tuple[str, str]]:
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return []
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values())
    named = {
        name: p
        for name, p in sig.parameters.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    problems = [
        (name, f"required for kind {kind!r}")
        for name, p in named.items()
        if p.default is inspect.Parameter.empty and name not in params
    ]
    if not accepts_any:
        allowed = ", ".join(sorted(named)) or "none"
        problems += [
            (name, f"unknown parameter for kind {kind!r} (allowed: {allowed})")
            for name in sorted(params)
            if name not in named
        ]
    return problems


def _is_backend_object(spec: Any) -> bool:
    return not isinstance(spec, str | Mapping) and hasattr(spec, "put") and hasattr(spec, "hydrate")


def resolve_backend(
    spec: Any, registry: Registry, path: str = "run.artifact_backend", *, for_writing: bool = True
) -> ArtifactBackend:
    """Build the backend for ``spec`` (an already built backend passes through).

    ``for_writing`` (a run) also asks it to ``prepare_to_write``; a view reading blobs back
    does not, so a read-only blob folder can still be read."""
    if _is_backend_object(spec):
        backend: ArtifactBackend = spec
        return backend
    problems = validate_backend_spec(spec, registry, path)
    if problems:
        raise ConfigError("; ".join(problems))
    kind, params = _parse(spec)
    factory = registry.get(kind)
    if factory is None:  # validated above; only a registry changing underneath gets here
        raise ConfigError(f"{path}.kind: unknown artifact backend {kind!r}")
    try:
        built: ArtifactBackend = factory(**params)
        prepare = getattr(built, "prepare_to_write", None) if for_writing else None
        if prepare is not None:
            prepare()
    except ConfigError:
        raise
    except Exception as exc:
        # a factory may name the parameter at fault as validate() does: ValueError("root: ...")
        field, sep, message = str(exc).partition(": ")
        if sep and field in params:
            raise ConfigError(_field_message(path, field, message)) from exc
        raise ConfigError(f"{path}: cannot build artifact backend {kind!r}: {exc}") from exc
    return built
