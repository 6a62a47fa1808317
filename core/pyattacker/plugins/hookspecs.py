"""Every hook a pyattacker plugin can implement.

Each registration hook receives a ``register`` callback. Calling it tells the kernel which
plugin provides which name, so clashes name both providers and ``pyattacker plugins --json``
can say what each plugin provides. Hooks run once per process at startup; the kernel then
calls the registered plain objects directly, never a hook per item.

Every hook is documented with its exact signature in docs/plugins.md (a test enforces it);
what each registered object must be is on the plugin API page, ``pyattacker.plugins.api``.
"""

from __future__ import annotations

import pluggy

from pyattacker.plugins.api import Register, RegisterNamed, RegisterObject

hookspec = pluggy.HookspecMarker("pyattacker")
hookimpl = pluggy.HookimplMarker("pyattacker")

__all__ = ["HOOK_KINDS", "Register", "hookimpl", "hookspec"]


@hookspec
def pyattacker_tasks(register: RegisterNamed) -> None:
    """Register task specs, or factories returning one, by name.

    Example::

        @hookimpl
        def pyattacker_tasks(register):
            register("shout", shout)            # a TaskSpec made with @task
            register("ask_model", make_ask)     # a factory: use: ask_model + kwargs
    """


@hookspec
def pyattacker_algorithms(register: RegisterNamed) -> None:
    """Register acquisition algorithm factories by name.

    ``register(name, factory)``; ``factory(**params)`` returns an object with ``name``,
    ``async acquire(pool, *, ctx, where, timeout, selector) -> Lease`` and ``fingerprint()``.

    Example::

        @hookimpl
        def pyattacker_algorithms(register):
            register("random", RandomPick)
    """


@hookspec
def pyattacker_codecs(register: RegisterObject) -> None:
    """Register artifact codecs: ``register(codec)`` with ``name``, ``types``, ``priority``,
    ``can_encode(value)``, ``encode(value) -> bytes`` and ``decode(data, type_name, types)``.

    Example::

        @hookimpl
        def pyattacker_codecs(register):
            register(NumpyCodec())
    """


@hookspec
def pyattacker_stores(register: RegisterObject) -> None:
    """Register store openers: ``register(opener)`` with ``name``, ``schemes``, ``suffixes``
    and ``open(location, *, read_only=False) -> Store``.

    Example::

        @hookimpl
        def pyattacker_stores(register):
            register(S3StoreOpener())            # handles s3://bucket/prefix
    """


@hookspec
def pyattacker_artifact_backends(register: RegisterNamed) -> None:
    """Register artifact byte backends by kind: ``register(kind, factory)``;
    ``factory(**params)`` returns an object with ``name``, ``put(artifact)`` and ``hydrate(artifact)``.

    Example::

        @hookimpl
        def pyattacker_artifact_backends(register):
            register("s3", S3Backend)            # artifact_backend: {kind: s3, bucket: b}
    """


@hookspec
def pyattacker_event_sinks(register: RegisterNamed) -> None:
    """Register event sink factories: ``register(name, factory)``; ``factory(**options)`` returns
    an object with ``handle(events: list[EventRecord])`` (called per flushed batch) and ``close()``.

    Example::

        @hookimpl
        def pyattacker_event_sinks(register):
            register("statsd", StatsdSink)
    """


@hookspec
def pyattacker_sources(register: RegisterNamed) -> None:
    """Register seed sources by kind: ``register(kind, source)``; ``source.options`` is a msgspec
    Struct type validating the ``source:`` section and ``source.open(options, base_dir)``
    yields ``(key_or_None, seed)`` lazily.

    Example::

        @hookimpl
        def pyattacker_sources(register):
            register("parquet", ParquetSource())
    """


@hookspec
def pyattacker_commands(register: RegisterObject) -> None:
    """Register CLI subcommands: ``register(command)`` with a (rich-)click command.

    Example::

        @hookimpl
        def pyattacker_commands(register):
            register(hello_command)              # pyattacker hello
    """


@hookspec
def pyattacker_shard_executors(register: RegisterNamed) -> None:
    """Register shard executors by name: ``register(name, factory)``; ``factory(**options)``
    returns an object with ``submit(job) -> handle`` whose handle has ``poll()``, ``wait()``,
    ``interrupt()`` (optional: one Ctrl-C) and ``cancel()`` (see docs/sharding.md).

    Example::

        @hookimpl
        def pyattacker_shard_executors(register):
            register("ray", RayExecutor)
    """


#: hook name -> registry kind
HOOK_KINDS: dict[str, str] = {
    "pyattacker_tasks": "tasks",
    "pyattacker_algorithms": "algorithms",
    "pyattacker_codecs": "codecs",
    "pyattacker_stores": "stores",
    "pyattacker_artifact_backends": "artifact_backends",
    "pyattacker_event_sinks": "event_sinks",
    "pyattacker_sources": "sources",
    "pyattacker_commands": "commands",
    "pyattacker_shard_executors": "shard_executors",
}
