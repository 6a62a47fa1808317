"""Scenarios: the written-down assumptions a benchmark's numbers are a property of.

A scenario is plain data: the endpoints (their capacity, rate limit, latency, errors and
declared quota), the incidents of the world (outages) and whether it keeps per-job state (a
session cache), how the client groups the endpoints into pools, the shape of the client (jobs,
steps, calls, workers, horizon, retry policy) and which algorithms it cannot tell apart from
others. ``register_scenario`` adds one from Python (a test's dead world, a plugin's
multi-vendor world); the built-in ``bursty_provider``, ``outage_failover`` and
``cache_affinity`` are registered when this module is imported, and so are
``rate_limited_keys`` / ``rate_limited_keys_undeclared`` (provider rpm/tpm per key, with the
limits declared to the pool or capacity caps alone).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pyattacker import ConfigError, Retrying

__all__ = [
    "DEFAULT_POOL",
    "DEFAULT_SCENARIO",
    "EndpointSpec",
    "Outage",
    "PoolSpec",
    "Scenario",
    "get_scenario",
    "register_scenario",
    "scenario_names",
    "unregister_scenario",
]

DEFAULT_SCENARIO = "bursty_provider"
#: the pool's name when a scenario declares no pools (one pool holding every endpoint)
DEFAULT_POOL = "bench"


@dataclass(frozen=True)
class EndpointSpec:
    """One simulated endpoint: what the client declares about it and how it really behaves."""

    name: str
    #: the pool capacity the client declares (leases at once)
    slots: int
    #: requests the endpoint serves at full speed at the peak of its capacity cycle (more queue)
    server_concurrency: int
    #: token-bucket refill (requests per second) at the peak, and the bucket's size
    rate_per_s: float
    burst: float
    #: log-normal latency: median and sigma of the underlying normal
    latency_median_s: float
    latency_sigma: float
    #: the slow tail: this share of admitted requests takes ``tail_factor`` times longer
    tail_p: float = 0.0
    tail_factor: float = 1.0
    #: independent error probability of an admitted request, and inside a storm window
    error_rate: float = 0.0
    storm_p: float = 0.0
    storm_error_rate: float = 0.0
    #: the declared quota (``options.quota.tokens``, read by ``quota_aware``); None: undeclared
    quota_tokens: float | None = None
    #: tokens an admitted request spends (uniform between the two)
    tokens_per_request: tuple[int, int] = (500, 1500)
    #: whether refusals carry a Retry-After the client's retry policy obeys
    retry_after_hint: bool = False
    #: where in the capacity cycle this endpoint starts (seconds)
    phase_s: float = 0.0
    #: the provider's per-key limits: requests and tokens admitted in any 60 s (None: none); a
    #: request over them is refused (429) with the exact Retry-After
    rpm: float | None = None
    tpm: float | None = None
    #: the pool's health machine for this resource
    degrade_after: int = 3
    dead_after: int = 50
    cooldown_s: float = 10.0

    def check(self) -> None:
        """Refuse a spec that would make the numbers meaningless (ConfigError naming the field)."""
        where = f"endpoint {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"an endpoint needs a name (a non-empty string), got {self.name!r}")
        for name in ("slots", "server_concurrency", "degrade_after", "dead_after"):
            _int_at_least_1(f"{where}: {name}", getattr(self, name))
        for name in ("rate_per_s", "burst", "latency_median_s"):
            _positive(f"{where}: {name}", getattr(self, name))
        if self.burst < 1:  # the bucket would never hold the token one request costs
            raise ConfigError(
                f"{where}: burst must be >= 1 (one request costs one token), got {self.burst!r}"
            )
        for name in ("latency_sigma", "cooldown_s", "phase_s"):
            _non_negative(f"{where}: {name}", getattr(self, name))
        for name in ("tail_p", "error_rate", "storm_p", "storm_error_rate"):
            value = getattr(self, name)
            _non_negative(f"{where}: {name}", value)
            if value > 1:
                raise ConfigError(f"{where}: {name} is a probability, got {value!r}")
        _positive(f"{where}: tail_factor", self.tail_factor)
        for name in ("quota_tokens", "rpm", "tpm"):
            if getattr(self, name) is not None:
                _positive(f"{where}: {name}", getattr(self, name))
        pair = self.tokens_per_request
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise ConfigError(f"{where}: tokens_per_request must be (low, high), got {pair!r}")
        low, high = pair
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in pair) or not 0 <= low <= high:
            raise ConfigError(
                f"{where}: tokens_per_request must be (low, high) with 0 <= low <= high, got {pair!r}"
            )


@dataclass(frozen=True)
class PoolSpec:
    """A pool of the client: a name and the endpoints it holds (one resource per endpoint)."""

    name: str
    endpoints: tuple[str, ...]


@dataclass(frozen=True)
class Outage:
    """A hard outage of the world: every request to ``endpoints`` fails while it lasts.

    It starts at ``start_s`` plus a shift drawn uniformly from ``[0, start_jitter_s]`` keyed by
    (seed, "outage", its index in the scenario), so the endpoints it names go down together and
    at the same moment whatever the traffic; it lasts ``duration_s``. A request that arrives
    during it is answered with a 503 after the scenario's ``refusal_latency_s`` and is never
    admitted (it costs no token and no draw).
    """

    endpoints: tuple[str, ...]
    start_s: float
    duration_s: float
    start_jitter_s: float = 0.0


@dataclass(frozen=True)
class Scenario:
    """A simulated provider world and the client that drives it."""

    name: str
    description: str
    endpoints: tuple[EndpointSpec, ...]
    jobs: int = 3000
    steps: int = 3
    calls: int = 2
    concurrency: int = 12
    horizon_s: float = 600.0
    #: the first seed; ``--seeds N`` runs seed .. seed + N - 1
    seed: int = 1
    retry: Retrying = field(default_factory=Retrying)
    #: capacity cycle shared by every endpoint (each shifted by its ``phase_s``)
    cycle_period_s: float = 120.0
    cycle_trough: float = 0.35
    cycle_peak: float = 1.0
    #: a refusal multiplies the endpoint's refill rate by this (down to the floor); the rate
    #: recovers towards normal with this time constant
    tighten_factor: float = 0.9
    tighten_floor: float = 0.5
    tighten_recover_s: float = 15.0
    #: storms are decided per (seed, endpoint, window of this length)
    storm_window_s: float = 30.0
    #: the client gives up on a request after this long (a ``TimeoutError``)
    request_timeout_s: float = 10.0
    #: how long a refusal (429) takes to arrive
    refusal_latency_s: float = 0.05
    #: algorithms this world cannot exercise: name -> why (run on request, shown N/A)
    unsuited: Mapping[str, str] = field(default_factory=dict)
    #: column order for these algorithms (others follow, sorted)
    order: tuple[str, ...] = ()
    #: the client's pools, each holding some of the endpoints; requests ask the first one (the
    #: task's pool); () is one pool named ``bench`` holding every endpoint
    pools: tuple[PoolSpec, ...] = ()
    #: scheduled hard outages (see ``Outage``)
    outages: tuple[Outage, ...] = ()
    #: a session cache: a request to the endpoint that admitted its job's previous request is
    #: served at this share of its drawn latency (1.0: the world keeps no per-job state)
    warm_factor: float = 1.0
    #: parameters an algorithm is built with in this world: name -> parameters (``failover``
    #: needs the pools to try)
    algorithm_params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: whether the client declares each endpoint's ``rpm``/``tpm`` as its resource's ``limits``
    #: (and asks with a token estimate); False: capacity caps alone
    declare_limits: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "unsuited", MappingProxyType(dict(self.unsuited)))
        params = {name: MappingProxyType(dict(p)) for name, p in dict(self.algorithm_params).items()}
        object.__setattr__(self, "algorithm_params", MappingProxyType(params))

    def check(self) -> None:
        """Refuse an inconsistent scenario when it is registered, not halfway through a run."""
        if not self.name or not isinstance(self.name, str):
            raise ConfigError(f"a scenario needs a name, got {self.name!r}")
        where = f"scenario {self.name!r}"
        if not isinstance(self.description, str):
            raise ConfigError(f"{where}: description must be a string, got {self.description!r}")
        if not self.endpoints:
            raise ConfigError(f"{where}: needs at least one endpoint")
        names = [e.name for e in self.endpoints]
        if len(set(names)) != len(names):
            raise ConfigError(f"{where}: endpoint names must be unique, got {names}")
        for endpoint in self.endpoints:
            endpoint.check()
        for name in ("jobs", "steps", "calls", "concurrency"):
            _int_at_least_1(f"{where}: {name}", getattr(self, name))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"{where}: seed must be an integer, got {self.seed!r}")
        if not isinstance(self.retry, Retrying):
            raise ConfigError(f"{where}: retry must be a Retrying policy, got {type(self.retry).__name__}")
        for name in ("horizon_s", "cycle_period_s", "storm_window_s", "request_timeout_s"):
            _positive(f"{where}: {name}", getattr(self, name))
        _positive(f"{where}: tighten_recover_s", self.tighten_recover_s)
        _non_negative(f"{where}: refusal_latency_s", self.refusal_latency_s)
        _positive(f"{where}: cycle_peak", self.cycle_peak)
        if not 0 < self.cycle_trough <= self.cycle_peak:
            raise ConfigError(f"{where}: needs 0 < cycle_trough <= cycle_peak, got {self.cycle_trough!r}")
        if not 0 < self.tighten_floor <= self.tighten_factor <= 1:
            raise ConfigError(f"{where}: needs 0 < tighten_floor <= tighten_factor <= 1")
        _positive(f"{where}: warm_factor", self.warm_factor)
        self._check_pools(where, set(names))
        for index, outage in enumerate(self.outages):
            at = f"{where}: outage {index}"
            if isinstance(outage.endpoints, str):
                raise ConfigError(f"{at}: endpoints must be a tuple of names, got {outage.endpoints!r}")
            unknown = [e for e in outage.endpoints if e not in names]
            if not outage.endpoints or unknown:
                raise ConfigError(f"{at}: needs endpoints of the scenario, got {list(outage.endpoints)}")
            _non_negative(f"{at}: start_s", outage.start_s)
            _positive(f"{at}: duration_s", outage.duration_s)
            _non_negative(f"{at}: start_jitter_s", outage.start_jitter_s)
            if (
                set(outage.endpoints) == set(names)
                and outage.start_s + outage.start_jitter_s == 0
                and outage.duration_s >= self.horizon_s
            ):
                raise ConfigError(
                    f"{at}: takes every endpoint down for the whole {self.horizon_s:g}s horizon"
                    f" (start_s 0, duration_s {outage.duration_s:g}); no request could ever succeed"
                )
        for algo, why in self.unsuited.items():
            if not isinstance(algo, str) or not algo or not isinstance(why, str):
                raise ConfigError(f"{where}: unsuited maps an algorithm name to why, got {algo!r}: {why!r}")
        for algo, params in self.algorithm_params.items():
            if not isinstance(algo, str) or not algo or "name" in params:
                raise ConfigError(f"{where}: algorithm_params maps an algorithm name to its parameters")

    def _check_pools(self, where: str, endpoints: set[str]) -> None:
        if not self.pools:
            return
        pool_names = [p.name for p in self.pools]
        if not all(isinstance(n, str) and n for n in pool_names) or len(set(pool_names)) != len(pool_names):
            raise ConfigError(f"{where}: pool names must be unique and non-empty, got {pool_names}")
        for p in self.pools:
            if isinstance(p.endpoints, str):
                raise ConfigError(
                    f"{where}: pool {p.name!r}: endpoints must be a tuple of names, got {p.endpoints!r}"
                )
        placed = [e for p in self.pools for e in p.endpoints]
        if any(not p.endpoints for p in self.pools):
            raise ConfigError(f"{where}: every pool needs at least one endpoint")
        if sorted(placed) != sorted(endpoints):
            raise ConfigError(
                f"{where}: every endpoint must be in exactly one pool; endpoints {sorted(endpoints)},"
                f" pools hold {sorted(placed)}"
            )

    @property
    def slots(self) -> int:
        """The client's total capacity (leases at once over every endpoint of every pool)."""
        return sum(e.slots for e in self.endpoints)

    @property
    def combined_rpm(self) -> float | None:
        """The endpoints' requests per minute together, when every one has an ``rpm``."""
        limits = [e.rpm for e in self.endpoints]
        return None if any(x is None for x in limits) else sum(x for x in limits if x is not None)

    def pool_layout(self) -> tuple[PoolSpec, ...]:
        """The pools the client builds, in order (the first one is the one requests ask)."""
        if self.pools:
            return self.pools
        return (PoolSpec(DEFAULT_POOL, tuple(e.name for e in self.endpoints)),)

    def algorithm_spec(self, name: str) -> str | dict[str, Any]:
        """What ``resolve_algorithm`` builds ``name`` from in this world: the name, or a mapping
        with the scenario's parameters for it."""
        params = self.algorithm_params.get(name)
        if not params:
            return name
        return {"name": name, **params}


def _int_at_least_1(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")


def _positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ConfigError(f"{name} must be a positive number, got {value!r}")


def _non_negative(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise ConfigError(f"{name} must be a number >= 0, got {value!r}")


# -- the registry -----------------------------------------------------------------------------

_SCENARIOS: dict[str, Scenario] = {}


def register_scenario(scenario: Scenario, *, replace: bool = False) -> Scenario:
    """Make ``scenario`` available to ``run_bench`` and ``pyattacker bench --scenario``.

    A name that is taken is refused unless ``replace`` is true: two worlds under one name would
    give two sets of numbers under one heading.
    """
    scenario.check()
    if scenario.name in _SCENARIOS and not replace:
        raise ConfigError(f"scenario {scenario.name!r} is already registered (pass replace=True)")
    _SCENARIOS[scenario.name] = scenario
    return scenario


def unregister_scenario(name: str) -> bool:
    """Remove a scenario (tests clean up after themselves); True when it was registered."""
    return _SCENARIOS.pop(name, None) is not None


def scenario_names() -> list[str]:
    return sorted(_SCENARIOS)


def get_scenario(name: str, *, flag: str = "--scenario") -> Scenario:
    """The registered scenario, or a ConfigError naming ``flag`` with a did-you-mean hint."""
    found = _SCENARIOS.get(name)
    if found is not None:
        return found
    known = scenario_names()
    hint = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    maybe = f" (did you mean {hint[0]!r}?)" if hint else ""
    raise ConfigError(f"{flag}: unknown scenario {name!r}{maybe}; known: {', '.join(known) or 'none'}")


# -- the built-in world -----------------------------------------------------------------------

BURSTY_PROVIDER = register_scenario(
    Scenario(
        name=DEFAULT_SCENARIO,
        description=(
            "one pool of three endpoints of one provider whose capacity swings on a 120 s cycle,"
            " with rate limits that tighten when hammered, slow tails and correlated error storms"
        ),
        endpoints=(
            EndpointSpec(
                name="fast-flaky",
                slots=4,
                server_concurrency=6,
                rate_per_s=25.0,
                burst=8.0,
                latency_median_s=0.35,
                latency_sigma=0.5,
                tail_p=0.03,
                tail_factor=8.0,
                error_rate=0.06,
                storm_p=0.15,
                storm_error_rate=0.6,
                quota_tokens=4_000_000,
                phase_s=0.0,
            ),
            EndpointSpec(
                name="slow-steady",
                slots=3,
                server_concurrency=4,
                rate_per_s=5.5,
                burst=4.0,
                latency_median_s=1.4,
                latency_sigma=0.3,
                tail_p=0.01,
                tail_factor=4.0,
                error_rate=0.01,
                storm_p=0.03,
                storm_error_rate=0.5,
                quota_tokens=6_000_000,
                phase_s=40.0,
            ),
            EndpointSpec(
                name="metered",
                slots=3,
                server_concurrency=4,
                rate_per_s=6.5,
                burst=4.0,
                latency_median_s=0.7,
                latency_sigma=0.4,
                tail_p=0.02,
                tail_factor=6.0,
                error_rate=0.02,
                storm_p=0.05,
                storm_error_rate=0.5,
                quota_tokens=1_500_000,
                retry_after_hint=True,
                phase_s=80.0,
            ),
        ),
        jobs=3000,
        steps=3,
        calls=2,
        concurrency=12,
        horizon_s=600.0,
        seed=1,
        retry=Retrying(max_attempts=5, base=0.5, factor=2.0, cap=8.0, jitter="full"),
        unsuited={
            "failover": ("one pool: failover has no other pool to fail over to, so it behaves like wait"),
            "least_busy": (
                "one pool: the pool already picks the least busy endpoint, so it behaves like wait"
            ),
        },
        order=("wait", "backoff", "sticky", "quota_aware", "immediate", "least_busy", "failover"),
    )
)


def _primary(name: str) -> EndpointSpec:
    """An endpoint of ``outage_failover``'s primary pool."""
    return EndpointSpec(
        name=name,
        slots=4,
        server_concurrency=4,
        rate_per_s=15.0,
        burst=8.0,
        latency_median_s=0.4,
        latency_sigma=0.4,
        tail_p=0.02,
        tail_factor=5.0,
        error_rate=0.02,
        # more failures than a 90 s outage can bring (4 slots x one failed batch per 10 s
        # cooldown): the primary is degraded through the outage, never dead, so it comes back
        dead_after=100,
    )


OUTAGE_FAILOVER = register_scenario(
    Scenario(
        name="outage_failover",
        description=(
            "a primary pool of two fast endpoints that go down together for 90 s (every request"
            " a 503) and a backup pool of one slower, metered endpoint from another provider;"
            " requests ask the primary, and only failover can reach the backup"
        ),
        endpoints=(
            _primary("primary-a"),
            _primary("primary-b"),
            EndpointSpec(
                name="backup",
                slots=8,
                server_concurrency=8,
                rate_per_s=8.0,
                burst=5.0,
                latency_median_s=1.2,
                latency_sigma=0.3,
                tail_p=0.01,
                tail_factor=4.0,
                error_rate=0.01,
                quota_tokens=1_000_000,
                retry_after_hint=True,
            ),
        ),
        pools=(PoolSpec("primary", ("primary-a", "primary-b")), PoolSpec("backup", ("backup",))),
        outages=(Outage(("primary-a", "primary-b"), start_s=60.0, duration_s=90.0, start_jitter_s=30.0),),
        jobs=1500,
        steps=3,
        calls=2,
        concurrency=8,
        horizon_s=300.0,
        seed=1,
        retry=Retrying(max_attempts=5, base=0.5, factor=2.0, cap=8.0, jitter="full"),
        # no capacity cycle and no storms: the outage is the only event of this world
        cycle_trough=1.0,
        cycle_peak=1.0,
        algorithm_params={"failover": {"pools": ("primary", "backup")}},
        unsuited={
            "least_busy": (
                "leases only from the pool it is asked on (the primary), where its pick is the"
                " pool's own: it behaves like wait"
            ),
            "sticky": (
                "this world keeps no per-endpoint state and sticky leases only from the primary:"
                " it behaves like wait"
            ),
            "quota_aware": (
                "the primary declares no quotas and quota_aware never looks at the backup pool:"
                " it behaves like wait"
            ),
        },
        order=("wait", "backoff", "failover", "immediate", "sticky", "quota_aware", "least_busy"),
    )
)

CACHE_AFFINITY = register_scenario(
    Scenario(
        name="cache_affinity",
        description=(
            "one pool of four replicas that keep each job's session (a warm KV cache): a request"
            " to the replica that admitted its job's previous request is served 4x faster"
        ),
        endpoints=tuple(
            EndpointSpec(
                name=f"replica-{letter}",
                slots=3,
                server_concurrency=3,
                rate_per_s=20.0,
                burst=10.0,
                latency_median_s=2.0,
                latency_sigma=0.3,
                tail_p=0.01,
                tail_factor=3.0,
                error_rate=0.01,
            )
            for letter in "abcd"
        ),
        jobs=1500,
        steps=2,
        calls=4,
        concurrency=10,
        horizon_s=300.0,
        seed=1,
        retry=Retrying(max_attempts=5, base=0.5, factor=2.0, cap=8.0, jitter="full"),
        cycle_trough=1.0,
        cycle_peak=1.0,
        warm_factor=0.25,
        unsuited={
            "failover": "one pool: failover has no other pool to fail over to, so it behaves like wait",
            "quota_aware": "no quotas declared: every replica scores the same, so it picks like wait",
        },
        order=("wait", "backoff", "sticky", "least_busy", "immediate", "quota_aware", "failover"),
    )
)


def _key(name: str, rpm: float, tpm: float) -> EndpointSpec:
    """A key of ``rate_limited_keys``: the provider's rpm/tpm bind, nothing else does."""
    return EndpointSpec(
        name=name,
        slots=8,
        server_concurrency=64,
        rate_per_s=1000.0,  # the provider's windows are the limit here, not a bucket
        burst=1000.0,
        latency_median_s=0.8,
        latency_sigma=0.3,
        error_rate=0.005,
        tokens_per_request=(500, 1500),
        rpm=rpm,
        tpm=tpm,
    )


def _rate_limited(name: str, declare: bool) -> Scenario:
    how = (
        "the client declares each key's rpm/tpm as its resource's limits"
        if declare
        else "the client knows only its capacity caps (8 leases per key)"
    )
    return Scenario(
        name=name,
        description=(
            "one pool of three API keys limited by the provider to 120/60/30 requests and"
            " 150k/75k/40k tokens per minute (any 60 s), answering 429 with the exact Retry-After;"
            f" {how}"
        ),
        endpoints=(
            _key("key-a", 120.0, 150_000.0),
            _key("key-b", 60.0, 75_000.0),
            _key("key-c", 30.0, 40_000.0),
        ),
        jobs=2500,
        steps=1,
        calls=1,
        concurrency=24,
        horizon_s=600.0,
        seed=1,
        retry=Retrying(max_attempts=6, base=0.5, factor=2.0, cap=30.0, jitter="full"),
        cycle_trough=1.0,
        cycle_peak=1.0,
        declare_limits=declare,
        unsuited={
            "failover": "one pool: failover has no other pool to fail over to, so it behaves like wait"
        },
        order=("wait", "backoff", "least_busy", "quota_aware", "sticky", "immediate", "failover"),
    )


#: the same keys and demand twice: limits declared, and capacity caps alone (compare the two)
RATE_LIMITED_KEYS = register_scenario(_rate_limited("rate_limited_keys", True))
RATE_LIMITED_KEYS_UNDECLARED = register_scenario(_rate_limited("rate_limited_keys_undeclared", False))
