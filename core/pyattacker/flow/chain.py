"""Pipelines: a named, linear chain of tasks, bound to seeds into content-addressed instances.

``pipeline(name, *tasks)`` builds a template; ``template.map(seeds)`` lazily binds each seed
into a ``PipelineSpec`` whose key is a digest of the chain's identity, the seed's encoded bytes
and the repeat index, so the same seed and chain give the same key in every process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from typing import Any, TypeVar

import msgspec

from pyattacker.digest import blake2b_hasher, digest_bytes, digest_of
from pyattacker.errors import ArtifactCodecError, ConfigError, FatalError, PipelineBuildError, safe_str
from pyattacker.flow.handoff import ControlPlan, Handoff, resolve_control
from pyattacker.flow.retry import Retrying, coerce_retry
from pyattacker.flow.taskspec import Chain, TaskSpec
from pyattacker.store.codecs import CodecRegistry

__all__ = ["Chain", "PipelineSpec", "PipelineTemplate", "SpecStream", "fanout", "pipeline"]


class PipelineSpec(msgspec.Struct, eq=False, gc=False):
    """One pipeline instance: a template bound to one seed (and a repeat index).

    A msgspec Struct rather than a class with ``__init__``: one is built per seed, and a resume
    binds every seed of its source before it can skip one (msgspec builds it in C, without a
    Python ``__init__``). ``eq=False``: compared by identity, as a plain object would be;
    ``gc=False``: a spec refers to its template and its seed, never to anything that
    refers back to it, so the collector need not walk the thousands of specs a run holds.
    """

    template: PipelineTemplate
    seed: Any
    seed_codec: str
    seed_type: str
    seed_bytes: bytes
    key: str
    repeat: int
    seed_key: str | None
    #: the digest of ``seed_bytes`` (empty: computed here; ``bind`` always passes it)
    seed_digest: str = ""

    def __post_init__(self) -> None:
        if not self.seed_digest:
            self.seed_digest = digest_bytes(self.seed_bytes)

    @property
    def pipeline_id(self) -> str:
        return self.key

    @property
    def name(self) -> str:
        return self.template.name

    def __repr__(self) -> str:
        return f"PipelineSpec({self.template.name!r}, key={self.key!r})"


def _check_repeats(repeats: int) -> None:
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ConfigError(f"repeats must be an integer >= 1, got {repeats!r}")


#: what ``_bind_pairs``'s ``bind`` gives for each key: a spec (or None: a spec not kept)
_Bound = TypeVar("_Bound")


def _bind_pairs(
    bind: Callable[[Any, str | None, int, str | None], _Bound],
    pairs: Iterable[tuple[Any, Any]],
    repeats: int,
) -> Iterator[_Bound]:
    """Specs of ``(key, seed)`` pairs (a key is made a string; None: content-addressed); with
    repeats, repeat ``r`` is keyed ``key#r``."""
    if repeats == 1:  # a config's usual source: no range and no key test per seed
        for key_given, seed in pairs:
            key = None if key_given is None else str(key_given)
            yield bind(seed, key, 0, key)
        return
    for key_given, seed in pairs:
        base = None if key_given is None else str(key_given)
        for r in range(repeats):
            key = base if base is None else f"{base}#{r}"
            yield bind(seed, key, r, base)


def _bind_kept_pairs(
    bind: Callable[[Any, str | None, int, str | None], PipelineSpec],
    pairs: Iterable[tuple[Any, Any]],
    repeats: int,
    keep: Callable[[str], bool],
) -> Iterator[PipelineSpec]:
    """``_bind_pairs`` that yields only the specs whose key ``keep`` accepts (one shard's share),
    testing a given key before its seed is bound: the seeds of other shards are never encoded
    or digested here (the shard that owns them does that, and reports their errors). A
    content-addressed key is known only once its seed is bound."""

    def bind_kept(seed: Any, key: str | None, repeat: int, seed_key: str | None) -> PipelineSpec | None:
        if key is not None:
            return bind(seed, key, repeat, seed_key) if keep(key) else None
        spec = bind(seed, None, repeat, seed_key)
        return spec if keep(spec.key) else None

    return filter(None, _bind_pairs(bind_kept, pairs, repeats))


class SpecStream:
    """The specs ``PipelineTemplate.map`` binds: an iterator (one pass, lazy) that also says how
    many it will yield when that is known (``length``; None otherwise). Nothing is bound, and
    no codec looked up, before the first spec is asked for."""

    __slots__ = ("_make", "_specs", "length")

    def __init__(self, make: Callable[[], Iterator[PipelineSpec]], length: int | None) -> None:
        self._make = make
        self._specs: Iterator[PipelineSpec] | None = None
        self.length = length

    def _stream(self) -> Iterator[PipelineSpec]:
        if self._specs is None:
            self._specs = self._make()
        return self._specs

    def __iter__(self) -> Iterator[PipelineSpec]:
        # the binding iterator itself (one pass either way): a run's ``iter()`` then takes each
        # spec without a Python ``__next__`` call per seed
        return self._stream()

    def __next__(self) -> PipelineSpec:
        return next(self._stream())


class PipelineTemplate:
    """A validated chain plus its identity digest; bind seeds with ``bind`` / ``map``."""

    def __init__(
        self,
        name: str,
        tasks: tuple[TaskSpec, ...],
        *,
        tags: Mapping[str, Any] | None = None,
        include_code: bool = True,
        codecs: CodecRegistry | None = None,
        control: ControlPlan | None = None,
    ) -> None:
        self.name = name
        self.tasks = tasks
        self.tags = dict(tags or {})
        self.include_code = include_code
        self._codecs = codecs
        #: the allowed handoffs (None: a plain chain, where a returned ``Handoff`` fails the task)
        self.control = control
        #: pool names ``ctx.acquire(name)`` maps before the lookup (a suite member's bindings)
        self.pool_aliases: dict[str, str] = {}
        identity: list[Any] = [t.fingerprint(include_code) for t in tasks]
        if control is not None:  # only then: a plain chain's digest stays its tasks' alone
            identity.append({"control": control.fingerprint()})
        self.spec_digest = "v2:" + digest_of(identity)

    @property
    def codecs(self) -> CodecRegistry:
        if self._codecs is None:
            self._codecs = CodecRegistry.from_plugins()
        return self._codecs

    def bind(
        self, seed: Any, key: str | None = None, repeat: int = 0, seed_key: str | None = None
    ) -> PipelineSpec:
        return self._binder()(seed, key, repeat, seed_key)

    def _binder(self) -> Callable[..., PipelineSpec]:
        """``bind`` with everything per-template looked up once (``map`` binds millions of seeds)."""
        encode = self.codecs.encode
        known = self.codecs.encoders().get  # ``encode``'s first step, without its call per seed
        # digest_bytes(data) and digest_bytes(f"{spec_digest}|{seed_digest}|{repeat}"), with
        # each hasher set up once and copied (a million seeds pay the set-up once)
        seed_hasher = blake2b_hasher()
        key_hasher = blake2b_hasher(f"{self.spec_digest}|".encode())

        def bind(
            seed: Any, key: str | None = None, repeat: int = 0, seed_key: str | None = None
        ) -> PipelineSpec:
            cls = type(seed)
            entry = known(cls)
            if entry is not None:
                try:
                    data = entry[1](seed)
                except Exception:
                    entry = None  # ``encode`` decides: another codec, or the codec's error
                else:
                    codec, type_name = entry[0], cls.__name__
            if entry is None:
                try:
                    codec, type_name, data = encode(seed)
                except ArtifactCodecError as exc:  # say which pipeline (and key) the seed was for
                    where = f" (key {key!r})" if key is not None else ""
                    raise ArtifactCodecError(f"a seed of pipeline {self.name!r}{where}: {exc}") from exc
            hasher = seed_hasher.copy()
            hasher.update(data)
            seed_digest = hasher.hexdigest()
            if key is None:
                hasher = key_hasher.copy()
                # (the suffix of repeat 0 as a constant: no integer formatted per seed)
                hasher.update((seed_digest + ("|0" if repeat == 0 else f"|{repeat}")).encode())
                key = hasher.hexdigest()
            elif not isinstance(key, str) or not key:
                raise ConfigError(f"pipeline key must be a non-empty string, got {key!r}")
            return PipelineSpec(self, seed, codec, type_name, data, key, repeat, seed_key, seed_digest)

        return bind

    def map(
        self,
        seeds: Iterable[Any],
        repeats: int = 1,
        key_of: Callable[[Any], str] | None = None,
    ) -> SpecStream:
        """Bind every seed lazily (the iterable is consumed once, never materialised). The
        result knows how many specs it holds when ``seeds`` has a length (``SpecStream.length``):
        a run stores it, so ``watch`` can say how much is left."""
        _check_repeats(repeats)
        length = len(seeds) * repeats if isinstance(seeds, Sized) else None
        if repeats == 1 and key_of is None:  # the common case: each seed bound by ``map`` in C
            return SpecStream(lambda: map(self._binder(), seeds), length)
        return SpecStream(lambda: self._map(seeds, repeats, key_of), length)

    def _map(
        self, seeds: Iterable[Any], repeats: int, key_of: Callable[[Any], str] | None
    ) -> Iterator[PipelineSpec]:
        yield from _bind_pairs(
            self._binder(), ((None if key_of is None else key_of(seed), seed) for seed in seeds), repeats
        )

    def map_keyed(
        self,
        pairs: Iterable[tuple[str | None, Any]],
        repeats: int = 1,
        keep: Callable[[str], bool] | None = None,
    ) -> Iterator[PipelineSpec]:
        """Bind ``(key, seed)`` pairs lazily, as a config's source yields them (a None key: the
        content-addressed one). ``map`` with ``key_of``, without a call per seed, and with one
        binder for the whole stream (and no generator of its own around ``_bind_pairs``).
        ``keep``: only the specs whose key it accepts (a shard's share), a given key tested
        before its seed is bound."""
        _check_repeats(repeats)
        if keep is not None:
            return _bind_kept_pairs(self._binder(), pairs, repeats, keep)
        return _bind_pairs(self._binder(), pairs, repeats)

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {
            "name": self.name,
            "spec_digest": self.spec_digest,
            "tasks": [
                {
                    "seq": i,
                    "name": t.name,
                    "target": t.target,
                    "resource": t.resource,
                    "algorithm": t.algorithm
                    if isinstance(t.algorithm, str | dict | type(None))
                    else getattr(t.algorithm, "name", str(t.algorithm)),
                    "timeout_s": t.timeout_s,
                    "retry": t.retry.fingerprint(),
                    "config": t.config,
                    "version": t.version,
                    "factory": t.factory,
                }
                for i, t in enumerate(self.tasks)
            ],
        }
        if self.control is not None:
            described["control"] = self.control.describe()
        return described


def _flatten(items: tuple[Any, ...]) -> tuple[TaskSpec, ...]:
    out: list[TaskSpec] = []
    for item in items:
        if isinstance(item, Chain):
            out.extend(_flatten(item.tasks))
        elif isinstance(item, TaskSpec):
            out.append(item)
        else:
            raise PipelineBuildError(f"pipeline members must be tasks, got {type(item).__name__}: {item!r}")
    return tuple(out)


def pipeline(
    name: str,
    *tasks: Any,
    tags: Mapping[str, Any] | None = None,
    include_code: bool = True,
    codecs: CodecRegistry | None = None,
    control: Mapping[str, Any] | ControlPlan | None = None,
) -> PipelineTemplate:
    """Build a template from tasks (or chains made with ``|``).

    ``control={"edges": {"judge": ["report", "end"]}}`` lets tasks return ``Handoff`` along the
    declared forward edges (see ``pyattacker.flow.handoff``)."""
    if not isinstance(name, str) or not name:
        raise PipelineBuildError(f"pipeline name must be a non-empty string, got {name!r}")
    flat = _flatten(tasks)
    if not flat:
        raise PipelineBuildError(f"pipeline {name!r} has no tasks")
    plan = control
    if plan is not None and not isinstance(plan, ControlPlan):  # a list or a string is refused too
        plan = resolve_control(plan, [t.name for t in flat])
    if plan is not None and plan.names != tuple(t.name for t in flat):
        raise PipelineBuildError(f"pipeline {name!r}: the control plan was resolved for another chain")
    return PipelineTemplate(name, flat, tags=tags, include_code=include_code, codecs=codecs, control=plan)


def _agree(children: tuple[TaskSpec, ...], attr: str) -> Any:
    values = {repr(getattr(c, attr)) for c in children}
    return getattr(children[0], attr) if len(values) == 1 else None


def fanout(
    *children: TaskSpec,
    name: str | None = None,
    on_error: str = "raise",
    retry: Retrying | Mapping[str, Any] | None = None,
) -> TaskSpec:
    """One task that runs ``children`` concurrently on the same input; returns ``{name: value}``.

    Retries apply to the whole group. ``on_error="raise"`` fails the group on the first error;
    ``"collect"`` puts ``{"error": "Type: message"}`` in the failed child's slot instead.
    """
    if not children or not all(isinstance(c, TaskSpec) for c in children):
        raise PipelineBuildError("fanout() needs one or more tasks")
    names = [c.name for c in children]
    if len(set(names)) != len(names):
        raise PipelineBuildError(f"fanout children need distinct names, got {names}")
    if on_error not in ("raise", "collect"):
        raise ConfigError(f"fanout on_error must be 'raise' or 'collect', got {on_error!r}")
    policy = (
        coerce_retry(retry)
        if retry is not None
        else max((c.retry for c in children), key=lambda r: r.max_attempts)
    )

    async def run_children(value: Any, ctx: Any) -> dict[str, Any]:
        async def one(child: TaskSpec) -> Any:
            try:
                result = child.fn(value, ctx) if child.takes_ctx else child.fn(value)
                if asyncio.iscoroutine(result):
                    result = await result
            except SystemExit as exc:
                # asyncio re-raises a SystemExit of a child task out of the event loop (the whole
                # run would die): keep it this child's failure, like in a plain task
                raise RuntimeError(f"fanout child {child.name!r} raised SystemExit({exc.code!r})") from exc
            if type(result) is Handoff:
                raise FatalError(f"fanout child {child.name!r} returned a handoff; not allowed inside fanout")
            return result

        if on_error == "raise":
            results = await asyncio.gather(*(one(c) for c in children))
        else:
            raw = await asyncio.gather(*(one(c) for c in children), return_exceptions=True)
            results = [
                {"error": f"{type(r).__name__}: {safe_str(r)}"} if isinstance(r, BaseException) else r
                for r in raw
            ]
        return dict(zip(names, results, strict=True))

    return TaskSpec(
        run_children,
        name=name or "fanout(" + ",".join(names) + ")",
        resource=_agree(children, "resource"),
        algorithm=_agree(children, "algorithm"),
        timeout_s=_agree(children, "timeout_s"),
        retry=policy,
        children=children,
        on_error=on_error,
    )
