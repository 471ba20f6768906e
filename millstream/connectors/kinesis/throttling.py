"""Staying within Kinesis's per-shard read limits, backing off when throttled, and counting both.

A shard serves at most **5 GetRecords calls per second** and **2 MiB per second** to all readers
together (shared-throughput consumers; enhanced fan-out is not used). ``ShardReadLimiter`` spaces one
reader's calls so that it never asks for more: after a call that returned ``b`` bytes, the next call
waits at least ``1 / calls_per_second`` and at least ``b / bytes_per_second`` seconds — over any
window, the reader stays at or under both limits on average. Other readers of the same stream share
the limits; give each of them a share through ``systems.<s>.consumer.shard.*.per.second``.

When Kinesis throttles anyway (``ProvisionedThroughputExceededException``, another application
reading the shard, or ``LimitExceededException`` on control calls), ``Backoff`` sleeps exponentially
longer with jitter, up to a cap, and resets after a success.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

THROTTLING_ERROR_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "LimitExceededException",
        "ThrottlingException",
        "KMSThrottlingException",
        "RequestLimitExceeded",
    }
)
"""Error codes meaning "too fast, try again later"; anything else is an outage or a real error."""

DEFAULT_CALLS_PER_SECOND = 5.0
DEFAULT_BYTES_PER_SECOND = 2 * 1024 * 1024


class ShardReadLimiter:
    """Spaces the GetRecords calls of one shard reader; not thread-safe (one reader, one limiter)."""

    def __init__(
        self,
        calls_per_second: float = DEFAULT_CALLS_PER_SECOND,
        bytes_per_second: float = DEFAULT_BYTES_PER_SECOND,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if calls_per_second <= 0 or bytes_per_second <= 0:
            raise ValueError("read limits must be positive")
        self.calls_per_second = calls_per_second
        self.bytes_per_second = bytes_per_second
        self._clock = clock
        self._next_call_at = float("-inf")

    def delay(self) -> float:
        """Seconds to wait before the next call is within the limits (0 when it may go now)."""
        return max(0.0, self._next_call_at - self._clock())

    def record_call(self, response_bytes: int) -> None:
        """Account for a call that just returned ``response_bytes`` bytes of record data."""
        now = self._clock()
        self._next_call_at = now + max(1.0 / self.calls_per_second, response_bytes / self.bytes_per_second)


class Backoff:
    """Exponential backoff with full jitter between ``initial`` and ``maximum`` seconds."""

    def __init__(self, initial: float, maximum: float, rng: random.Random | None = None) -> None:
        self.initial = max(initial, 0.001)
        self.maximum = max(maximum, self.initial)
        self.attempts = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        ceiling = min(self.maximum, self.initial * (2**self.attempts))
        self.attempts += 1
        return ceiling / 2 + self._rng.uniform(0, ceiling / 2)

    def reset(self) -> None:
        self.attempts = 0


@dataclass
class KinesisMetrics:
    """Plain counters of a consumer, producer or admin; thread-safe increments, ``snapshot`` to read.

    ``throttled_calls`` counts calls Kinesis refused as too fast (by operation in
    ``throttled_by_operation``); ``limited_waits`` / ``limited_seconds`` how often and how long a
    reader waited on its own limiter before calling — the first means the limits are too high for
    the stream, the second that the job reads as fast as the shard allows.
    """

    get_records_calls: int = 0
    records_read: int = 0
    bytes_read: int = 0
    throttled_calls: int = 0
    limited_waits: int = 0
    limited_seconds: float = 0.0
    expired_iterators: int = 0
    transient_errors: int = 0
    records_written: int = 0
    put_records_calls: int = 0
    records_retried: int = 0
    leases_taken: int = 0
    leases_stolen: int = 0
    leases_lost: int = 0
    leases_shed: int = 0
    shards_finished: int = 0
    checkpoints_written: int = 0
    throttled_by_operation: dict[str, int] = field(default_factory=dict)
    _behind_latest_ms: dict[tuple[str, str], int] = field(default_factory=dict, repr=False, compare=False)
    """(stream, shard) → ``MillisBehindLatest`` of the shard's last GetRecords: how far its reader trails."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, amount: float = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + amount)

    def throttled(self, operation: str) -> None:
        with self._lock:
            self.throttled_calls += 1
            self.throttled_by_operation[operation] = self.throttled_by_operation.get(operation, 0) + 1

    def behind(self, stream: str, shard: str, millis: int) -> None:
        with self._lock:
            self._behind_latest_ms[(stream, shard)] = millis

    def behind_latest(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._behind_latest_ms)

    def throttled_counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self.throttled_by_operation)

    def snapshot(self) -> dict[str, float | dict[str, int]]:
        with self._lock:
            values: dict[str, float | dict[str, int]] = {
                name: getattr(self, name) for name in self.__dataclass_fields__ if not name.startswith("_")
            }
            values["throttled_by_operation"] = dict(self.throttled_by_operation)
            return values


def error_code(error: BaseException) -> str:
    """The AWS error code of a botocore ``ClientError`` (``""`` for anything else)."""
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def is_throttling(error: BaseException) -> bool:
    return error_code(error) in THROTTLING_ERROR_CODES


TRANSIENT_ERROR_CODES = frozenset(
    {"InternalFailure", "InternalServerError", "ServiceUnavailable", "KMSInternalException"}
)


def is_transient(error: BaseException) -> bool:
    """A server-side hiccup worth retrying (5xx); not a throttle, not a client mistake."""
    if error_code(error) in TRANSIENT_ERROR_CODES:
        return True
    response = getattr(error, "response", None)
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) if isinstance(response, dict) else 0
    return isinstance(status, int) and status >= 500


def sleep_unless(event: threading.Event, seconds: float) -> bool:
    """Sleep ``seconds`` or until ``event`` is set; True when the event was set."""
    if seconds <= 0:
        return event.is_set()
    return event.wait(seconds)
