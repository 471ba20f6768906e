"""Keeps this consumer's share of the shard leases: takes, renews, checkpoints, hands over and finishes them.

A coordinator thread runs a cycle every ``consumer.checkpoint.sync.ms``: it lists the shards (now and
then, or as soon as one finished), heartbeats, scans the lease table, copies the tasks' checkpoints
into the leases it holds, renews them, and balances — taking free or expired leases up to its fair
share and shedding the surplus when other containers appear. Every lease it takes gets a reader thread
(``reader``) that reports back through callbacks; every lease it lets go leaves its slot (``slots``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from millstream.connectors.kinesis.admin import KinesisSystemAdmin
from millstream.connectors.kinesis.allocation import SlotAllocationError, SlotAllocator
from millstream.connectors.kinesis.config import KinesisClients, KinesisSystemConfig
from millstream.connectors.kinesis.errors import KinesisLeaseError
from millstream.connectors.kinesis.lease_setup import LeaseSetup
from millstream.connectors.kinesis.leases import (
    CounterObserver,
    Lease,
    LeaseTable,
    StoredLease,
    balance,
    readable_shards,
)
from millstream.connectors.kinesis.offsets import (
    STARTPOINT_PREFIX,
    ShardPosition,
    StartpointMarker,
    is_sentinel,
    parse_offset,
)
from millstream.connectors.kinesis.reader import ShardReader
from millstream.connectors.kinesis.shards import Shard, ShardLineage
from millstream.connectors.kinesis.slots import OwnedShard, SlotQueues
from millstream.connectors.kinesis.throttling import Backoff, KinesisMetrics
from millstream.contracts.metadata import MetadataStore
from millstream.errors import StreamNotFoundError
from millstream.model import SystemStreamPartition

log = logging.getLogger(__name__)

CommittedOffsets = Callable[[], Iterable[tuple[SystemStreamPartition, str | None]]]
"""The offsets the engine last checkpointed: (SSP, offset) of every task's latest checkpoint. An SSP may
appear more than once (tasks of an earlier generation); lease tokens tell which entry is current."""


@dataclass(frozen=True)
class _Committed:
    token: int
    sequence: int
    text: str


@dataclass(eq=False)
class StreamState:
    """What the keeper knows of one stream: its lease table, slots, shards, leases held and workers seen."""

    stream: str
    table: LeaseTable
    allocator: SlotAllocator
    initial: ShardPosition
    lease_observer: CounterObserver
    worker_observer: CounterObserver
    lineage: ShardLineage | None = None
    listed_at: float = float("-inf")
    relist: bool = False
    owned: dict[str, OwnedShard] = field(default_factory=dict)
    heartbeat_counter: int = 0
    heartbeat_at: float = float("-inf")
    not_now: dict[str, float] = field(default_factory=dict)


class LeaseKeeper:
    """The leases of one consumer's streams. ``owned`` and the allocators are guarded by ``queues.lock``.

    ``stopping`` is the consumer's: once set, the coordinator ends its cycles and reader failures no
    longer fail the consumer. ``committed_offsets`` is called anew on every cycle, never kept.
    """

    def __init__(
        self,
        system: str,
        settings: KinesisSystemConfig,
        clients: KinesisClients,
        admin: KinesisSystemAdmin,
        store: MetadataStore,
        *,
        application: str,
        worker_id: str,
        queues: SlotQueues,
        setup: LeaseSetup,
        committed_offsets: CommittedOffsets,
        initial_positions: Callable[[str], ShardPosition],
        metrics: KinesisMetrics,
        stopping: threading.Event,
    ) -> None:
        self.system = system
        self.settings = settings
        self.clients = clients
        self.admin = admin
        self.store = store
        self.application = application
        self.worker_id = worker_id
        self.queues = queues
        self.setup = setup
        self.committed_offsets = committed_offsets
        self.initial_positions = initial_positions
        self.metrics = metrics
        self.stopping = stopping
        self.lease_duration = settings.lease_duration_ms / 1000
        self.renew_interval = self.lease_duration / 3
        self._streams: dict[str, StreamState] = {}
        self._coordinator: threading.Thread | None = None
        self._take_after = 0.0

    def open_stream(
        self, stream: str, slots: Iterable[SystemStreamPartition], markers: Iterable[StartpointMarker]
    ) -> None:
        """Check that ``stream`` exists, list its shards, and set its leases up (first start, startpoints)."""
        slots = list(slots)
        state = StreamState(
            stream=stream,
            table=LeaseTable(self.store, self.application, self.system, stream),
            allocator=SlotAllocator(stream, slots),
            initial=self.initial_positions(stream),
            lease_observer=CounterObserver(self.lease_duration),
            worker_observer=CounterObserver(self.lease_duration),
        )
        self._streams[stream] = state
        if self.admin.describe_stream(stream) is None:
            raise StreamNotFoundError(self.system, stream, "the Kinesis stream does not exist")
        state.lineage = ShardLineage(self.admin.list_shards(stream))
        state.listed_at = time.monotonic()
        self.setup.prepare(state.table, state.lineage, state.initial, markers)

    def start(self) -> None:
        """Start coordinating; leases are taken only after a short wait, so that containers starting
        together see each other's heartbeats before they share the shards out."""
        self._take_after = time.monotonic() + min(self.renew_interval, 2 * self.settings.checkpoint_sync_ms / 1000)
        self._coordinator = threading.Thread(
            target=self._coordinate, name=f"kinesis-{self.system}-coordinator", daemon=True
        )
        self._coordinator.start()

    def stop(self) -> None:
        """After ``stopping`` was set: stop the readers, copy the last checkpoints, release every lease."""
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
            self._release_all(state, committed)

    def _release_all(self, state: StreamState, committed: Mapping[str, _Committed]) -> None:
        for shard in list(state.owned.values()):
            try:
                self._advance(shard, committed)
                with self.queues.lock:
                    finished = shard.ended and shard.reader_done and shard.drained()
                if finished:
                    self._finish(state, shard)
                else:
                    self._release(state, shard)
            except Exception as error:
                log.warning("Kinesis system '%s': cannot release shard '%s': %s", self.system, shard.shard_id, error)
        try:
            state.table.remove_worker(self.worker_id)
        except Exception as error:
            log.warning("Kinesis system '%s': cannot remove worker record: %s", self.system, error)

    def owned_shards(self) -> dict[str, list[str]]:
        """Stream → the shards this consumer holds leases of."""
        with self.queues.lock:
            return {stream: sorted(state.owned) for stream, state in self._streams.items()}

    def slot_mapping(self) -> dict[SystemStreamPartition, list[str]]:
        """Slot → the shards mapped to it now (several: a shared slot)."""
        with self.queues.lock:
            mapping: dict[SystemStreamPartition, list[str]] = {}
            for state in self._streams.values():
                mapping.update(state.allocator.mapping())
            return mapping

    def _coordinate(self) -> None:
        """Run cycles until stopped. A failing cycle (Kinesis or the metadata store briefly away) is
        retried with backoff; one that keeps failing for ``max(60 s, 6 lease durations)``, or a lease
        table this consumer cannot read, fails the next ``poll``."""
        interval = self.settings.checkpoint_sync_ms / 1000
        backoff = Backoff(self.settings.backoff_initial_ms / 1000, self.settings.backoff_max_ms / 1000)
        patience = max(60.0, 6 * self.lease_duration)
        failing_since: float | None = None
        while not self.stopping.is_set():
            try:
                self._cycle()
                backoff.reset()
                failing_since = None
                wait = interval
            except (KinesisLeaseError, SlotAllocationError) as error:
                self.queues.fail(error)
                return
            except Exception as error:
                now = time.monotonic()
                failing_since = now if failing_since is None else failing_since
                if now - failing_since >= patience:
                    self.queues.fail(error)
                    return
                log.warning("Kinesis system '%s': lease coordination failed, retrying: %s", self.system, error)
                wait = backoff.next_delay()
            if self.stopping.wait(wait):
                return

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
            if ssp not in self.queues or not offset or is_sentinel(offset) or offset.startswith(STARTPOINT_PREFIX):
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

    def _cycle_stream(self, state: StreamState, committed: Mapping[str, _Committed], now: float) -> None:
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
        state: StreamState,
        shard: OwnedShard,
        current: StoredLease | None,
        committed: Mapping[str, _Committed],
        now: float,
    ) -> None:
        """Notice a lost lease; copy the checkpoint; finish, hand over or renew the lease."""
        if current is None or current.data != shard.stored.data:
            self._lose(state, shard, "its lease was taken over or reset")
            return
        advanced = self._advance(shard, committed)
        with self.queues.lock:
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

    def _advance(self, shard: OwnedShard, committed: Mapping[str, _Committed]) -> bool:
        entry = committed.get(shard.shard_id)
        if entry is None or entry.token != shard.token:
            return False
        with self.queues.lock:
            if shard.checkpointed is not None and entry.sequence <= shard.checkpointed:
                return False
            shard.checkpointed = entry.sequence
            shard.checkpointed_text = entry.text
            return True

    def _finish(self, state: StreamState, shard: OwnedShard) -> None:
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

    def _release(self, state: StreamState, shard: OwnedShard) -> None:
        """Hand the lease over: owner cleared, position after the checkpoint (takeable at once)."""
        lease = shard.stored.lease.next(owner=None, position=shard.position())
        if state.table.write(lease, shard.stored.data) is None:
            self._lose(state, shard, "its lease was taken over before it could be handed over")
            return
        self._let_go(state, shard, purge=False)
        if shard.shedding:
            self.metrics.add("leases_shed")

    def _lose(self, state: StreamState, shard: OwnedShard, reason: str) -> None:
        """Another worker (or a startpoint) took the lease: drop what was not handed out yet."""
        self._let_go(state, shard, purge=True)
        self.metrics.add("leases_lost")
        log.warning(
            "Kinesis system '%s' stream '%s': lost shard '%s' (%s); records not yet processed will be read "
            "by its next owner", self.system, state.stream, shard.shard_id, reason,
        )  # fmt: skip

    def _let_go(self, state: StreamState, shard: OwnedShard, *, purge: bool) -> None:
        shard.stop.set()
        with self.queues.lock:
            self.queues.detach(shard, purge=purge)
            state.allocator.release(shard.shard_id)
            state.owned.pop(shard.shard_id, None)

    def _balance(
        self, state: StreamState, stored: Mapping[str, StoredLease], workers: Mapping[str, int], now: float
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

    def _acquire(self, state: StreamState, shard: Shard, current: StoredLease | None, now: float) -> None:
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
        with self.queues.lock:
            slot = state.allocator.allocate(shard.shard_id)
            owned = OwnedShard(state.stream, shard.shard_id, slot, written, written.lease.position, now)
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
        reader = ShardReader(
            self.system,
            owned,
            settings=self.settings,
            client=self.clients.client,
            metrics=self.metrics,
            sink=self.queues,
            on_finished=self._reader_finished,
            on_failed=self._reader_failed,
        )
        owned.reader = threading.Thread(
            target=reader.run, name=f"kinesis-{self.system}-{state.stream}-{shard.shard_id}", daemon=True
        )
        owned.reader.start()

    def _reader_finished(self, shard: OwnedShard, ended: bool) -> None:
        with self.queues.lock:
            shard.reader_done = True
            shard.ended = shard.ended or ended

    def _reader_failed(self, shard: OwnedShard, error: BaseException) -> None:
        self._reader_finished(shard, False)
        if shard.active and not self.stopping.is_set():
            self.queues.fail(error)


__all__ = ["CommittedOffsets", "LeaseKeeper", "StreamState"]
