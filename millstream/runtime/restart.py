"""The restart strategy of a container: how long a failed container waits before its next attempt, and when
its failures are too frequent to go on (Flink's exponential-delay and failure-rate strategies).

Spark retries a failed container at once and counts its attempts (``spark.task.maxFailures``); it knows
nothing of delays or rates. So each new attempt decides for itself, from a record the previous attempts of
its container left in the metadata store (``restarts/<container id>``, fenced like a checkpoint, so a zombie
attempt cannot rewrite it): a new attempt of the same generation means the previous one failed — SIGKILLed
containers leave nothing else behind — so the failure is counted at the new attempt's start. The record
keeps the failure times still inside the rate interval, the last delay before jitter, and when the last
attempt started running, which tells whether it was stable (``job.container.restart.backoff.reset.ms``).

The decision is a pure function of that record, the settings and a clock, so it is tested with a fake one.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import orjson

from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.contracts.metadata import FencedError, MetadataStore

RESTARTS_NAMESPACE = "restarts"


@dataclass(frozen=True)
class RestartSettings:
    """``job.container.restart.*``."""

    initial_ms: int = 0
    max_ms: int = 60_000
    multiplier: float = 2.0
    jitter: float = 0.1
    reset_ms: int = 300_000
    rate_max: int = 0
    rate_interval_ms: int = 60_000

    @classmethod
    def of(cls, config: Settings) -> RestartSettings:
        job = config.job
        return cls(
            job.container_restart_backoff_initial_ms,
            job.container_restart_backoff_max_ms,
            job.container_restart_backoff_multiplier,
            job.container_restart_backoff_jitter,
            job.container_restart_backoff_reset_ms,
            job.container_restart_failure_rate_max,
            job.container_restart_failure_rate_interval_ms,
        )


@dataclass(frozen=True)
class RestartRecord:
    """What the attempts of one container in one generation leave for the next (``restarts/<container id>``)."""

    generation: int
    restarts: int = 0
    """Attempts after the first: each one followed a failure."""
    failures: list[int] = field(default_factory=list)
    """Times (epoch ms) of the failures still inside the rate interval."""
    backoff_ms: int = 0
    """The last delay before jitter: the next one grows from it."""
    running_from_ms: int = 0
    """When the latest attempt's delay ended and it began to run."""

    def to_bytes(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_bytes(cls, raw: bytes | None) -> RestartRecord | None:
        """The record, or None when absent or unreadable: a restart record is advisory, an unreadable one
        starts the count again rather than failing the container."""
        if raw is None:
            return None
        try:
            value = orjson.loads(raw)
            return cls(
                int(value["generation"]),
                int(value["restarts"]),
                [int(t) for t in value["failures"]],
                int(value["backoff_ms"]),
                int(value["running_from_ms"]),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class RestartDecision:
    record: RestartRecord
    """The record to leave for the next attempt."""
    delay_ms: int
    """How long this attempt waits before it restores (jitter included)."""
    exceeded: str | None = None
    """Why the job must fail instead: the failure-rate limit was exceeded."""


class RestartStrategy:
    """Decides each attempt's delay from the previous attempts' record; ``clock`` returns epoch ms."""

    def __init__(
        self,
        settings: RestartSettings,
        clock: Callable[[], int],
        jitter: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.jitter = jitter

    def on_attempt(self, container_id: str, generation: int, previous: RestartRecord | None) -> RestartDecision:
        """The decision for a new attempt of ``container_id``: its first in ``generation`` runs at once; any later
        one follows a failure, which is counted, and waits a delay that grows while failures follow each other."""
        now = self.clock()
        settings = self.settings
        if previous is None or previous.generation != generation:
            return RestartDecision(RestartRecord(generation, running_from_ms=now), 0)
        failures = [t for t in previous.failures if now - t < settings.rate_interval_ms] + [now]
        stable = now - previous.running_from_ms >= settings.reset_ms
        if stable or previous.backoff_ms == 0:
            backoff = settings.initial_ms
        else:
            backoff = int(min(settings.max_ms, previous.backoff_ms * settings.multiplier))
        backoff = min(backoff, settings.max_ms)
        delay = max(0, round(backoff * (1 + self.jitter(-settings.jitter, settings.jitter))))
        record = RestartRecord(generation, previous.restarts + 1, failures, backoff, now + delay)
        exceeded = None
        if settings.rate_max and len(failures) > settings.rate_max:
            exceeded = (
                f"container {container_id} failed {len(failures)} times within "
                f"{settings.rate_interval_ms} ms, more than job.container.restart.failure.rate.max="
                f"{settings.rate_max} allows (job.container.restart.failure.rate.interval.ms="
                f"{settings.rate_interval_ms})"
            )
        return RestartDecision(record, delay, exceeded)


def read_restarts(store: MetadataStore, container_id: str) -> RestartRecord | None:
    return RestartRecord.from_bytes(store.get(RESTARTS_NAMESPACE, container_id))


def write_restarts(store: MetadataStore, container_id: str, epoch: int, record: RestartRecord) -> None:
    """Leave ``record`` for the next attempt; fenced, so only the container's current attempt writes it."""
    expected = coordination.writer_expectation(record.generation, container_id, epoch)
    if not store.compare_and_put(RESTARTS_NAMESPACE, container_id, record.to_bytes(), expected):
        raise FencedError(f"container {container_id} attempt {epoch} of generation {record.generation} was fenced")
    store.flush()
