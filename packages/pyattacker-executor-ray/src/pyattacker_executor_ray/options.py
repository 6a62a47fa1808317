"""The ``ray`` executor's options, from ``--executor-option KEY=VALUE`` (strings) or Python.

Kept apart from the executor so that a bad option is refused (exit 2, naming it) before Ray
is imported or a cluster is contacted.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from pyattacker.errors import ConfigError

__all__ = ["BUDGET_MODES", "STORAGE_MODES", "RayOptions", "check_reachable"]

#: where shard stores live: ``auto`` (shared on the driver's node and for non-file stores,
#: shipped from other nodes), ``shared`` (every node sees the path), ``ship`` (always shipped)
STORAGE_MODES = ("auto", "shared", "ship")
#: how shards share the rate budget of limited resources: ``actor`` (one Ray actor, any node),
#: ``file`` (the kernel's budget file: every shard on the driver's machine), ``auto`` (``file``
#: when the executor starts its own local Ray, ``actor`` when it joins a cluster)
BUDGET_MODES = ("auto", "actor", "file")
#: environment variables every shard gets from the driver, by prefix (the spec's one-T spelling too)
FORWARDED_PREFIXES = ("PYATTACKER_", "PYATACKER_")


def _number(name: str, value: object, *, minimum: float) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"--executor ray: {name} must be a number, got {value!r}") from None
    if number < minimum:
        raise ConfigError(f"--executor ray: {name} must be >= {minimum:g}, got {value!r}")
    return number


@dataclass(frozen=True)
class RayOptions:
    """What ``RayExecutor(**options)`` was given, checked.

    ``address``: the cluster (``HOST:PORT`` of its head, ``auto``, ``ray://HOST:PORT``); None:
    ``RAY_ADDRESS`` if set, else a local Ray started for this run. ``storage``: see
    ``STORAGE_MODES``. ``num_cpus``: CPUs each shard reserves. ``grace_s``: how long ``cancel``
    waits after an interrupt before killing. ``env``: more driver variables to forward (comma
    separated; ``PYATTACKER_*`` always are). ``progress_s``: seconds between progress lines on
    stderr (0: none). ``budget``: see ``BUDGET_MODES``.
    """

    address: str | None = None
    storage: str = "auto"
    num_cpus: float = 1.0
    grace_s: float = 15.0
    env: tuple[str, ...] = ()
    progress_s: float = 10.0
    budget: str = "auto"

    @classmethod
    def parse(cls, **options: object) -> RayOptions:
        known = {"address", "storage", "num_cpus", "grace_s", "env", "progress_s", "budget"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(
                f"--executor ray: unknown option(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})"
            )
        address = options.get("address")
        address = str(address).strip() if address not in (None, "") else os.environ.get("RAY_ADDRESS") or None
        storage = str(options.get("storage", "auto"))
        if storage not in STORAGE_MODES:
            raise ConfigError(
                f"--executor ray: storage must be one of {', '.join(STORAGE_MODES)}, got {storage!r}"
            )
        budget = str(options.get("budget", "auto"))
        if budget not in BUDGET_MODES:
            raise ConfigError(
                f"--executor ray: budget must be one of {', '.join(BUDGET_MODES)}, got {budget!r}"
            )
        env = options.get("env", ())
        names = tuple(n.strip() for n in env.split(",") if n.strip()) if isinstance(env, str) else tuple(env)  # type: ignore[arg-type]
        return cls(
            address=address,
            storage=storage,
            num_cpus=_number("num_cpus", options.get("num_cpus", 1), minimum=0),
            grace_s=_number("grace_s", options.get("grace_s", 15), minimum=0),
            env=names,
            progress_s=_number("progress_s", options.get("progress_s", 10), minimum=0),
            budget=budget,
        )

    def budget_mode(self) -> str:
        """``actor`` or ``file``: ``auto`` is ``file`` only for a Ray this run starts on this
        machine (every shard then runs here); a cluster may place shards on any node."""
        if self.budget != "auto":
            return self.budget
        return "file" if self.address is None else "actor"

    def forwarded_env(self) -> dict[str, str]:
        """The driver's variables each shard gets (on top of the node's own environment)."""
        picked = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_PREFIXES)}
        picked.update({k: os.environ[k] for k in self.env if k in os.environ})
        return picked


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Refuse at once an address nothing listens on: ``ray.init`` would retry for minutes.

    Only ``HOST:PORT`` and ``ray://HOST:PORT`` are checked (``auto`` is resolved by Ray)."""
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not host or "/" in target:
        if address == "auto":
            return
        raise ConfigError(f"--executor ray: address must be HOST:PORT, ray://HOST:PORT or auto: {address!r}")
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(f"--executor ray: the port of address {address!r} is not a number") from None
    try:
        with socket.create_connection((host.strip("[]"), number), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ConfigError(
            f"--executor ray: no Ray cluster reachable at {address} ({exc.strerror or exc}); start one"
            " (`ray start --head`) or fix --executor-option address=HOST:PORT"
        ) from None
