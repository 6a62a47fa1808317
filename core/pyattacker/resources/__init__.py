"""Resources: pools and the parts they are built from.

``pool`` (the front object), ``resource``, ``health`` (its state machine), ``lease``,
``waiters`` (the wait queue), ``diagnostics``, ``algorithm`` (acquisition algorithms and their
resolution), ``backoff``, ``redact`` (secrets kept out of what is shown) and the ``bus``.

Layer 3: imports plugins and the vocabulary (independent of store).
"""
