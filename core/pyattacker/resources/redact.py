"""Secrets kept out of what is stored and shown: option values under secret-looking keys.

A resource's options often hold an API key or a token; its ``spec()``, a pool's ``snapshot()``
and the selectors named in events go to the store and the views, so every value under a key
containing one of ``SECRET_WORDS`` is masked there (the last 4 characters stay, to tell keys apart).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

__all__ = ["SECRET_WORDS", "mask_secrets", "shown"]

#: Option keys containing one of these words have their values masked.
SECRET_WORDS = ("key", "token", "secret", "password", "authorization")


def _is_secret_key(key: object) -> bool:
    low = str(key).lower()
    return any(word in low for word in SECRET_WORDS)


def _mask_value(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _mask_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_mask_value(v) for v in value]
    if value is None:
        return None
    text = str(value)
    return "****" + text[-4:] if len(text) > 4 else "****"


def mask_secrets(value: Any) -> Any:
    """Copy ``value`` with every value under a secret-looking key masked (keeps the last 4)."""
    if isinstance(value, Mapping):
        return {k: _mask_value(v) if _is_secret_key(k) else mask_secrets(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_secrets(v) for v in value]
    return value


def shown(value: Any) -> Any:
    """``value`` masked and made plain JSON, for the store and the views.

    Options may hold live objects (a client, a lock): those are shown as their ``repr``, so a
    resource's row can never fail the store's commit.
    """
    return msgspec.to_builtins(mask_secrets(value), enc_hook=repr, str_keys=True)
