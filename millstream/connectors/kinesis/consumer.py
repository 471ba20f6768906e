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

This module is the façade that wires the pieces: ``slots`` (the queues ``poll`` hands out), ``reader``
(one thread per leased shard), ``lease_setup`` (initial positions and startpoints) and ``lease_keeper``
(the coordinator that takes, renews, balances, hands over and finishes leases).
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Callable, Set
from typing import Any

from millstream.connectors.kinesis.admin import KinesisSystemAdmin
from millstream.connectors.kinesis.config import KinesisClients, KinesisSystemConfig
from millstream.connectors.kinesis.errors import KinesisOffsetError, KinesisSystemError
from millstream.connectors.kinesis.lease_keeper import CommittedOffsets, LeaseKeeper
from millstream.connectors.kinesis.lease_setup import LeaseSetup
from millstream.connectors.kinesis.offsets import (
    STARTPOINT_PREFIX,
    ShardPosition,
    StartpointMarker,
    is_sentinel,
    parse_offset,
)
from millstream.connectors.kinesis.slots import SEQUENCE_NUMBER_HEADER, SHARD_ID_HEADER, SlotQueues
from millstream.connectors.kinesis.throttling import KinesisMetrics
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.metrics import Measurement
from millstream.contracts.systems import SystemConsumer
from millstream.model import IncomingMessageEnvelope, SystemStreamPartition


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
        self._registered: dict[SystemStreamPartition, str] = {}
        self._stopping = threading.Event()
        self._queues = SlotQueues(system, buffer_size)
        self._keeper = LeaseKeeper(
            system,
            settings,
            clients,
            admin,
            store,
            application=application,
            worker_id=self.worker_id,
            queues=self._queues,
            setup=LeaseSetup(system, application, self.worker_id),
            committed_offsets=lambda: self.committed_offsets(),  # the attribute may be replaced before start
            initial_positions=initial_positions,
            metrics=self.metrics,
            stopping=self._stopping,
        )
        self._started = False
        self._stopped = False

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
            markers: list[StartpointMarker] = []
            for ssp in ssps:
                self._queues.add(ssp)
                offset = self._registered[ssp]
                if offset.startswith(STARTPOINT_PREFIX):
                    marker = StartpointMarker.parse(offset)
                    if marker not in markers:
                        markers.append(marker)
            self._keeper.open_stream(stream, ssps, markers)
        self._keeper.start()

    def poll(
        self, ssps: Set[SystemStreamPartition], timeout: float
    ) -> dict[SystemStreamPartition, list[IncomingMessageEnvelope]]:
        """Up to ``consumer.poll.batch.size`` envelopes of each slot that has some, waiting up to ``timeout``.

        Raises the error that stopped a reader or the coordinator (Kinesis refused a read for good,
        the lease table is unreadable...): the container fails and Spark retries it.
        """
        return self._queues.take(ssps, self.settings.poll_batch_size, timeout)

    def stop(self) -> None:
        """Stop reading, copy the last checkpoints to the lease table and release every lease.

        The engine commits before it stops its consumers, so the leases are released with positions
        that include everything this container processed: the next owner starts right after.
        """
        if self._stopped:
            return
        self._stopped = True
        self._stopping.set()
        self._queues.wake_all()
        self._keeper.stop()

    # ---- what tests and operators look at ---------------------------------------------------------

    def owned_shards(self) -> dict[str, list[str]]:
        """Stream → the shards this consumer holds leases of."""
        return self._keeper.owned_shards()

    def slot_mapping(self) -> dict[SystemStreamPartition, list[str]]:
        """Slot → the shards mapped to it now (several: a shared slot)."""
        return self._keeper.slot_mapping()

    def measurements(self) -> list[Measurement]:
        """What the container's metrics read at snapshot time (``Measured``): the shard leases held per
        stream, each held shard's lag behind its tip (``MillisBehindLatest``, in seconds) and the calls
        Kinesis throttled, by operation. Sequence numbers are not offsets one can subtract, so this is
        Kinesis's lag where other systems count messages."""
        system = self.system
        behind = self.metrics.behind_latest()
        values: list[Measurement] = []
        for stream, shards in self.owned_shards().items():
            values.append(("kinesis_shard_leases", "gauge", {"system": system, "stream": stream}, len(shards)))
            for shard in shards:
                if (millis := behind.get((stream, shard))) is not None:
                    labels = {"system": system, "stream": stream, "shard": shard}
                    values.append(("kinesis_lag_seconds", "gauge", labels, millis / 1000))
        for operation, count in self.metrics.throttled_counts().items():
            labels = {"system": system, "operation": operation}
            values.append(("kinesis_throttled_calls", "counter", labels, count))
        return values


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
