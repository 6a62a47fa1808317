"""Acquisition algorithms: the protocol, the shared primitives, and spec resolution.

An algorithm decides *how to get* a lease (pick, wait, back off, fail over); it never decides
how to retry a failed call. Concrete algorithms are plugins (``pyattacker_algorithms`` hook);
the kernel only knows the protocol, so it resolves names through a registry and never imports
``pyattacker_plugins``. Whoever holds the plugins (the runner, config building) resolves specs
with an ``AlgorithmResolver`` and hands pools ready instances. The primitives here
(``wait_for_lease``, ``FallbackRef``, ``backoff_delay`` from ``backoff.py``) let a plugin be a
dozen lines.
"""

from __future__ import annotations

import difflib
import inspect
import math
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from pyattacker.errors import AcquireTimeout, ConfigError, ResourceUnavailable
from pyattacker.resources.backoff import JITTERS, backoff_delay
from pyattacker.resources.gate import short_of_budget

if TYPE_CHECKING:
    from pyattacker.plugins.registry import Registry
    from pyattacker.resources.lease import Lease
    from pyattacker.resources.pool import Pool

__all__ = [
    "JITTERS",
    "AcquireContext",
    "Algorithm",
    "AlgorithmResolver",
    "FallbackRef",
    "ParameterError",
    "algorithm_fingerprint",
    "backoff_delay",
    "beyond_recovery_error",
    "ctx_emit",
    "ctx_rng",
    "number_param",
    "optional_number_param",
    "resolve_algorithm",
    "spec_fingerprint",
    "unavailable",
    "validate_algorithm_spec",
    "try_free_slot",
    "wait_for_lease",
]

#: The algorithm used when nothing is configured.
DEFAULT_ALGORITHM = "wait"


@runtime_checkable
class AcquireContext(Protocol):
    """What an algorithm may read from the caller's context (every attribute optional in practice)."""

    rng: random.Random | None
    meta: dict[str, Any]
    pools: Mapping[str, Pool]
    task_name: str | None
    pipeline_id: str | None
    held_leases: list[Lease]

    def emit(self, kind: str, **data: Any) -> None: ...


@runtime_checkable
class Algorithm(Protocol):
    """An acquisition policy. ``fingerprint()`` is strict JSON: it is part of task identity.

    An algorithm may also define ``try_now(pool, *, ctx, where, selector) -> Lease | None``: a
    synchronous first try with exactly the semantics of the first step of ``acquire``. When it
    returns a lease, ``acquire`` is not called; when it returns None, ``acquire`` runs as usual.
    It saves a chain of coroutines per lease on the common path (a free slot).
    """

    name: str

    async def acquire(
        self,
        pool: Pool,
        *,
        ctx: AcquireContext | None,
        where: Any,
        timeout: float | None,
        selector: Mapping[str, Any],
    ) -> Lease: ...

    def fingerprint(self) -> dict[str, Any]: ...


# -- small helpers for algorithm authors ------------------------------------------------------


class ParameterError(ConfigError):
    """A value an algorithm's factory refuses, naming the parameter (``param``).

    ``validate`` reports it at the parameter's own field (``pools.x.algorithm.base``) instead of
    the algorithm's. ``number_param`` raises it; a factory checking a value itself raises
    ``ParameterError("jitter", "parameter 'jitter' must be ...")``. A plain ``ConfigError`` is
    reported at the algorithm's field.
    """

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def ctx_rng(ctx: Any) -> random.Random | None:
    """The context's seeded RNG (reproducible jitter), if it has one."""
    return getattr(ctx, "rng", None) if ctx is not None else None


def ctx_emit(ctx: Any, kind: str, **data: Any) -> None:
    """Emit a task event through the context, when there is one that can emit."""
    emit = getattr(ctx, "emit", None) if ctx is not None else None
    if emit is not None:
        emit(kind, **data)


def optional_number_param(name: str, value: Any, *, minimum: float = 0.0) -> float | None:
    """Like ``number_param`` but None (no limit) is allowed."""
    return None if value is None else number_param(name, value, minimum=minimum)


def number_param(name: str, value: Any, *, minimum: float = 0.0) -> float:
    """Validate a numeric algorithm parameter (finite, >= minimum); ConfigError names it."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ParameterError(name, f"parameter {name!r} must be a finite number, got {value!r}")
    if value < minimum:
        raise ParameterError(name, f"parameter {name!r} must be >= {minimum:g}, got {value!r}")
    return float(value)


def unavailable(pool: Pool, selector: Mapping[str, Any], where: Any = None) -> ResourceUnavailable:
    """The error for "nothing free right now", naming the pool and what was asked for."""
    asked = f" matching {dict(selector)!r}" if selector else ""
    if where is not None:
        asked += " (with a where filter)"
    return ResourceUnavailable(f"pool {pool.name!r}: no resource free{asked}")


def beyond_recovery_error(
    pool: Pool, selector: Mapping[str, Any], where: Any, why: str
) -> ResourceUnavailable:
    """The error for a wait that would last for ever (see ``Pool.beyond_recovery``)."""
    asked = f" matching {dict(selector)!r}" if selector else ""
    if where is not None:
        asked += " (with a where filter)"
    return ResourceUnavailable(
        f"pool {pool.name!r}: no resource{asked} can be leased again: {why}"
        " (an ok report on a held lease or re-publishing the resource brings it back)"
    )


def try_free_slot(pool: Pool, *, ctx: Any, where: Any, selector: Mapping[str, Any]) -> Lease | None:
    """Lease a free matching slot now (recorded as a zero wait), or None."""
    lease = pool.try_acquire(ctx, where=where, **selector) if selector else pool.try_acquire(ctx, where=where)
    if lease is not None:
        pool.note_wait(0.0, selector, lease.resource.id)
    return lease


async def wait_for_lease(
    pool: Pool,
    *,
    ctx: Any,
    where: Any,
    selector: Mapping[str, Any],
    timeout: float | None,
    score: Any = None,
) -> Lease:
    """Try; otherwise block on the pool's targeted wake-ups until leased or ``timeout`` passes.

    The wait is recorded with ``pool.note_wait`` (stats, slow-wait event) and the deadlock
    hint is armed for the whole wait, not per wake-up. Before each wait, until it has fired
    once, ``pool.warn_unmatched`` says when nothing in the pool matches the request (the wait
    then lasts until a publish); a lease taken at once never gets that far.
    """
    lease = pool.try_acquire(ctx, where=where, score=score, **selector)
    if lease is not None:
        pool.note_wait(0.0, selector, lease.resource.id)
        return lease
    clock = pool.clock
    start = clock.now()
    deadline = None if timeout is None else start + timeout
    watch = pool.watch_deadlock(ctx, selector)
    warned = False
    # what each stretch of the wait is for, rate budget or a slot, told apart when it starts
    for_budget = short_of_budget(pool, where, selector)
    budget_s = 0.0
    stretch = start
    try:
        while True:
            remaining = None if deadline is None else deadline - clock.now()
            if remaining is not None and remaining <= 0:
                raise _timed_out(pool, selector, timeout)
            beyond = pool.beyond_recovery(where, selector)
            if beyond is not None:
                raise beyond_recovery_error(pool, selector, where, beyond)
            if not warned:
                warned = pool.warn_unmatched(ctx, where, selector)
            woken = await pool.wait_slot(where=where, selector=selector, timeout=remaining)
            now = clock.now()
            if for_budget:
                budget_s += now - stretch
            stretch = now
            if woken:
                waited = (now - start) * 1000.0
                lease = pool.try_acquire(ctx, where=where, score=score, waited_ms=waited, **selector)
                if lease is not None:
                    pool.note_wait(waited, selector, lease.resource.id)
                    lease.resource.waited_budget_ms += budget_s * 1000.0
                    lease.resource.waited_slot_ms += waited - budget_s * 1000.0
                    return lease
            for_budget = short_of_budget(pool, where, selector)
    finally:
        if watch is not None:
            watch.cancel()


def _timed_out(pool: Pool, selector: Mapping[str, Any], timeout: float | None) -> AcquireTimeout:
    asked = f" matching {dict(selector)!r}" if selector else ""
    return AcquireTimeout(f"pool {pool.name!r}: no resource{asked} became free within {timeout}s")


# -- resolution -------------------------------------------------------------------------------


def _default_registry() -> Registry:
    """The process-wide algorithms registry."""
    # imported here: pluggy and plugin discovery load only when a name must be resolved
    from pyattacker.plugins.manager import get_plugins

    return get_plugins().algorithms


def _did_you_mean(word: str, options: list[str]) -> str:
    hint = difflib.get_close_matches(word, options, n=1, cutoff=0.5)
    return f" (did you mean {hint[0]!r}?)" if hint else ""


def _unknown_name(name: str, registry: Registry) -> str:
    known = registry.names()
    if not known:
        return (
            f"unknown algorithm {name!r}: no algorithms are registered"
            " (built-in plugins missing: reinstall with pip install -e .)"
        )
    return f"unknown algorithm {name!r}{_did_you_mean(name, known)}; known: {', '.join(known)}"


def _is_instance(spec: Any) -> bool:
    return hasattr(spec, "acquire") and not isinstance(spec, type)


def _split_spec(spec: Any) -> tuple[str | None, dict[str, Any], str | None]:
    """(name, params, error) of a string or mapping spec."""
    if isinstance(spec, str):
        return spec, {}, None
    if isinstance(spec, Mapping):
        params = dict(spec)
        name = params.pop("name", None)
        if not isinstance(name, str) or not name:
            return None, params, f"an algorithm mapping needs a 'name' string, got {name!r}"
        return name, params, None
    return (
        None,
        {},
        (
            "an algorithm is a name, a mapping {name: ..., params...} or an object with acquire(),"
            f" got {type(spec).__name__}"
        ),
    )


def _param_errors(name: str, factory: Any, params: Mapping[str, Any]) -> list[tuple[str | None, str]]:
    """``(parameter, message)`` for each parameter the factory does not accept, each with a
    did-you-mean hint (parameter None: the problem is not one parameter's)."""
    if not params:
        return []
    if _is_instance(factory):
        return [(None, f"algorithm {name!r} is a ready-made instance and takes no parameters")]
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return []
    accepted = [
        p.name
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
    ]
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return []
    errors: list[tuple[str | None, str]] = []
    for key in params:
        if key not in accepted:
            valid = f"; valid: {', '.join(accepted)}" if accepted else "; it takes no parameters"
            hint = _did_you_mean(key, accepted)
            errors.append((str(key), f"algorithm {name!r}: unknown parameter {key!r}{hint}{valid}"))
    return errors


def resolve_algorithm(spec: Any, registry: Registry | None = None) -> Algorithm:
    """Turn None (``wait``), a name, ``{"name": ..., **params}`` or an instance into an algorithm.

    Raises ConfigError with a did-you-mean hint for unknown names and parameters.
    """
    if spec is None:
        spec = DEFAULT_ALGORITHM
    if _is_instance(spec):
        return cast(Algorithm, spec)
    if isinstance(spec, type) and hasattr(spec, "acquire"):
        return _build(spec.__name__, spec, {})
    name, params, error = _split_spec(spec)
    if error is not None or name is None:
        raise ConfigError(error)
    registry = registry if registry is not None else _default_registry()
    factory = registry.get(name)
    if factory is None:
        raise ConfigError(_unknown_name(name, registry))
    problems = _param_errors(name, factory, params)
    if problems:
        raise ConfigError("; ".join(message for _, message in problems))
    if _is_instance(factory):
        return cast(Algorithm, factory)
    return _build(name, factory, params)


def _build(name: str, factory: Any, params: dict[str, Any]) -> Algorithm:
    try:
        algo = factory(**params)
    except ParameterError as exc:
        raise ParameterError(exc.param, f"algorithm {name!r}: {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"algorithm {name!r}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"algorithm {name!r}: invalid parameters {params!r}: {exc}") from None
    if not hasattr(algo, "acquire"):
        raise ConfigError(
            f"algorithm {name!r}: its factory returned {type(algo).__name__}, which lacks acquire()"
        )
    return cast(Algorithm, algo)


class AlgorithmResolver:
    """Algorithm specs to instances through one registry, for whoever holds the plugins.

    A name resolves once and is kept (one shared instance per name); an instance passes
    through; a mapping is built on each call. The registry is the process-wide one when none
    is given, looked up on first use, so a resolver that is never asked needs no plugin.
    """

    __slots__ = ("_named", "_registry")

    def __init__(self, registry: Registry | None = None) -> None:
        self._registry = registry
        self._named: dict[str, Algorithm] = {}

    @property
    def registry(self) -> Registry:
        """The registry names are looked up in."""
        if self._registry is None:
            self._registry = _default_registry()
        return self._registry

    def resolve(self, spec: Any) -> Algorithm:
        """None (``wait``), a name, ``{"name": ..., **params}`` or an instance as an algorithm.

        Raises ConfigError with a did-you-mean hint for unknown names and parameters.
        """
        if spec is None:
            spec = DEFAULT_ALGORITHM
        elif hasattr(spec, "acquire") and not isinstance(spec, type):
            return cast(Algorithm, spec)
        if isinstance(spec, str):
            named = self._named.get(spec)
            if named is None:
                named = self._named[spec] = resolve_algorithm(spec, self.registry)
            return named
        return resolve_algorithm(spec, self.registry)


def validate_algorithm_spec(
    spec: Any, registry: Registry, path: str, *, param_fields: bool = True
) -> list[str]:
    """Errors (prefixed with ``path``) of an algorithm spec.

    Names and parameter names are checked first (with did-you-mean hints); then the algorithm
    is built once, because only its factory knows the values it accepts (``backoff`` with
    ``base: -1`` would pass ``validate`` and then fail every pipeline of the run). A problem with
    one parameter is reported at that parameter's field (``pools.x.algorithm.base``), unless
    ``param_fields`` is false (a spec the file does not spell out: ``path`` only).
    """
    if spec is None or hasattr(spec, "acquire"):
        return []
    name, params, error = _split_spec(spec)
    if error is not None or name is None:
        return [f"{path}: {error}"]
    factory = registry.get(name)
    if factory is None:
        return [f"{path}: {_unknown_name(name, registry)}"]
    at = _at if param_fields else _not_at
    errors = [at(path, param, problem) for param, problem in _param_errors(name, factory, params)]
    if errors:
        return errors
    if "fallback" in params:
        fallback_path = f"{path}.fallback" if param_fields else path
        errors += validate_algorithm_spec(
            params["fallback"], registry, fallback_path, param_fields=param_fields
        )
    if not errors:
        try:
            resolve_algorithm(spec, registry)
        except ParameterError as exc:
            errors.append(at(path, exc.param if exc.param in params else None, str(exc)))
        except ConfigError as exc:
            errors.append(f"{path}: {exc}")
    return errors


def _at(path: str, param: str | None, problem: str) -> str:
    """``problem`` reported at the parameter's own field, or at the algorithm's."""
    return f"{path}.{param}: {problem}" if param is not None else f"{path}: {problem}"


def _not_at(path: str, param: str | None, problem: str) -> str:
    return f"{path}: {problem}"


def spec_fingerprint(spec: Any) -> dict[str, Any]:
    """The fingerprint of an algorithm *spec* as a task declares it, before any runner holds it.

    A name the installed plugins know is resolved and fingerprinted (equivalent specs agree);
    a name they do not know may still be one a ``Runner(plugins=...)`` registers, so its spec
    itself (``{"name": ..., **params}``) is the fingerprint and the runner reports it if it is
    unknown there too. Malformed specs are a ``ConfigError`` here."""
    if not _is_instance(spec) and not isinstance(spec, type):
        name, params, error = _split_spec(spec)
        if error is not None or name is None:
            raise ConfigError(error)
        if _default_registry().get(name) is None:
            return {"name": name, **params}
    return algorithm_fingerprint(resolve_algorithm(spec))


def algorithm_fingerprint(algorithm: Any) -> dict[str, Any]:
    """An algorithm's identity (part of a task's fingerprint): its ``fingerprint()`` dict.

    An algorithm without one cannot be told apart from a changed version of itself, so that
    is an error; the task can instead carry an explicit ``version=``.
    """
    fingerprint = getattr(algorithm, "fingerprint", None)
    label = getattr(algorithm, "name", None) or type(algorithm).__name__
    if fingerprint is None:
        raise ConfigError(
            f"algorithm {label!r} has no fingerprint(): add one returning its name and parameters"
            " (strict JSON), or give the task an explicit version="
        )
    result = fingerprint()
    if not isinstance(result, dict):
        raise ConfigError(
            f"algorithm {label!r}: fingerprint() must return a dict, got {type(result).__name__}"
        )
    return result


class FallbackRef:
    """A lazily resolved fallback algorithm (a name, a mapping, an instance, or None for ``wait``).

    It resolves through the pool's resolver on first use, so a plugin algorithm can name another
    plugin's algorithm as its fallback without importing it.
    """

    __slots__ = ("_resolved", "spec")

    def __init__(self, spec: Any = None) -> None:
        if not (spec is None or isinstance(spec, str | Mapping) or hasattr(spec, "acquire")):
            raise ParameterError(
                "fallback",
                "fallback must be an algorithm name, a mapping {name: ...} or an object with acquire(),"
                f" got {type(spec).__name__}",
            )
        if isinstance(spec, Mapping):
            spec = dict(spec)
        self.spec = spec
        self._resolved: Algorithm | None = spec if _is_instance(spec) else None

    def get(self, pool: Pool) -> Algorithm:
        if self._resolved is None:
            self._resolved = pool.resolver.resolve(self.spec)
        return self._resolved

    async def acquire(
        self, pool: Pool, *, ctx: Any, where: Any, timeout: float | None, selector: Mapping[str, Any]
    ) -> Lease:
        return await self.get(pool).acquire(pool, ctx=ctx, where=where, timeout=timeout, selector=selector)

    def fingerprint(self) -> dict[str, Any]:
        """The resolved fallback's fingerprint, so ``None``, ``"wait"`` and ``Wait()`` agree."""
        resolved = self._resolved or resolve_algorithm(self.spec, _default_registry())
        return algorithm_fingerprint(resolved)
