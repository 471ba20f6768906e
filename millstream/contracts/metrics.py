"""The metrics contract: counters, gauges and timers, labelled, in a registry per container.

The runtime and users' tasks write to a :class:`MetricsRegistry`; what a registry holds leaves the
container only as a snapshot (:meth:`Registry.snapshot`), so the hot path never formats or sends
anything. With metrics off every container gets :data:`NOOP_METRICS`, whose instruments ignore what
they are told, and the runtime's hot path checks one attribute (``None`` when off) per batch.

A metric is named without prefix or unit suffix (``processed``, ``commit``); the exposition adds
``millstream_``, ``_total`` for counters and ``_seconds`` for timers. Labels are the scope of the
series: ``container``, ``task``, ``stream``, ``partition``, ``store``.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeVar, runtime_checkable

Kind = Literal["counter", "gauge", "timer"]
Labels = tuple[tuple[str, str], ...]
_NAME = re.compile(r"[^a-zA-Z0-9_]")
_Instrument = TypeVar("_Instrument", "Counter", "Gauge", "Timer")


def metric_name(name: str) -> str:
    """``name`` as Prometheus accepts it: letters, digits and underscores, not starting with a digit."""
    cleaned = _NAME.sub("_", name.strip()) or "unnamed"
    return f"_{cleaned}" if cleaned[0].isdigit() else cleaned


class Counter:
    """A count that only grows (messages, bytes, commits)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount


class Gauge:
    """A value that goes up and down (lag, attempt, generation)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = value

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def dec(self, amount: float = 1) -> None:
        self.value -= amount


class Timer:
    """Durations in seconds: how many, their sum and the longest (a Prometheus summary without quantiles).

    Updated under a lock: a commit's asynchronous stage records its duration from a commit thread.
    """

    __slots__ = ("_lock", "count", "max", "sum")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self.max = 0.0
        self._lock = threading.Lock()

    def update(self, seconds: float) -> None:
        with self._lock:
            self.count += 1
            self.sum += seconds
            if seconds > self.max:
                self.max = seconds

    @contextmanager
    def time(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.update(time.perf_counter() - started)


class MetricsRegistry(Protocol):
    """What a task (``context.metrics``) and the runtime register their metrics with."""

    @property
    def enabled(self) -> bool:
        """False for the no-op registry: callers may skip measuring altogether."""
        ...

    def counter(self, name: str, **labels: str) -> Counter: ...

    def gauge(self, name: str, **labels: str) -> Gauge: ...

    def timer(self, name: str, **labels: str) -> Timer: ...

    def scoped(self, **labels: str) -> MetricsRegistry:
        """The same registry, adding ``labels`` to every metric registered through it."""
        ...


Measurement = tuple[str, Literal["counter", "gauge"], Mapping[str, str], float]
"""``(name, kind, labels, value)``: one series a component keeps itself, as it stands now."""


@runtime_checkable
class Measured(Protocol):
    """A component with counts or gauges of its own, read when a snapshot is taken (on the reporter's
    thread), so measuring them costs its hot path nothing: the high-level engine's watermarks per input
    and operator, a Kinesis consumer's lag behind the shard's tip, throttled calls and leases."""

    def measurements(self) -> Iterable[Measurement]:
        """Each series now; a series missing from one call keeps its last value."""
        ...


class _NoopCounter(Counter):
    __slots__ = ()

    def inc(self, amount: float = 1) -> None:
        pass


class _NoopGauge(Gauge):
    __slots__ = ()

    def set(self, value: float) -> None:
        pass

    def inc(self, amount: float = 1) -> None:
        pass

    def dec(self, amount: float = 1) -> None:
        pass


class _NoopTimer(Timer):
    __slots__ = ()

    def update(self, seconds: float) -> None:
        pass


class NoopMetrics:
    """Metrics off: shared instruments that record nothing, so user code needs no ``if``."""

    _counter = _NoopCounter()
    _gauge = _NoopGauge()
    _timer = _NoopTimer()

    @property
    def enabled(self) -> bool:
        return False

    def counter(self, name: str, **labels: str) -> Counter:
        return self._counter

    def gauge(self, name: str, **labels: str) -> Gauge:
        return self._gauge

    def timer(self, name: str, **labels: str) -> Timer:
        return self._timer

    def scoped(self, **labels: str) -> MetricsRegistry:
        return self


NOOP_METRICS: MetricsRegistry = NoopMetrics()


@dataclass(frozen=True)
class Sample:
    """One series at snapshot time; a timer's ``value`` is its sum, with ``count`` and ``max`` beside it."""

    name: str
    kind: Kind
    labels: Labels
    value: float
    count: int = 0
    max: float = 0.0


@dataclass
class _Derived:
    kind: Kind
    read: Callable[[], float]


@dataclass
class Registry:
    """The registry of one container: instruments by (name, labels), plus derived series read at snapshot
    time from counts the runtime keeps anyway (so counting them twice costs the hot path nothing)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    _instruments: dict[tuple[str, Labels], Counter | Gauge | Timer] = field(default_factory=dict)
    _derived: dict[tuple[str, Labels], _Derived] = field(default_factory=dict)
    _before_snapshot: list[Callable[[], None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def enabled(self) -> bool:
        return True

    def counter(self, name: str, **labels: str) -> Counter:
        return self._get(Counter, name, labels)

    def gauge(self, name: str, **labels: str) -> Gauge:
        return self._get(Gauge, name, labels)

    def timer(self, name: str, **labels: str) -> Timer:
        return self._get(Timer, name, labels)

    def scoped(self, **labels: str) -> MetricsRegistry:
        return ScopedRegistry(self, labels)

    def derived(self, name: str, kind: Kind, read: Callable[[], float], **labels: str) -> None:
        """A series whose value ``read`` returns at each snapshot (a counter the runtime already keeps)."""
        with self._lock:
            self._derived[(metric_name(name), self._labels(labels))] = _Derived(kind, read)

    def before_snapshot(self, refresh: Callable[[], None]) -> None:
        """Run ``refresh`` (on the reporter's thread) before each snapshot: gauges worth computing only then."""
        self._before_snapshot.append(refresh)

    def snapshot(self) -> list[Sample]:
        for refresh in list(self._before_snapshot):
            refresh()
        with self._lock:
            instruments = list(self._instruments.items())
            derived = list(self._derived.items())
        samples = [_sample(name, labels, instrument) for (name, labels), instrument in instruments]
        samples.extend(Sample(name, d.kind, labels, float(d.read())) for (name, labels), d in derived)
        return samples

    def _labels(self, labels: Mapping[str, str]) -> Labels:
        merged = {**self.labels, **labels}
        return tuple(sorted((metric_name(key), str(value)) for key, value in merged.items()))

    def _get(self, kind: type[_Instrument], name: str, labels: Mapping[str, str]) -> _Instrument:
        key = (metric_name(name), self._labels(labels))
        instrument = self._instruments.get(key)
        if instrument is None:
            with self._lock:
                instrument = self._instruments.setdefault(key, kind())
        if type(instrument) is not kind:
            raise TypeError(f"metric '{name}' {dict(key[1])} is already a {type(instrument).__name__.lower()}")
        return instrument


class ScopedRegistry:
    """A view of a :class:`Registry` that adds labels, and a name prefix: a task's ``context.metrics`` is
    one with prefix ``user_``, so a user's ``processed`` never merges into the runtime's own series."""

    def __init__(self, registry: Registry, labels: Mapping[str, str], prefix: str = "") -> None:
        self.registry = registry
        self.labels = dict(labels)
        self.prefix = prefix

    @property
    def enabled(self) -> bool:
        return True

    def counter(self, name: str, **labels: str) -> Counter:
        return self.registry.counter(self.prefix + name, **{**self.labels, **labels})

    def gauge(self, name: str, **labels: str) -> Gauge:
        return self.registry.gauge(self.prefix + name, **{**self.labels, **labels})

    def timer(self, name: str, **labels: str) -> Timer:
        return self.registry.timer(self.prefix + name, **{**self.labels, **labels})

    def scoped(self, **labels: str) -> MetricsRegistry:
        return ScopedRegistry(self.registry, {**self.labels, **labels}, self.prefix)


def _sample(name: str, labels: Labels, instrument: Counter | Gauge | Timer) -> Sample:
    if isinstance(instrument, Timer):
        return Sample(name, "timer", labels, instrument.sum, instrument.count, instrument.max)
    kind: Kind = "counter" if isinstance(instrument, Counter) else "gauge"
    return Sample(name, kind, labels, float(instrument.value))
