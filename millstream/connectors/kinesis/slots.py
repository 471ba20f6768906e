"""The slots' FIFO queues between the shard readers and ``poll``, and the state of each shard read into one.

One lock guards the queues and every ``OwnedShard``'s mutable fields: readers append under it, ``poll``
takes under it, and the lease keeper marks shards let go under it, so a shard that is let go never
enqueues again and its records not yet handed out can be dropped before its next owner reads them.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Set
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from millstream.connectors.kinesis.errors import KinesisSystemError
from millstream.connectors.kinesis.leases import StoredLease
from millstream.connectors.kinesis.offsets import ShardOffset, ShardPosition
from millstream.model import IncomingMessageEnvelope, SystemStreamPartition

SHARD_ID_HEADER = "kinesis.shard.id"
SEQUENCE_NUMBER_HEADER = "kinesis.sequence.number"
"""Headers of every envelope: the shard and sequence number of its record (the offset may name several)."""


@dataclass(eq=False)
class OwnedShard:
    """A shard this consumer holds the lease of, from taking it until letting it go."""

    stream: str
    shard_id: str
    slot: SystemStreamPartition
    stored: StoredLease
    start: ShardPosition
    renewed_at: float
    checkpointed: int | None = None
    checkpointed_text: str | None = None
    last_enqueued: str | None = None
    ended: bool = False
    reader_done: bool = False
    shedding: bool = False
    active: bool = True
    """False once the consumer let go of the shard: its reader must not enqueue anything more."""
    stop: threading.Event = field(default_factory=threading.Event)
    reader: threading.Thread | None = None

    @property
    def token(self) -> int:
        return self.stored.lease.token

    def drained(self) -> bool:
        """Everything this ownership enqueued is checkpointed (call holding ``SlotQueues.lock``)."""
        if self.last_enqueued is None:
            return True
        return self.checkpointed is not None and self.checkpointed >= int(self.last_enqueued)

    def position(self) -> ShardPosition:
        """Where the next owner should resume: after the checkpoint, else where this ownership started."""
        if self.checkpointed_text is not None:
            return ShardPosition.after_sequence_number(self.checkpointed_text)
        return self.start


class _Slot:
    """One SSP's FIFO of record batches, and the last enqueued entry of each shard mapped to it."""

    __slots__ = ("batches", "count", "entries", "ssp")

    def __init__(self, ssp: SystemStreamPartition) -> None:
        self.ssp = ssp
        self.batches: deque[tuple[str, list[IncomingMessageEnvelope]]] = deque()
        self.count = 0
        self.entries: dict[str, ShardOffset] = {}

    def take(self, limit: int) -> list[IncomingMessageEnvelope]:
        taken: list[IncomingMessageEnvelope] = []
        while self.batches and len(taken) < limit:
            shard_id, batch = self.batches[0]
            room = limit - len(taken)
            if len(batch) <= room:
                self.batches.popleft()
                taken.extend(batch)
            else:
                taken.extend(batch[:room])
                self.batches[0] = (shard_id, batch[room:])
        self.count -= len(taken)
        return taken


class SlotQueues:
    """The slots of one consumer: readers fill them (up to ``buffer_size`` each), ``poll`` empties them.

    A reader or coordinator failure is kept here so that the next ``poll`` raises it: the container
    fails and Spark retries it.
    """

    def __init__(self, system: str, buffer_size: int) -> None:
        self.system = system
        self.buffer_size = buffer_size
        self.lock = threading.Lock()
        self._data_ready = threading.Condition(self.lock)
        self._space_ready = threading.Condition(self.lock)
        self._slots: dict[SystemStreamPartition, _Slot] = {}
        self._failure: BaseException | None = None

    def add(self, ssp: SystemStreamPartition) -> None:
        self._slots[ssp] = _Slot(ssp)

    def __contains__(self, ssp: object) -> bool:
        return ssp in self._slots

    def take(
        self, ssps: Set[SystemStreamPartition], limit: int, timeout: float
    ) -> dict[SystemStreamPartition, list[IncomingMessageEnvelope]]:
        """Up to ``limit`` envelopes of each slot that has some, waiting up to ``timeout`` for any.

        Raises the failure reported by ``fail``, and ``KinesisSystemError`` for an SSP never added.
        """
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                if self._failure is not None:
                    raise self._failure
                result = {}
                for ssp in ssps:
                    slot = self._slots.get(ssp)
                    if slot is None:
                        raise KinesisSystemError(self.system, f"{ssp} was not registered with this consumer")
                    if slot.count:
                        result[ssp] = slot.take(limit)
                if result:
                    self._space_ready.notify_all()
                    return result
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return result
                self._data_ready.wait(remaining)

    def fail(self, error: BaseException) -> None:
        """Make the next ``take`` raise ``error`` (the first one reported wins)."""
        with self.lock:
            if self._failure is None:
                self._failure = error
            self._data_ready.notify_all()

    def wake_all(self) -> None:
        """Wake every waiting reader and poller, so that they notice the consumer stopping."""
        with self.lock:
            self._space_ready.notify_all()
            self._data_ready.notify_all()

    def wait_for_space(self, shard: OwnedShard) -> bool:
        """Block a reader while its slot holds ``buffer_size`` envelopes; False when it must stop."""
        with self.lock:
            slot = self._slots[shard.slot]
            while slot.count >= self.buffer_size:
                if shard.stop.is_set() or not shard.active:
                    return False
                self._space_ready.wait(0.5)
            return not shard.stop.is_set() and shard.active

    def enqueue(self, shard: OwnedShard, records: list[dict[str, Any]]) -> bool:
        """Append a GetRecords batch to the shard's slot; False when the shard was let go meanwhile.

        The envelopes are built outside the lock from a snapshot of the other shards' entries: an
        entry in the snapshot was enqueued before it, so it precedes this batch in the FIFO whatever
        another reader appends meanwhile — every entry of an offset still names a record delivered
        no later than the envelope.
        """
        with self.lock:
            if not shard.active:
                return False
            slot = self._slots[shard.slot]
            others = sorted((s, str(entry)) for s, entry in slot.entries.items() if s != shard.shard_id)
        envelopes, sequence = _envelopes(slot.ssp, shard.shard_id, shard.token, others, records)
        with self.lock:
            if not shard.active:
                return False
            slot.entries[shard.shard_id] = ShardOffset(shard.shard_id, sequence, shard.token)
            slot.batches.append((shard.shard_id, envelopes))
            slot.count += len(envelopes)
            shard.last_enqueued = sequence
            self._data_ready.notify_all()
            return True

    def detach(self, shard: OwnedShard, *, purge: bool) -> None:
        """Stop the shard from enqueueing and forget its entry; ``purge`` drops its batches not yet taken.

        Call holding ``lock``, so that whoever lets the shard go updates its own books atomically with it.
        """
        shard.active = False
        slot = self._slots[shard.slot]
        if purge and slot.batches:
            kept = deque(batch for batch in slot.batches if batch[0] != shard.shard_id)
            slot.count = sum(len(batch) for _, batch in kept)
            slot.batches = kept
        slot.entries.pop(shard.shard_id, None)
        self._space_ready.notify_all()


def _envelopes(
    ssp: SystemStreamPartition, shard_id: str, token: int, others: list[tuple[str, str]], records: list[dict[str, Any]]
) -> tuple[list[IncomingMessageEnvelope], str]:
    """The envelopes of ``records`` and the last sequence number; each offset names every shard of the slot."""
    before = ",".join(text for s, text in others if s < shard_id)
    after = ",".join(text for s, text in others if s > shard_id)
    prefix = f"{before},{shard_id}:" if before else f"{shard_id}:"
    suffix = f"@{token},{after}" if after else f"@{token}"
    shard_header = shard_id.encode()
    envelopes: list[IncomingMessageEnvelope] = []
    append = envelopes.append
    sequence = ""
    for record in records:
        sequence = record["SequenceNumber"]
        data = record["Data"]
        key = record.get("PartitionKey")
        append(
            IncomingMessageEnvelope(
                ssp,
                prefix + sequence + suffix,
                None if key is None else key.encode(),
                data,
                arrival_millis(record.get("ApproximateArrivalTimestamp")),
                {SHARD_ID_HEADER: shard_header, SEQUENCE_NUMBER_HEADER: sequence.encode()},
                len(data),
            )
        )
    return envelopes, sequence


def arrival_millis(arrival: Any) -> int:
    """A record's ApproximateArrivalTimestamp in epoch milliseconds (boto3 gives a datetime, 0 when absent)."""
    if arrival is None:
        return 0
    if isinstance(arrival, datetime):
        return int(arrival.timestamp() * 1000)
    return int(float(arrival) * 1000)


__all__ = [
    "SEQUENCE_NUMBER_HEADER",
    "SHARD_ID_HEADER",
    "OwnedShard",
    "SlotQueues",
    "arrival_millis",
]
