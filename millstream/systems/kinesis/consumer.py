"""Reads Kinesis streams through SSP slots, surviving resharding and containers coming and going.

What a container's consumer does, per stream (no KCL daemon, no DynamoDB; see ``leases``):

1. **Registration.** The SSPs it is registered with are its *slots* (``allocation``). Registered
   offsets carry no shard position — per-shard checkpoints in the lease table are the truth —
   except startpoint markers, which it applies once at ``start`` (``offsets``).
2. **Leases.** A coordinator thread lists the shards, renews the leases it holds, takes free or
   expired ones up to its fair share, and sheds the surplus when other containers appear.
3. **Reading.** One reader thread per leased shard calls GetRecords within the shard's read limits
   (``throttling``), backs off when throttled, and appends the records to its slot's FIFO queue. The
   envelope offset names the last enqueued record of every shard mapped to the slot, with the lease
   token; ``poll`` hands the queues out.
4. **Checkpoints.** The engine checkpoints tasks, not shards. The coordinator reads the tasks' last
   checkpoints of this consumer's slots (through the job's checkpoint manager, read-only) and copies,
   for each shard it holds, the newest sequence number carrying its own lease token into the shard's
   lease record. A checkpoint written by the engine is written after the task's output was flushed,
   so a shard checkpoint never runs ahead of processed, flushed records.
5. **Resharding.** When a shard ends (GetRecords returns no next iterator), its reader stops; once
   the shard's checkpoint covers the last record delivered, its lease becomes ``SHARD_END`` and its
   slot is freed. Children are readable only when every listed parent is ``SHARD_END``: every record
   of a parent is processed and checkpointed before any record of a child is read, so each partition
   key's records stay in order across splits and merges.

Delivery is at-least-once: a shard whose lease moves without a graceful hand-over (its container
died) is read again from its last checkpoint by the next owner.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from millstream.errors import StreamNotFoundError
from millstream.metadata.base import MetadataStore
from millstream.model import IncomingMessageEnvelope, SystemStreamPartition
from millstream.systems.base import SystemConsumer
from millstream.systems.kinesis.admin import KinesisSystemAdmin
from millstream.systems.kinesis.allocation import SlotAllocationError, SlotAllocator
from millstream.systems.kinesis.config import KinesisClients, KinesisSystemConfig
from millstream.systems.kinesis.errors import (
    KinesisLeaseError,
    KinesisOffsetError,
    KinesisReadError,
    KinesisSystemError,
)
from millstream.systems.kinesis.leases import (
    CounterObserver,
    Lease,
    LeaseTable,
    StoredLease,
    balance,
    readable_shards,
)
from millstream.systems.kinesis.offsets import (
    STARTPOINT_PREFIX,
    PositionType,
    ShardOffset,
    ShardPosition,
    StartpointMarker,
    is_sentinel,
    parse_offset,
)
from millstream.systems.kinesis.shards import Shard, ShardLineage
from millstream.systems.kinesis.throttling import (
    Backoff,
    KinesisMetrics,
    ShardReadLimiter,
    error_code,
    is_throttling,
    is_transient,
)

log = logging.getLogger(__name__)

SHARD_ID_HEADER = "kinesis.shard.id"
SEQUENCE_NUMBER_HEADER = "kinesis.sequence.number"
"""Headers of every envelope: the shard and sequence number of its record (the offset may name several)."""

CommittedOffsets = Callable[[], Iterable[tuple[SystemStreamPartition, str | None]]]
"""The offsets the engine last checkpointed: (SSP, offset) of every task's latest checkpoint. An SSP may
appear more than once (tasks of an earlier generation); lease tokens tell which entry is current."""


@dataclass(frozen=True)
class _Committed:
    token: int
    sequence: int
    text: str


class _Slot:
    """One SSP's FIFO of record batches, and the last enqueued entry of each shard mapped to it."""

    __slots__ = ("batches", "count", "entries", "ssp")

    def __init__(self, ssp: SystemStreamPartition) -> None:
        self.ssp = ssp
        self.batches: deque[tuple[str, list[IncomingMessageEnvelope]]] = deque()
        self.count = 0
        self.entries: dict[str, ShardOffset] = {}


@dataclass(eq=False)
class _OwnedShard:
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
        """Everything this ownership enqueued is checkpointed (call under the consumer's lock)."""
        if self.last_enqueued is None:
            return True
        return self.checkpointed is not None and self.checkpointed >= int(self.last_enqueued)

    def position(self) -> ShardPosition:
        """Where the next owner should resume: after the checkpoint, else where this ownership started."""
        if self.checkpointed_text is not None:
            return ShardPosition.after_sequence_number(self.checkpointed_text)
        return self.start


@dataclass(eq=False)
class _StreamState:
    stream: str
    table: LeaseTable
    allocator: SlotAllocator
    initial: ShardPosition
    lease_observer: CounterObserver
    worker_observer: CounterObserver
    markers: list[StartpointMarker] = field(default_factory=list)
    lineage: ShardLineage | None = None
    listed_at: float = float("-inf")
    relist: bool = False
    owned: dict[str, _OwnedShard] = field(default_factory=dict)
    heartbeat_counter: int = 0
    heartbeat_at: float = float("-inf")
    not_now: dict[str, float] = field(default_factory=dict)


class KinesisSystemConsumer(SystemConsumer):
    """``SystemConsumer`` of a Kinesis system (see the module docstring). ``poll`` is for one thread."""

    def __init__(
        self,
        system: str,
        settings: KinesisSystemConfig,
        clients: KinesisClients,
        admin: KinesisSystemAdmin,
        store: MetadataStore,
        committed_offsets: CommittedOffsets,
        *,
        application: str,
        initial_positions: Callable[[str], ShardPosition],
        buffer_size: int = 10_000,
        metrics: KinesisMetrics | None = None,
    ) -> None:
        self.system = system
        self.settings = settings
        self.clients = clients
        self.admin = admin
        self.store = store
        self.committed_offsets = committed_offsets
        self.application = application
        self.initial_positions = initial_positions
        self.buffer_size = buffer_size
        self.metrics = metrics or admin.metrics
        self.worker_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.lease_duration = settings.lease_duration_ms / 1000
        self.renew_interval = self.lease_duration / 3
        self._registered: dict[SystemStreamPartition, str] = {}
        self._streams: dict[str, _StreamState] = {}
        self._slots: dict[SystemStreamPartition, _Slot] = {}
        self._lock = threading.Lock()
        self._data_ready = threading.Condition(self._lock)
        self._space_ready = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._coordinator: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._started = False
        self._stopped = False
        self._take_after = 0.0

    # ---- SystemConsumer -------------------------------------------------------------------------

    def register(self, ssp: SystemStreamPartition, offset: str) -> None:
        """Make ``ssp`` a slot of its stream. ``offset`` matters only as a startpoint marker."""
        if ssp.system != self.system:
            raise KinesisSystemError(self.system, f"this consumer cannot read {ssp}")
        if self._started:
            raise KinesisSystemError(self.system, f"cannot register {ssp} after the consumer started")
        if offset.startswith(STARTPOINT_PREFIX):
            try:
                StartpointMarker.parse(offset)
            except ValueError as error:
                raise KinesisOffsetError(self.system, ssp.stream, offset, str(error)) from None
        elif not is_sentinel(offset):
            try:
                parse_offset(offset)
            except ValueError as error:
                raise KinesisOffsetError(self.system, ssp.stream, offset, str(error)) from None
        self._registered[ssp] = offset

    def start(self) -> None:
        """Check the streams, set up their lease tables (first start, startpoints), start coordinating."""
        if self._started:
            return
        self._started = True
        self.store.init()
        by_stream: dict[str, list[SystemStreamPartition]] = {}
        for ssp in self._registered:
            by_stream.setdefault(ssp.stream, []).append(ssp)
        for stream, ssps in sorted(by_stream.items()):
            state = _StreamState(
                stream=stream,
                table=LeaseTable(self.store, self.application, self.system, stream),
                allocator=SlotAllocator(stream, ssps),
                initial=self.initial_positions(stream),
                lease_observer=CounterObserver(self.lease_duration),
                worker_observer=CounterObserver(self.lease_duration),
            )
            for ssp in ssps:
                self._slots[ssp] = _Slot(ssp)
                offset = self._registered[ssp]
                if offset.startswith(STARTPOINT_PREFIX):
                    marker = StartpointMarker.parse(offset)
                    if marker not in state.markers:
                        state.markers.append(marker)
            self._streams[stream] = state
            if self.admin.describe_stream(stream) is None:
                raise StreamNotFoundError(self.system, stream, "the Kinesis stream does not exist")
            state.lineage = ShardLineage(self.admin.list_shards(stream))
            state.listed_at = time.monotonic()
            self._initialize(state)
            for marker in sorted(state.markers, key=lambda m: m.created_ms):
                self._apply_startpoint(state, marker)
        self._take_after = time.monotonic() + min(self.renew_interval, 2 * self.settings.checkpoint_sync_ms / 1000)
        self._coordinator = threading.Thread(
            target=self._coordinate, name=f"kinesis-{self.system}-coordinator", daemon=True
        )
        self._coordinator.start()

    def poll(
        self, ssps: Set[SystemStreamPartition], timeout: float
    ) -> dict[SystemStreamPartition, list[IncomingMessageEnvelope]]:
        """Up to ``consumer.poll.batch.size`` envelopes of each slot that has some, waiting up to ``timeout``.

        Raises the error that stopped a reader or the coordinator (Kinesis refused a read for good,
        the lease table is unreadable...): the container fails and Spark retries it.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                if self._failure is not None:
                    raise self._failure
                result = {}
                for ssp in ssps:
                    slot = self._slots.get(ssp)
                    if slot is None:
                        raise KinesisSystemError(self.system, f"{ssp} was not registered with this consumer")
                    if slot.count:
                        result[ssp] = self._take(slot, self.settings.poll_batch_size)
                if result:
                    self._space_ready.notify_all()
                    return result
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return result
                self._data_ready.wait(remaining)

    def stop(self) -> None:
        """Stop reading, copy the last checkpoints to the lease table and release every lease.

        The engine commits before it stops its consumers, so the leases are released with positions
        that include everything this container processed: the next owner starts right after.
        """
        if self._stopped:
            return
        self._stopped = True
        self._stopping.set()
        with self._lock:
            self._space_ready.notify_all()
            self._data_ready.notify_all()
        if self._coordinator is not None:
            self._coordinator.join(self.settings.stop_timeout_ms / 1000 + 1)
        owned = [shard for state in self._streams.values() for shard in state.owned.values()]
        for shard in owned:
            shard.stop.set()
        deadline = time.monotonic() + self.settings.stop_timeout_ms / 1000
        for shard in owned:
            if shard.reader is not None:
                shard.reader.join(max(0.0, deadline - time.monotonic()))
        try:
            committed = self._committed_by_shard() if owned else {}
        except Exception as error:  # never keep leases because the checkpoints cannot be read
            log.warning("Kinesis system '%s': cannot read the last checkpoints at stop: %s", self.system, error)
            committed = {}
        for state in self._streams.values():
            for shard in list(state.owned.values()):
                try:
                    self._advance(shard, committed)
                    with self._lock:
                        finished = shard.ended and shard.reader_done and shard.drained()
                    if finished:
                        self._finish(state, shard)
                    else:
                        self._release(state, shard)
                except Exception as error:
                    log.warning(
                        "Kinesis system '%s': cannot release shard '%s': %s", self.system, shard.shard_id, error
                    )
            try:
                state.table.remove_worker(self.worker_id)
            except Exception as error:
                log.warning("Kinesis system '%s': cannot remove worker record: %s", self.system, error)

    # ---- what tests and operators look at ---------------------------------------------------------

    def owned_shards(self) -> dict[str, list[str]]:
        """Stream → the shards this consumer holds leases of."""
        with self._lock:
            return {stream: sorted(state.owned) for stream, state in self._streams.items()}

    def slot_mapping(self) -> dict[SystemStreamPartition, list[str]]:
        """Slot → the shards mapped to it now (several: a shared slot)."""
        with self._lock:
            mapping: dict[SystemStreamPartition, list[str]] = {}
            for state in self._streams.values():
                mapping.update(state.allocator.mapping())
            return mapping

    # ---- queues -------------------------------------------------------------------------------------

    def _take(self, slot: _Slot, limit: int) -> list[IncomingMessageEnvelope]:
        taken: list[IncomingMessageEnvelope] = []
        while slot.batches and len(taken) < limit:
            shard_id, batch = slot.batches[0]
            room = limit - len(taken)
            if len(batch) <= room:
                slot.batches.popleft()
                taken.extend(batch)
            else:
                taken.extend(batch[:room])
                slot.batches[0] = (shard_id, batch[room:])
        slot.count -= len(taken)
        return taken

    def _wait_for_space(self, shard: _OwnedShard) -> bool:
        """Block a reader while its slot holds ``buffer_size`` envelopes; False when it must stop."""
        with self._lock:
            slot = self._slots[shard.slot]
            while slot.count >= self.buffer_size:
                if shard.stop.is_set() or not shard.active:
                    return False
                self._space_ready.wait(0.5)
            return not shard.stop.is_set() and shard.active

    def _enqueue(self, shard: _OwnedShard, records: list[dict[str, Any]]) -> bool:
        """Append a GetRecords batch to the shard's slot; False when the shard was let go meanwhile.

        The envelopes are built outside the lock from a snapshot of the other shards' entries: an
        entry in the snapshot was enqueued before it, so it precedes this batch in the FIFO whatever
        another reader appends meanwhile — every entry of an offset still names a record delivered
        no later than the envelope.
        """
        with self._lock:
            if not shard.active:
                return False
            slot = self._slots[shard.slot]
            shard_id = shard.shard_id
            others = sorted((s, str(entry)) for s, entry in slot.entries.items() if s != shard_id)
        ssp = slot.ssp
        token = shard.token
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
                    _millis(record.get("ApproximateArrivalTimestamp")),
                    {SHARD_ID_HEADER: shard_header, SEQUENCE_NUMBER_HEADER: sequence.encode()},
                    len(data),
                )
            )
        with self._lock:
            if not shard.active:
                return False
            slot.entries[shard_id] = ShardOffset(shard_id, sequence, token)
            slot.batches.append((shard_id, envelopes))
            slot.count += len(envelopes)
            shard.last_enqueued = sequence
            self._data_ready.notify_all()
            return True

    # ---- lease table setup --------------------------------------------------------------------------

    def _initialize(self, state: _StreamState) -> None:
        """At the job's first start, give every listed shard a lease at the configured initial position.

        LATEST reads only what arrives from now on, so shards already closed count as finished then.
        Shards appearing later are children of these and start at TRIM_HORIZON.
        """
        if state.table.marker("init") is not None:
            return
        assert state.lineage is not None
        for shard in state.lineage.shards.values():
            position = state.initial
            if position.type is PositionType.LATEST and shard.closed:
                position = ShardPosition.shard_end()
            lease = Lease(shard.shard_id, None, 0, 0, position, shard.parents, shard.starting_sequence_number)
            state.table.write(lease, None)
        state.table.put_marker("init", {"position": state.initial.to_json(), "worker": self.worker_id})
        log.info(
            "Kinesis system '%s' stream '%s': first start of '%s', %d shard(s) from %s",
            self.system, state.stream, self.application, len(state.lineage), state.initial.describe(),
        )  # fmt: skip

    def _apply_startpoint(self, state: _StreamState, marker: StartpointMarker) -> None:
        """Reset shard positions as ``marker`` says, once (a marker record remembers it was applied).

        Oldest, Upcoming and Timestamp reset every listed shard (owners lose their leases: the token
        moves); Specific resets the shards it names. The shards then follow the lineage rules again.
        """
        name = f"startpoint-{marker.identity}"
        if state.table.marker(name) is not None:
            return
        assert state.lineage is not None
        if marker.kind == "specific":
            assert marker.positions is not None
            unknown = sorted(set(marker.positions) - set(state.lineage.shards))
            if unknown:
                raise KinesisSystemError(
                    self.system, f"the Specific startpoint {marker} names shard '{unknown[0]}', which is not listed",
                    stream=state.stream, shard_id=unknown[0],
                )  # fmt: skip
            targets = {shard: ShardPosition.at_sequence_number(seq) for shard, seq in marker.positions.items()}
        else:
            targets = {}
            for shard in state.lineage.shards.values():
                if marker.kind == "oldest":
                    targets[shard.shard_id] = ShardPosition.trim_horizon()
                elif marker.kind == "timestamp":
                    assert marker.timestamp_ms is not None
                    targets[shard.shard_id] = ShardPosition.at_timestamp(marker.timestamp_ms)
                else:
                    targets[shard.shard_id] = ShardPosition.shard_end() if shard.closed else ShardPosition.latest()
        for shard_id, position in sorted(targets.items()):
            self._reset_lease(state, state.lineage.shards[shard_id], position)
        state.table.put_marker(name, {"startpoint": str(marker), "worker": self.worker_id})
        log.info(
            "Kinesis system '%s' stream '%s': applied startpoint %s to %d shard(s)",
            self.system, state.stream, marker, len(targets),
        )  # fmt: skip

    def _reset_lease(self, state: _StreamState, shard: Shard, position: ShardPosition) -> None:
        for _ in range(100):
            current = state.table.get(shard.shard_id)
            if current is None:
                lease = Lease(shard.shard_id, None, 0, 1, position, shard.parents, shard.starting_sequence_number)
            else:
                lease = current.lease.next(
                    owner=None,
                    token=current.lease.token + 1,
                    position=position,
                    shard_start=shard.starting_sequence_number,
                )
            if state.table.write(lease, None if current is None else current.data) is not None:
                return
        raise KinesisSystemError(
            self.system, "cannot reset the lease: it keeps changing", stream=state.stream, shard_id=shard.shard_id
        )

    # ---- coordination -------------------------------------------------------------------------------

    def _coordinate(self) -> None:
        """Run cycles until stopped. A failing cycle (Kinesis or the metadata store briefly away) is
        retried with backoff; one that keeps failing for ``max(60 s, 6 lease durations)``, or a lease
        table this consumer cannot read, fails the next ``poll``."""
        interval = self.settings.checkpoint_sync_ms / 1000
        backoff = Backoff(self.settings.backoff_initial_ms / 1000, self.settings.backoff_max_ms / 1000)
        patience = max(60.0, 6 * self.lease_duration)
        failing_since: float | None = None
        while not self._stopping.is_set():
            try:
                self._cycle()
                backoff.reset()
                failing_since = None
                wait = interval
            except (KinesisLeaseError, SlotAllocationError) as error:
                self._fail(error)
                return
            except Exception as error:
                now = time.monotonic()
                failing_since = now if failing_since is None else failing_since
                if now - failing_since >= patience:
                    self._fail(error)
                    return
                log.warning("Kinesis system '%s': lease coordination failed, retrying: %s", self.system, error)
                wait = backoff.next_delay()
            if self._stopping.wait(wait):
                return

    def _fail(self, error: BaseException) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = error
            self._data_ready.notify_all()

    def _cycle(self) -> None:
        now = time.monotonic()
        any_owned = any(state.owned for state in self._streams.values())
        committed = self._committed_by_shard() if any_owned else {}
        for state in self._streams.values():
            self._cycle_stream(state, committed, now)

    def _committed_by_shard(self) -> dict[str, _Committed]:
        """Per shard, the newest checkpointed sequence number of each slot's offset (by lease token)."""
        best: dict[str, _Committed] = {}
        for ssp, offset in self.committed_offsets():
            if ssp not in self._slots or not offset or is_sentinel(offset) or offset.startswith(STARTPOINT_PREFIX):
                continue
            try:
                entries = parse_offset(offset)
            except ValueError:
                continue
            for shard_id, entry in entries.items():
                if entry.lease_token is None:
                    continue
                sequence = int(entry.sequence_number)
                current = best.get(shard_id)
                if current is None or (entry.lease_token, sequence) > (current.token, current.sequence):
                    best[shard_id] = _Committed(entry.lease_token, sequence, entry.sequence_number)
        return best

    def _cycle_stream(self, state: _StreamState, committed: Mapping[str, _Committed], now: float) -> None:
        if state.relist or now - state.listed_at >= self.settings.shard_sync_ms / 1000 or state.lineage is None:
            state.lineage = ShardLineage(self.admin.list_shards(state.stream))
            state.listed_at = now
            state.relist = False
        if now >= state.heartbeat_at:
            state.heartbeat_counter += 1
            state.table.heartbeat(self.worker_id, state.heartbeat_counter)
            state.heartbeat_at = now + self.renew_interval
        stored, workers = state.table.scan()
        for shard_id, lease in stored.items():
            state.lease_observer.observe(shard_id, lease.lease.counter, now)
        for worker, counter in workers.items():
            state.worker_observer.observe(worker, counter, now)
        state.lease_observer.forget_except(stored)
        state.worker_observer.forget_except(workers)
        for shard in list(state.owned.values()):
            self._maintain(state, shard, stored.get(shard.shard_id), committed, now)
        if now >= self._take_after:
            self._balance(state, stored, workers, now)

    def _maintain(
        self,
        state: _StreamState,
        shard: _OwnedShard,
        current: StoredLease | None,
        committed: Mapping[str, _Committed],
        now: float,
    ) -> None:
        """Notice a lost lease; copy the checkpoint; finish, hand over or renew the lease."""
        if current is None or current.data != shard.stored.data:
            self._lose(state, shard, "its lease was taken over or reset")
            return
        advanced = self._advance(shard, committed)
        with self._lock:
            finished = shard.ended and shard.reader_done and shard.drained()
            handed_over = shard.shedding and shard.reader_done and shard.drained()
        if finished:
            self._finish(state, shard)
        elif handed_over:
            self._release(state, shard)
        elif advanced or now - shard.renewed_at >= self.renew_interval:
            written = state.table.write(shard.stored.lease.next(position=shard.position()), shard.stored.data)
            if written is None:
                self._lose(state, shard, "its lease was taken over or reset")
                return
            shard.stored = written
            shard.renewed_at = now
            if advanced:
                self.metrics.add("checkpoints_written")

    def _advance(self, shard: _OwnedShard, committed: Mapping[str, _Committed]) -> bool:
        entry = committed.get(shard.shard_id)
        if entry is None or entry.token != shard.token:
            return False
        with self._lock:
            if shard.checkpointed is not None and entry.sequence <= shard.checkpointed:
                return False
            shard.checkpointed = entry.sequence
            shard.checkpointed_text = entry.text
            return True

    def _finish(self, state: _StreamState, shard: _OwnedShard) -> None:
        """The shard ended and everything read from it is checkpointed: SHARD_END, free the slot."""
        lease = shard.stored.lease.next(owner=None, position=ShardPosition.shard_end())
        if state.table.write(lease, shard.stored.data) is None:
            self._lose(state, shard, "its lease was taken over before it could be finished")
            return
        self._let_go(state, shard, purge=False)
        state.relist = True
        self.metrics.add("shards_finished")
        log.info(
            "Kinesis system '%s' stream '%s': shard '%s' processed to its end; its children may be read",
            self.system, state.stream, shard.shard_id,
        )  # fmt: skip

    def _release(self, state: _StreamState, shard: _OwnedShard) -> None:
        """Hand the lease over: owner cleared, position after the checkpoint (takeable at once)."""
        lease = shard.stored.lease.next(owner=None, position=shard.position())
        if state.table.write(lease, shard.stored.data) is None:
            self._lose(state, shard, "its lease was taken over before it could be handed over")
            return
        self._let_go(state, shard, purge=False)
        if shard.shedding:
            self.metrics.add("leases_shed")

    def _lose(self, state: _StreamState, shard: _OwnedShard, reason: str) -> None:
        """Another worker (or a startpoint) took the lease: drop what was not handed out yet."""
        self._let_go(state, shard, purge=True)
        self.metrics.add("leases_lost")
        log.warning(
            "Kinesis system '%s' stream '%s': lost shard '%s' (%s); records not yet processed will be read "
            "by its next owner", self.system, state.stream, shard.shard_id, reason,
        )  # fmt: skip

    def _let_go(self, state: _StreamState, shard: _OwnedShard, *, purge: bool) -> None:
        shard.stop.set()
        with self._lock:
            shard.active = False
            slot = self._slots[shard.slot]
            if purge and slot.batches:
                kept = deque(batch for batch in slot.batches if batch[0] != shard.shard_id)
                slot.count = sum(len(batch) for _, batch in kept)
                slot.batches = kept
            slot.entries.pop(shard.shard_id, None)
            state.allocator.release(shard.shard_id)
            state.owned.pop(shard.shard_id, None)
            self._space_ready.notify_all()

    def _balance(
        self, state: _StreamState, stored: Mapping[str, StoredLease], workers: Mapping[str, int], now: float
    ) -> None:
        lineage = state.lineage
        assert lineage is not None
        current = {
            shard_id: item
            for shard_id, item in stored.items()
            if shard_id in lineage.shards
            and item.lease.shard_start in (None, lineage.shards[shard_id].starting_sequence_number)
        }
        readable = readable_shards(lineage, {shard_id: item.lease for shard_id, item in current.items()})
        live = {worker for worker in workers if not state.worker_observer.expired(worker, now)}
        live.add(self.worker_id)
        for worker in workers:
            if state.worker_observer.stale_for(worker, now) > 10 * self.lease_duration:
                state.table.remove_worker(worker)  # a worker that died long ago (killed, no stop)
        owners: dict[str, str | None] = {}
        for shard_id in readable:
            item = current.get(shard_id)
            owner = None if item is None else item.lease.owner
            if shard_id in state.owned:
                owners[shard_id] = "" if state.owned[shard_id].shedding else self.worker_id
            elif owner in (None, self.worker_id) or owner not in live or state.lease_observer.expired(shard_id, now):
                owners[shard_id] = None
            else:
                owners[shard_id] = owner
        for shard_id in [s for s, until in state.not_now.items() if until <= now]:
            del state.not_now[shard_id]
        decision = balance(self.worker_id, readable, owners, live, not_now=state.not_now)
        for shard_id in decision.shed:
            shard = state.owned.get(shard_id)
            if shard is not None and not shard.shedding:
                shard.shedding = True
                shard.stop.set()
                state.not_now[shard_id] = now + 2 * self.lease_duration
                log.info(
                    "Kinesis system '%s' stream '%s': handing shard '%s' over (fair share %d of %d readable "
                    "shards among %d workers)", self.system, state.stream, shard_id, decision.target,
                    len(readable), len(live),
                )  # fmt: skip
        for shard_id in decision.take:
            self._acquire(state, lineage.shards[shard_id], stored.get(shard_id), now)

    def _acquire(self, state: _StreamState, shard: Shard, current: StoredLease | None, now: float) -> None:
        """Take the lease of ``shard``. A shard without a lease is a child born after the job's first
        start (or the shard of a re-created stream whose old lease has another starting sequence
        number): it is read from TRIM_HORIZON."""
        stale = current is not None and current.lease.shard_start not in (None, shard.starting_sequence_number)
        if current is None or stale:
            lease = Lease(
                shard.shard_id, self.worker_id, 0 if current is None else current.lease.counter + 1,
                1 if current is None else current.lease.token + 1, ShardPosition.trim_horizon(), shard.parents,
                shard.starting_sequence_number,
            )  # fmt: skip
        else:
            assert current is not None
            lease = current.lease.next(owner=self.worker_id, token=current.lease.token + 1)
        written = state.table.write(lease, None if current is None else current.data)
        if written is None:
            return  # another worker was faster
        stolen = current is not None and not stale and current.lease.owner is not None
        with self._lock:
            slot = state.allocator.allocate(shard.shard_id)
            owned = _OwnedShard(state.stream, shard.shard_id, slot, written, written.lease.position, now)
            checkpoint = written.lease.position.checkpointed_sequence_number
            if checkpoint is not None:
                owned.checkpointed = checkpoint
                owned.checkpointed_text = written.lease.position.sequence_number
            state.owned[shard.shard_id] = owned
        self.metrics.add("leases_taken")
        if stolen:
            self.metrics.add("leases_stolen")
        shared = len(state.allocator.shards_of(slot)) > 1
        log.info(
            "Kinesis system '%s' stream '%s': reading shard '%s' from %s in slot %d%s",
            self.system, state.stream, shard.shard_id, owned.start.describe(), slot.partition,
            " (shared: its offsets name every shard of the slot)" if shared else "",
        )  # fmt: skip
        reader = _ShardReader(self, owned)
        owned.reader = threading.Thread(
            target=reader.run, name=f"kinesis-{self.system}-{state.stream}-{shard.shard_id}", daemon=True
        )
        owned.reader.start()

    # ---- called by readers --------------------------------------------------------------------------

    def _reader_finished(self, shard: _OwnedShard, ended: bool) -> None:
        with self._lock:
            shard.reader_done = True
            shard.ended = shard.ended or ended

    def _reader_failed(self, shard: _OwnedShard, error: BaseException) -> None:
        self._reader_finished(shard, False)
        if shard.active and not self._stopping.is_set():
            self._fail(error)


class _ShardReader:
    """Reads one leased shard into its slot, within the shard's read limits (one thread each)."""

    def __init__(self, consumer: KinesisSystemConsumer, shard: _OwnedShard) -> None:
        self.consumer = consumer
        self.shard = shard
        settings = consumer.settings
        self.client = consumer.clients.client
        self.limiter = ShardReadLimiter(settings.calls_per_second, settings.bytes_per_second)
        self.backoff = Backoff(settings.backoff_initial_ms / 1000, settings.backoff_max_ms / 1000)
        self.metrics = consumer.metrics
        self.skip_before_ms: int | None = None

    def run(self) -> None:
        ended = False
        try:
            ended = self._read()
        except BaseException as error:
            self.consumer._reader_failed(self.shard, error)
            return
        self.consumer._reader_finished(self.shard, ended)

    def _error(self, detail: str, sequence_number: str | None = None) -> KinesisReadError:
        return KinesisReadError(
            self.consumer.system,
            detail,
            stream=self.shard.stream,
            shard_id=self.shard.shard_id,
            sequence_number=sequence_number,
        )

    def _read(self) -> bool:
        """Read until the shard ends (True) or the reader is told to stop (False)."""
        from botocore.exceptions import BotoCoreError, ClientError

        shard = self.shard
        stop = shard.stop
        settings = self.consumer.settings
        iterator = self._iterator(shard.start)
        if iterator is None:
            return not stop.is_set()
        while not stop.is_set():
            if not self.consumer._wait_for_space(shard):
                return False
            delay = self.limiter.delay()
            if delay > 0:
                self.metrics.add("limited_waits")
                self.metrics.add("limited_seconds", delay)
                if stop.wait(delay):
                    return False
            try:
                response = self.client.get_records(ShardIterator=iterator, Limit=settings.get_records_max)
            except ClientError as error:
                code = error_code(error)
                if is_throttling(error):
                    self.metrics.throttled("GetRecords")
                    self.limiter.record_call(0)
                    stop.wait(self.backoff.next_delay())
                    continue
                if code == "ExpiredIteratorException":
                    self.metrics.add("expired_iterators")
                    resume = (
                        ShardPosition.after_sequence_number(shard.last_enqueued)
                        if shard.last_enqueued is not None
                        else shard.start
                    )
                    iterator = self._iterator(resume)
                    if iterator is None:
                        return not stop.is_set()
                    continue
                if code == "ResourceNotFoundException":
                    log.warning(
                        "Kinesis shard '%s' of '%s' is gone (retention): finished", shard.shard_id, shard.stream
                    )
                    return True
                if is_transient(error):
                    self._transient(error)
                    continue
                raise self._error(f"GetRecords failed: {code}: {error}", shard.last_enqueued) from None
            except BotoCoreError as error:
                self._transient(error)
                continue
            self.backoff.reset()
            records = response.get("Records", [])
            size = 0
            for record in records:
                size += len(record["Data"])
            self.limiter.record_call(size)
            self.metrics.add("get_records_calls")
            if records:
                if self.skip_before_ms is not None:
                    records = self._skip_early(records)
                self.metrics.add("records_read", len(records))
                self.metrics.add("bytes_read", size)
                if records and not self.consumer._enqueue(shard, records):
                    return False
            iterator = response.get("NextShardIterator")
            if iterator is None:
                return True
            if not records and stop.wait(settings.idle_ms / 1000):
                return False
        return False

    def _skip_early(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """AT_TIMESTAMP in the future was read as LATEST: drop records that arrived before it."""
        assert self.skip_before_ms is not None
        kept = [r for r in records if _millis(r.get("ApproximateArrivalTimestamp")) >= self.skip_before_ms]
        if len(kept) < len(records) or not records:
            return kept
        self.skip_before_ms = None
        return kept

    def _transient(self, error: BaseException) -> None:
        self.metrics.add("transient_errors")
        log.warning(
            "Kinesis shard '%s' of '%s': GetRecords failed, retrying: %s", self.shard.shard_id, self.shard.stream, error
        )
        self.shard.stop.wait(self.backoff.next_delay())

    def _iterator(self, position: ShardPosition) -> str | None:
        """A shard iterator at ``position``; None when the shard is gone or the reader stopped."""
        from botocore.exceptions import BotoCoreError, ClientError

        shard = self.shard
        while not shard.stop.is_set():
            arguments: dict[str, Any] = {
                "StreamName": shard.stream,
                "ShardId": shard.shard_id,
                "ShardIteratorType": position.type.value,
            }
            if position.type in (PositionType.AT_SEQUENCE_NUMBER, PositionType.AFTER_SEQUENCE_NUMBER):
                arguments["StartingSequenceNumber"] = position.sequence_number
            elif position.type is PositionType.AT_TIMESTAMP:
                assert position.timestamp_ms is not None
                if position.timestamp_ms > int(time.time() * 1000):
                    arguments["ShardIteratorType"] = "LATEST"
                    self.skip_before_ms = position.timestamp_ms
                else:
                    arguments["Timestamp"] = datetime.fromtimestamp(position.timestamp_ms / 1000, tz=UTC)
            elif position.type is PositionType.SHARD_END:
                return None
            try:
                return str(self.client.get_shard_iterator(**arguments)["ShardIterator"])
            except ClientError as error:
                code = error_code(error)
                if is_throttling(error):
                    self.metrics.throttled("GetShardIterator")
                    shard.stop.wait(self.backoff.next_delay())
                elif is_transient(error):
                    self._transient(error)
                elif code == "ResourceNotFoundException":
                    log.warning(
                        "Kinesis shard '%s' of '%s' is gone (retention): finished", shard.shard_id, shard.stream
                    )
                    return None
                elif code == "InvalidArgumentException" and position.sequence_number is not None:
                    log.error(
                        "Kinesis shard '%s' of '%s': cannot start at %s (%s); starting at TRIM_HORIZON instead: "
                        "records between may have expired", shard.shard_id, shard.stream, position.describe(), error,
                    )  # fmt: skip
                    position = ShardPosition.trim_horizon()
                else:
                    raise self._error(
                        f"GetShardIterator at {position.describe()} failed: {code}: {error}", position.sequence_number
                    ) from None
            except BotoCoreError as error:
                self._transient(error)
        return None


def _millis(arrival: Any) -> int:
    if arrival is None:
        return 0
    if isinstance(arrival, datetime):
        return int(arrival.timestamp() * 1000)
    return int(float(arrival) * 1000)


def committed_offsets_from(manager: Any) -> CommittedOffsets:
    """The ``CommittedOffsets`` of a checkpoint manager: every task's latest checkpointed offsets."""

    started = False

    def read() -> list[tuple[SystemStreamPartition, str | None]]:
        nonlocal started
        if not started:
            manager.start()
            started = True
        return [pair for checkpoint in manager.read_all().values() for pair in checkpoint.offsets.items()]

    return read


__all__ = [
    "SEQUENCE_NUMBER_HEADER",
    "SHARD_ID_HEADER",
    "CommittedOffsets",
    "KinesisSystemConsumer",
    "committed_offsets_from",
]
