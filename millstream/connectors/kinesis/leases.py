"""Shard leases and per-shard checkpoints, in the job's metadata store (no KCL, no DynamoDB needed).

Each shard of a stream has one lease record: who reads it (``owner``), where reading resumes
(``position``: a checkpoint is ``AFTER_SEQUENCE_NUMBER`` of the last processed record; ``SHARD_END``
once a closed shard was processed to its end), a ``counter`` that every write increments, and a
``token`` that every change of owner (or startpoint reset) increments. Records live in namespace
``kinesis-leases`` under ``<application>/<system>/<stream>/shard/<shardId>``; the application name
(``consumer.application.name``, default ``<job.name>-<job.id>``) scopes them, so a new name starts
from nothing.

Every write is a ``compare_and_put`` against the bytes the writer last read or wrote: two workers can
never both believe they hold a lease, a checkpoint can only be written by the current owner, and an
owner learns it lost a lease when its next write is refused.

**Liveness without synchronized clocks** (KCL's rule): an owner renews its leases (a write that bumps
the counter) every third of ``consumer.lease.duration.ms``; another worker considers a lease expired
when it has *seen* the counter stand still for a whole lease duration on its own monotonic clock.
Workers also keep a heartbeat record per stream (``.../worker/<id>``), which is how they count each
other for balancing. A worker that stops releases its leases (owner cleared: takeable at once); one
that dies loses them after a lease duration.

**Balancing**: each worker aims at ``ceil(E / W)`` of the ``E`` readable shards (not finished, every
listed parent finished) among ``W`` live workers. It takes free or expired leases up to that; it sheds
leases above it — gracefully, by stopping its reader, waiting until what it delivered is checkpointed,
and releasing the lease with that checkpoint — and the most loaded worker sheds one more when some
worker has fewer than ``floor(E / W)``.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from millstream.connectors.kinesis.errors import KinesisLeaseError
from millstream.connectors.kinesis.offsets import ShardPosition
from millstream.connectors.kinesis.shards import ShardLineage
from millstream.contracts.metadata import MetadataStore

LEASE_NAMESPACE = "kinesis-leases"


@dataclass(frozen=True)
class Lease:
    shard_id: str
    owner: str | None
    counter: int
    token: int
    position: ShardPosition
    parents: tuple[str, ...] = ()
    shard_start: str | None = None
    """The shard's starting sequence number: a lease of a deleted and re-created stream's shard of the
    same id does not match the new shard and is ignored."""

    def to_bytes(self) -> bytes:
        return orjson.dumps(
            {
                "shard": self.shard_id,
                "owner": self.owner,
                "counter": self.counter,
                "token": self.token,
                "position": self.position.to_json(),
                "parents": list(self.parents),
                "shard_start": self.shard_start,
                "updated_ms": int(time.time() * 1000),
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Lease:
        try:
            document = orjson.loads(data)
            return cls(
                shard_id=str(document["shard"]),
                owner=document.get("owner"),
                counter=int(document["counter"]),
                token=int(document["token"]),
                position=ShardPosition.from_json(document["position"]),
                parents=tuple(document.get("parents") or ()),
                shard_start=document.get("shard_start"),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            raise KinesisLeaseError("", f"unreadable lease record {where}: {error}") from None

    @property
    def finished(self) -> bool:
        return self.position.is_shard_end

    def next(self, **changes: Any) -> Lease:
        """This lease after one more write (counter + 1) with ``changes``."""
        return replace(self, counter=self.counter + 1, **changes)


@dataclass(frozen=True)
class StoredLease:
    lease: Lease
    data: bytes
    """The exact bytes read: what a ``compare_and_put`` on this lease must expect."""


class LeaseTable:
    """The lease records, startpoint markers and worker heartbeats of one stream of one application."""

    def __init__(self, store: MetadataStore, application: str, system: str, stream: str) -> None:
        self.store = store
        self.system = system
        self.stream = stream
        self.prefix = f"{application}/{system}/{stream}/"

    def shard_key(self, shard_id: str) -> str:
        return f"{self.prefix}shard/{shard_id}"

    def scan(self) -> tuple[dict[str, StoredLease], dict[str, int]]:
        """Every lease of the stream, and every worker heartbeat (worker id → counter)."""
        leases: dict[str, StoredLease] = {}
        workers: dict[str, int] = {}
        shard_prefix = f"{self.prefix}shard/"
        worker_prefix = f"{self.prefix}worker/"
        for key, data in self.store.all(LEASE_NAMESPACE).items():
            if key.startswith(shard_prefix):
                lease = Lease.from_bytes(data, f"'{key}' of stream '{self.stream}'")
                leases[lease.shard_id] = StoredLease(lease, data)
            elif key.startswith(worker_prefix):
                try:
                    workers[key[len(worker_prefix) :]] = int(orjson.loads(data)["counter"])
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    continue
        return leases, workers

    def get(self, shard_id: str) -> StoredLease | None:
        data = self.store.get(LEASE_NAMESPACE, self.shard_key(shard_id))
        if data is None:
            return None
        return StoredLease(Lease.from_bytes(data, f"of shard '{shard_id}' of stream '{self.stream}'"), data)

    def write(self, lease: Lease, expected: bytes | None) -> StoredLease | None:
        """Write ``lease`` if the record still holds ``expected`` (None: absent); None when refused."""
        data = lease.to_bytes()
        key = self.shard_key(lease.shard_id)
        if self.store.compare_and_put(LEASE_NAMESPACE, key, data, {(LEASE_NAMESPACE, key): expected}):
            return StoredLease(lease, data)
        return None

    def heartbeat(self, worker_id: str, counter: int) -> None:
        document = {"counter": counter, "updated_ms": int(time.time() * 1000)}
        self.store.put(LEASE_NAMESPACE, f"{self.prefix}worker/{worker_id}", orjson.dumps(document))

    def remove_worker(self, worker_id: str) -> None:
        self.store.delete(LEASE_NAMESPACE, f"{self.prefix}worker/{worker_id}")

    def marker(self, name: str) -> bytes | None:
        return self.store.get(LEASE_NAMESPACE, f"{self.prefix}marker/{name}")

    def put_marker(self, name: str, document: Mapping[str, Any]) -> None:
        self.store.put(LEASE_NAMESPACE, f"{self.prefix}marker/{name}", orjson.dumps(dict(document)))


@dataclass
class CounterObserver:
    """Tells stale records (leases, heartbeats) by watching their counters on the local monotonic clock.

    A record first seen now counts as fresh: a new worker waits one lease duration before it takes a
    lease whose owner died, exactly as long as any other worker.
    """

    duration: float
    _seen: dict[str, tuple[int, float]] = field(default_factory=dict)

    def observe(self, key: str, counter: int, now: float) -> None:
        seen = self._seen.get(key)
        if seen is None or seen[0] != counter:
            self._seen[key] = (counter, now)

    def expired(self, key: str, now: float) -> bool:
        seen = self._seen.get(key)
        return seen is not None and now - seen[1] >= self.duration

    def stale_for(self, key: str, now: float) -> float:
        """Seconds the counter has stood still (0 for a record never seen)."""
        seen = self._seen.get(key)
        return 0.0 if seen is None else now - seen[1]

    def forget_except(self, keys: Iterable[str]) -> None:
        keep = set(keys)
        for key in [k for k in self._seen if k not in keep]:
            del self._seen[key]


def readable_shards(lineage: ShardLineage, leases: Mapping[str, Lease]) -> list[str]:
    """Shards that may be read now: not finished, and every parent still listed is finished.

    A listed parent without a lease record is not finished: it is read first (it gets a record when
    a worker takes it).
    """
    readable = []
    for shard_id in sorted(lineage.shards):
        lease = leases.get(shard_id)
        if lease is not None and lease.finished:
            continue
        parents_done = all(
            (parent_lease := leases.get(parent)) is not None and parent_lease.finished
            for parent in lineage.listed_parents(shard_id)
        )
        if parents_done:
            readable.append(shard_id)
    return readable


@dataclass(frozen=True)
class BalanceDecision:
    take: list[str]
    shed: list[str]
    target: int


def balance(
    me: str,
    readable: list[str],
    owners: Mapping[str, str | None],
    live_workers: Iterable[str],
    *,
    not_now: Iterable[str] = (),
) -> BalanceDecision:
    """What ``me`` should take and shed, given each readable shard's live owner (None: takeable).

    ``owners`` maps a shard to its owner only while that owner is alive and its lease current; free,
    expired and dead-owner leases map to None. ``not_now``: shards ``me`` must not take this round
    (it just shed them). Deterministic for a given input, so workers looking at the same table agree
    on who sheds.
    """
    workers = set(live_workers) | {me}
    total = len(readable)
    ceiling = math.ceil(total / len(workers)) if total else 0
    floor = total // len(workers)
    counts = {worker: 0 for worker in workers}
    for shard in readable:
        owner = owners.get(shard)
        if owner in counts:
            counts[owner] += 1
    mine = sorted(shard for shard in readable if owners.get(shard) == me)
    skip = set(not_now)
    takeable = [shard for shard in readable if owners.get(shard) is None and shard not in skip]
    takeable.sort(key=lambda shard: hashlib.sha256(f"{me}/{shard}".encode()).digest())  # workers differ
    take = takeable[: max(0, ceiling - len(mine))]
    shed: list[str] = []
    if len(mine) > ceiling:
        shed = mine[ceiling:]
    elif len(mine) > floor and any(count < floor for count in counts.values()):
        most_loaded = max(sorted(workers), key=lambda worker: counts[worker])
        if most_loaded == me and not takeable:
            shed = mine[-1:]
    return BalanceDecision(take, shed, ceiling)
