"""Changelog restore: replay the store's changelog partition up to the checkpointed offset, then revert
every record written after it, so the store equals the checkpoint exactly (transactional state).

Per store, following Samza's ``TransactionalStateTaskRestoreManager``:

* the current directory of a persistent store is always deleted (it may hold uncommitted writes);
* ``stores.<s>.clean.on.container.start`` deletes the checkpoint directories too;
* no checkpointed offset for the store: when the task has a checkpoint that does not know the store
  (a store added to a running job), ``task.transactional.state.retain.existing.state`` (default true)
  keeps what the changelog holds, else it is reverted; when the task has no checkpoint at all, its
  committed state is empty and the whole changelog is reverted (Samza would retain it, and a crash
  before the first commit would then apply the crashed attempt's writes twice);
* a checkpointed offset outside the changelog's ``[oldest, newest]``: full replay, no revert (loudly);
* otherwise the target is the checkpointed offset (the newest, without revert, when the checkpoint is
  older than 0.9 x ``stores.<s>.changelog.min.compaction.lag.ms``); the newest local checkpoint
  directory at or below the target is copied into place (SSTs hard-linked) and only the records after
  it are replayed; then every record after the target is reverted: its key is written back with the
  restored value (a tombstone when absent);
* a local checkpoint directory that cannot be read (a description file that does not parse, a copy that
  does not open or whose entries do not all read back) is deleted with a warning and the whole changelog
  replayed instead: the changelog holds the whole state, so a damaged local copy must not fail the job.

A revert appends records, so restoring again after a crash reverts them again with the same values:
it is idempotent.

Replay and revert read the changelog in bulk where its system's consumer can (``BulkReadingSystemConsumer``:
the embedded log hands over a range of offsets as key and value columns, with no envelope per record), and
the engine writes each batch in one call (``put_columns``); other systems (Kafka, Kinesis) are polled an
envelope at a time, as is whatever follows where a bulk read stops early. The gauge
``store_restored_bulk_records`` says how many records came in bulk.

A replay into a store that starts empty (no local checkpoint directory copied in: a new host, a wiped or
unreadable store) goes through the engine's ``bulk_loader`` where it has one: RocksDB takes keys that do not come
in order into a vector memtable, which sorts once at its flush instead of at every insert
(``millstream.storage.bulk_load``), and reopens the store with its normal options before the revert reads it.
The gauge ``store_restored_vector_memtable_records`` says how many records went that way. A store that starts
from a local checkpoint replays its tail through write batches into its normal memtable, as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from millstream.checkpoint.checkpoint import Checkpoint, CheckpointV1, CheckpointV2
from millstream.contracts.systems import (
    BulkReadingSystemConsumer,
    RecordBatch,
    SystemAdmin,
    SystemConsumer,
    SystemStreamPartitionMetadata,
)
from millstream.errors import MillstreamError
from millstream.model import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStreamPartition
from millstream.storage.backends.base import StoreSpec, TaskBackendContext, TaskRestoreManager
from millstream.storage.backends.changelog.marker import ChangelogStateCheckpointMarker, parse_v1_entry
from millstream.storage.errors import StateRestoreError, StoreError
from millstream.storage.kv import BulkLoader, KeyValueStorageEngine
from millstream.storage.layout import (
    CHECKPOINT_V2_FILE,
    LOCAL_CHECKPOINT_FILES,
    OFFSET_V2_FILE,
    checkpoint_dirs,
    copy_dir,
    delete_checkpoint_dirs,
    delete_path,
    read_checkpoint_file,
    read_offset_file,
)
from millstream.storage.restore_progress import RestoreProgress
from millstream.storage.rocksdb import RocksDbKeyValueStorageEngine

log = logging.getLogger(__name__)

READ_STALL_SECONDS = 60.0
"""How long a changelog read may see no record before the restore fails (the changelog is missing
records it reported)."""


@dataclass
class StoreRestorePlan:
    """What restoring one store does; computed by ``init`` so that tests can check the rules."""

    store: StoreSpec
    ssp: SystemStreamPartition
    start: str | None
    """First changelog offset to replay; None: nothing to replay."""
    target: str | None
    """Last changelog offset to replay (inclusive)."""
    revert_from: str | None
    """First changelog offset to revert (through the newest); None: nothing to revert."""
    newest: str | None
    oldest: str | None = None
    """The changelog's oldest offset: where a full replay starts when the retained directory is unreadable."""
    retained_dir: Path | None = None
    """A local checkpoint directory to copy into place before replaying."""
    delete_checkpoint_dirs: bool = True
    reason: str = ""


class ChangelogTaskRestoreManager(TaskRestoreManager):
    def __init__(self, context: TaskBackendContext, marker_key: str) -> None:
        self.context = context
        self.marker_key = marker_key
        task = context.config.task
        self.transactional = task.transactional_state_restore_enabled
        self.retain_existing = task.transactional_state_retain_existing_state
        self.plans: list[StoreRestorePlan] = []

    def _where(self, store: str) -> str:
        return f"task '{self.context.task_name}' store '{store}'"

    def init(self, checkpoint: Checkpoint | None) -> None:
        self.plans = [self._plan(spec, checkpoint) for spec in self.context.stores.values()]

    def _checkpointed(
        self, spec: StoreSpec, ssp: SystemStreamPartition, checkpoint: Checkpoint | None
    ) -> tuple[bool, str | None, int | None]:
        """(whether the checkpoint records this changelog, its offset, the checkpoint's time in ms)."""
        where = self._where(spec.name)
        if isinstance(checkpoint, CheckpointV2):
            text = checkpoint.state_checkpoint_markers.get(self.marker_key, {}).get(spec.name)
            if text is None:
                return False, None, checkpoint.checkpoint_id.millis
            marker = ChangelogStateCheckpointMarker.parse(text, where)
            if marker.changelog_ssp != ssp:
                raise StateRestoreError(
                    f"{where}: the checkpoint names changelog {marker.changelog_ssp}, but the store's changelog is "
                    f"{ssp} (did stores.{spec.name}.changelog change?)"
                )
            return True, marker.changelog_offset, checkpoint.checkpoint_id.millis
        if isinstance(checkpoint, CheckpointV1):
            if ssp not in checkpoint.offsets:
                return False, None, None
            checkpoint_id, offset = parse_v1_entry(checkpoint.offsets[ssp], where)
            return True, offset, None if checkpoint_id is None else checkpoint_id.millis
        return False, None, None

    def _metadata(self, ssp: SystemStreamPartition) -> SystemStreamPartitionMetadata | None:
        """The changelog partition's offsets as the container read them once it had claimed every task's (the
        producer's answer where it holds the file, the admin's otherwise; None: the partition does not exist). Nothing
        but this attempt writes to a claimed partition, and it writes nothing before its tasks start."""
        return self.context.changelog_metadata.get(ssp)

    def _plan(self, spec: StoreSpec, checkpoint: Checkpoint | None) -> StoreRestorePlan:
        where = self._where(spec.name)
        ssp = spec.changelog
        if ssp is None:
            raise StateRestoreError(f"{where}: the changelog backend needs 'stores.{spec.name}.changelog'")
        admin = self.context.systems.admin(ssp.system)
        metadata = self._metadata(ssp)
        if metadata is None:
            raise StateRestoreError(f"{where}: changelog partition {ssp} does not exist")
        oldest, newest = metadata.oldest_offset, metadata.newest_offset
        recorded, checkpointed, checkpoint_ms = self._checkpointed(spec, ssp, checkpoint)
        compare = admin.offset_comparator
        plan = StoreRestorePlan(spec, ssp, None, None, None, newest, oldest)
        if newest is None or oldest is None:
            if recorded and checkpointed is not None:
                return self._mismatch(
                    plan, f"the checkpoint names changelog offset {checkpointed}, but partition {ssp} is empty"
                )
            plan.reason = "the changelog is empty"
            return plan
        if not self.transactional:
            plan.start, plan.target, plan.reason = oldest, newest, "non-transactional restore: replay everything"
            return plan
        if recorded and checkpointed is None and self._written_before(admin, ssp, oldest, checkpoint_ms):
            problem = (
                f"the checkpoint says changelog partition {ssp} was empty, but it holds records written before "
                f"the checkpoint (from offset {oldest})"
            )
            return self._mismatch(plan, problem)
        if not recorded or checkpointed is None:
            if recorded or checkpoint is None or not self.retain_existing:
                plan.revert_from = oldest
                plan.reason = (
                    "the checkpoint records an empty changelog"
                    if recorded
                    else "the task has no checkpoint"
                    if checkpoint is None
                    else "no checkpointed offset and retain.existing.state=false"
                )
            else:
                plan.start, plan.target = oldest, newest
                plan.reason = "no checkpointed offset: retaining the existing changelog state"
            return plan
        if not (_le(compare, oldest, checkpointed) and _le(compare, checkpointed, newest)):
            log.warning(
                "%s: checkpointed changelog offset %s is outside [%s, %s] of %s; restoring all of it, nothing reverted",
                where, checkpointed, oldest, newest, ssp,
            )  # fmt: skip
            plan.start, plan.target = oldest, newest
            plan.reason = "checkpointed offset outside the changelog"
            return plan
        target = checkpointed
        lag_ms = spec.config.changelog_min_compaction_lag_ms
        now_ms = time.time_ns() // 1_000_000
        if checkpoint_ms is not None and now_ms - checkpoint_ms > 0.9 * lag_ms:
            target = newest
            plan.reason = "checkpoint older than 0.9 x min compaction lag: restoring to the newest record"
        plan.target = target
        plan.start = oldest
        if compare(target, newest) != 0:
            plan.revert_from = admin.offsets_after({ssp: target})[ssp]
        if spec.persistent and not spec.config.clean_on_container_start:
            retained = self._retained_dir(spec, ssp, compare, oldest, target)
            if retained is not None:
                directory, local = retained
                plan.retained_dir = directory
                plan.start = None if compare(local, target) == 0 else admin.offsets_after({ssp: local})[ssp]
        plan.reason = plan.reason or "restoring to the checkpointed offset"
        return plan

    @staticmethod
    def _written_before(admin: SystemAdmin, ssp: SystemStreamPartition, oldest: str, checkpoint_ms: int | None) -> bool:
        """Whether the changelog holds a record older than the checkpoint: the checkpoint's id is taken after
        the task's producers flushed, so every record stamped before it was in the changelog when the
        snapshot was taken, and a marker saying "empty" then is false."""
        if checkpoint_ms is None:
            return False
        first_not_older = admin.offset_for_timestamp(ssp, checkpoint_ms)
        order = admin.offset_comparator(first_not_older, oldest)
        return order is not None and order > 0

    def _mismatch(self, plan: StoreRestorePlan, problem: str) -> StoreRestorePlan:
        """The checkpoint's marker contradicts the changelog: fail, unless the store's
        ``changelog.checkpoint.mismatch`` opts into a reset (an empty store) or a replay of the whole changelog."""
        spec = plan.store
        key = f"stores.{spec.name}.changelog.checkpoint.mismatch"
        policy = spec.config.changelog_checkpoint_mismatch
        if policy == "fail":
            raise StateRestoreError(
                f"{self._where(spec.name)}: {problem}; restoring it would silently give the store other state than "
                f"the checkpoint's. Set '{key}' to 'reset' (start the store empty) or 'replay' (restore everything "
                "the changelog holds) to go on anyway"
            )
        log.warning("%s: %s; %s=%s", self._where(spec.name), problem, key, policy)
        if plan.newest is not None and plan.oldest is not None:
            if policy == "reset":
                plan.revert_from = plan.oldest
            else:
                plan.start, plan.target = plan.oldest, plan.newest
        plan.reason = f"checkpoint and changelog disagree: {key}={policy}"
        return plan

    def _retained_dir(
        self,
        spec: StoreSpec,
        ssp: SystemStreamPartition,
        compare: Callable[[str, str], int | None],
        oldest: str,
        target: str,
    ) -> tuple[Path, str] | None:
        """The local checkpoint directory with the highest changelog offset in ``[oldest, target]``, of those younger
        than ``stores.<s>.changelog.delete.retention.ms``: a key deleted after an older one could have lost its
        tombstone to compaction, and replaying the changelog's tail onto the directory would bring it back."""
        best: tuple[Path, str] | None = None
        retention_ms = spec.config.changelog_delete_retention_ms
        now_ms = time.time_ns() // 1_000_000
        for checkpoint_id, directory in checkpoint_dirs(spec.store_dir, self.context.listing).items():
            if now_ms - checkpoint_id.millis > retention_ms:
                log.info(
                    "%s: local checkpoint %s is older than stores.%s.changelog.delete.retention.ms=%d: not reused",
                    self._where(spec.name), directory, spec.name, retention_ms,
                )  # fmt: skip
                continue
            local = self._local_offset(spec, ssp, directory)
            if local is None or not (_le(compare, oldest, local) and _le(compare, local, target)):
                continue
            if best is None or _le(compare, best[1], local):
                best = (directory, local)
        return best

    def _local_offset(self, spec: StoreSpec, ssp: SystemStreamPartition, directory: Path) -> str | None:
        """The changelog offset a local checkpoint directory holds; None when it does not say (or says it
        unreadably: the directory is then not reused, and deleted by the restore, loudly)."""
        where = f"{self._where(spec.name)} file {directory}"
        try:
            checkpoint = read_checkpoint_file(directory)
            if checkpoint is None and (directory / CHECKPOINT_V2_FILE).exists():
                self._unreadable(spec, directory, f"{CHECKPOINT_V2_FILE} does not parse")
                return None
            if checkpoint is not None:
                text = checkpoint.state_checkpoint_markers.get(self.marker_key, {}).get(spec.name)
                if text is not None:
                    marker = ChangelogStateCheckpointMarker.parse(text, where)
                    if marker.changelog_ssp == ssp:
                        return marker.changelog_offset
            offsets = read_offset_file(directory)
            if offsets is None and (directory / OFFSET_V2_FILE).exists():
                self._unreadable(spec, directory, f"{OFFSET_V2_FILE} does not parse")
            if offsets is None or ssp not in offsets:
                return None
            entry = offsets[ssp]
            if entry is not None and not isinstance(entry, str):
                raise StateRestoreError(f"{where}: {OFFSET_V2_FILE} records {entry!r}, not an offset")
            # The offset itself (Samza's format); directories written before held the V1 entry "<id>:<offset>".
            return parse_v1_entry(entry, where)[1]
        except MillstreamError as error:
            self._unreadable(spec, directory, str(error))
            return None

    def _unreadable(self, spec: StoreSpec, directory: Path, error: str) -> None:
        """Say so loudly: a damaged directory costs a longer restore, and may point at a failing disk."""
        log.warning(
            "%s: local checkpoint directory '%s' is unreadable (%s): not reused, deleted; the changelog restores "
            "the store",
            self._where(spec.name), directory, error,
        )  # fmt: skip

    def restore(self) -> None:
        for plan in self.plans:
            self._restore(plan)

    def _restore(self, plan: StoreRestorePlan) -> None:
        spec = plan.store
        started = time.monotonic()
        if spec.persistent:
            delete_path(spec.store_dir)
            if plan.retained_dir is not None:
                self._copy_retained(plan)
            else:
                delete_checkpoint_dirs(spec.store_dir, listing=self.context.listing)
        engine = self.context.open_engine(spec.name)
        admin = self.context.systems.admin(plan.ssp.system)
        replayed = bulk = loaded = reverted = 0
        task = str(self.context.task_name)
        progress = RestoreProgress(self.context.metrics, task, spec.name, records_expected=_replay_length(plan))
        if plan.start is not None and plan.target is not None:
            # a store that starts empty (no local checkpoint copied in) is filled in bulk where its engine can
            loader = engine.bulk_loader() if plan.retained_dir is None else None
            replayed, bulk, loaded = self._replay(engine, loader, admin, plan, progress)
        self.context.metrics.gauge("store_restored_bulk_records", task=task, store=spec.name).set(bulk)
        self.context.metrics.gauge("store_restored_vector_memtable_records", task=task, store=spec.name).set(loaded)
        if plan.revert_from is not None and plan.newest is not None:
            reverted = self._revert(engine, admin, plan)
            self.reverted += reverted
        progress.finish()
        log.info(
            "%s restored from %s in %.2fs: %d record(s) replayed%s (%d in bulk, %d through a vector memtable), "
            "%d key(s) reverted (%s)",
            self._where(spec.name), plan.ssp, time.monotonic() - started, replayed,
            f" after local checkpoint {plan.retained_dir.name}" if plan.retained_dir else "", bulk, loaded,
            reverted, plan.reason,
        )  # fmt: skip

    def _copy_retained(self, plan: StoreRestorePlan) -> None:
        """Copy the retained local checkpoint directory into place and read all of it back. An unreadable
        copy (a corrupt SST, a lost file) must not fail the job, since the changelog holds the whole state:
        the directory is deleted and the plan becomes a full replay from the changelog's oldest offset (the
        revert that follows is unchanged, so the store still equals the checkpoint exactly)."""
        spec, retained = plan.store, plan.retained_dir
        assert retained is not None
        for directory in checkpoint_dirs(spec.store_dir, self.context.listing).values():
            if directory != retained:
                delete_path(directory)
        try:
            copy_dir(retained, spec.store_dir)
            for name in LOCAL_CHECKPOINT_FILES:
                (spec.store_dir / name).unlink(missing_ok=True)
            _verify_store(spec.store_dir)
        except (StoreError, OSError) as error:
            log.warning(
                "%s: local checkpoint directory '%s' is unreadable (%s): deleting it and restoring the whole "
                "changelog %s instead",
                self._where(spec.name), retained, error, plan.ssp,
            )  # fmt: skip
            delete_path(spec.store_dir)
            delete_path(retained)
            plan.retained_dir = None
            plan.start = plan.oldest
            plan.reason += "; the local checkpoint directory was unreadable: full replay"

    def _replay(
        self,
        engine: KeyValueStorageEngine,
        loader: BulkLoader | None,
        admin: SystemAdmin,
        plan: StoreRestorePlan,
        progress: RestoreProgress,
    ) -> tuple[int, int, int]:
        """Apply the records of ``[plan.start, plan.target]``: each batch's columns handed over as they came, to
        ``loader`` when there is one (the store started empty; its records are all in the engine, open with its
        normal options, once this returns), else in one engine write per batch. The records applied, how many
        of them the system handed over in bulk, and how many took the loader's fast path."""
        count = 0

        def apply(batch: RecordBatch) -> None:
            nonlocal count
            if not len(batch):
                return
            if batch.keys is None:  # a batch of keyless records holds no state
                pass
            elif loader is None:
                engine.put_columns(batch.keys, batch.values)
            else:
                loader.put_columns(batch.keys, batch.values, batch.size)
            count += len(batch)
            progress.advance(len(batch), batch.size)

        assert plan.start is not None and plan.target is not None
        try:
            bulk = self._read(admin, plan, plan.start, plan.target, apply)
            loaded = 0 if loader is None else loader.finish()
        except BaseException:
            if loader is not None:
                loader.abort()
            raise
        return count, bulk, loaded

    def _revert(self, engine: KeyValueStorageEngine, admin: SystemAdmin, plan: StoreRestorePlan) -> int:
        keys: dict[bytes, None] = {}

        def collect(batch: RecordBatch) -> None:
            if batch.keys is not None:  # a record that names no key holds no state to revert
                keys.update((key, None) for key in batch.keys if key is not None)

        assert plan.revert_from is not None and plan.newest is not None
        self._read(admin, plan, plan.revert_from, plan.newest, collect)
        if not keys:
            return 0
        ssp = plan.ssp
        producer = self.context.systems.new_producer(ssp.system)
        try:
            stream = ssp.system_stream
            for key in keys:
                producer.send(
                    self.context.task_name,
                    OutgoingMessageEnvelope(stream, engine.get(key), key, partition=ssp.partition),
                )
            producer.flush(self.context.task_name)
        finally:
            producer.stop()
        return len(keys)

    def _read(
        self,
        admin: SystemAdmin,
        plan: StoreRestorePlan,
        start: str,
        end: str,
        handle: Callable[[RecordBatch], None],
    ) -> int:
        """Hand every changelog record from ``start`` through ``end`` (inclusive) to ``handle``, in batches;
        return how many came in bulk.

        A system whose consumer reads in bulk (``BulkReadingSystemConsumer``: the embedded log) hands over
        its records as columns; where that read stops early (an open transaction holds what follows), or
        for any other system, the rest is polled envelope by envelope (``_poll``)."""
        ssp = plan.ssp
        compare = admin.offset_comparator
        if not _le(compare, start, end):
            return 0
        bulk = 0
        consumer = self.context.systems.new_consumer(ssp.system)
        if isinstance(consumer, BulkReadingSystemConsumer):
            try:
                with closing(consumer.read_range(ssp, start, end)) as batches:
                    for batch in batches:
                        handle(batch)
                        bulk += len(batch)
                        start = batch.next_offset
            finally:
                consumer.stop()
            if not _le(compare, start, end):
                return bulk
            consumer = self.context.systems.new_consumer(ssp.system)
        self._poll(consumer, plan, start, end, handle)
        return bulk

    def _poll(
        self,
        consumer: SystemConsumer,
        plan: StoreRestorePlan,
        start: str,
        end: str,
        handle: Callable[[RecordBatch], None],
    ) -> None:
        """``_read`` by polling: done at a record past ``end``, at ``end`` itself, or when nothing is left to
        read and the consumer's position is past ``end``: on a transactional changelog (Kafka) the last offsets
        may hold no record a reader sees (transaction markers, aborted records)."""
        ssp = plan.ssp
        compare = self.context.systems.admin(ssp.system).offset_comparator
        consumer.register(ssp, start)
        consumer.start()
        try:
            stalled_at = time.monotonic() + READ_STALL_SECONDS
            while True:
                batch = consumer.poll({ssp}, 0.5).get(ssp)
                if not batch:
                    if (position := consumer.position(ssp)) is not None and not _le(compare, position, end):
                        return  # what lies between the last record and ``end`` is no record (a transaction marker)
                    if time.monotonic() > stalled_at:
                        raise StateRestoreError(
                            f"{self._where(plan.store.name)}: changelog {ssp} stopped delivering records before "
                            f"offset {end} (read from {start})"
                        )
                    continue
                stalled_at = time.monotonic() + READ_STALL_SECONDS
                cut = _within(batch, end, compare)
                if cut:
                    handle(_columns(batch[:cut]))
                last = batch[cut - 1] if cut else None
                if cut < len(batch) or (last is not None and compare(last.offset, end) == 0):
                    return
        finally:
            consumer.stop()


def _within(batch: list[IncomingMessageEnvelope], end: str, compare: Callable[[str, str], int | None]) -> int:
    """How many envelopes at the head of ``batch`` are at or before ``end``. A batch holds one partition's
    records in offset order, end-of-stream last, so when its last envelope is in range all are: one
    comparison per batch rather than per record (a per-record comparison was a third of the replay's CPU)."""
    last = batch[-1]
    if not last.is_end_of_stream:
        order = compare(last.offset, end)
        if order is not None and order <= 0:
            return len(batch)
    for index, envelope in enumerate(batch):
        order = compare(envelope.offset, end) if not envelope.is_end_of_stream else 1
        if order is None or order > 0:
            return index
    return len(batch)


def _columns(envelopes: list[IncomingMessageEnvelope]) -> RecordBatch:
    """Polled envelopes as the columns a bulk read hands over. Its ``next_offset`` is the last envelope's own
    offset, not the one after it (which only the system knows): ``_poll`` keeps its own position."""
    return RecordBatch(
        [envelope.key for envelope in envelopes],
        [envelope.message for envelope in envelopes],
        envelopes[-1].offset,
        sum(envelope.size for envelope in envelopes),
    )


def _replay_length(plan: StoreRestorePlan) -> int | None:
    """Records a replay reads at most: its offset range when offsets are numbers (log, Kafka; compaction
    may leave gaps), else unknown."""
    if plan.start is None or plan.target is None:
        return 0
    try:
        return max(0, int(plan.target) - int(plan.start) + 1)
    except ValueError:
        return None


def _verify_store(directory: Path) -> None:
    """Open the copied RocksDB directory on its own and read every entry, so that a corrupt copy is found
    now, while the changelog can still replace it, rather than by the task's first read of a bad block."""
    engine = RocksDbKeyValueStorageEngine(directory)
    try:
        engine.verify()
    finally:
        engine.close()


def _le(compare: Callable[[str, str], int | None], first: str, second: str) -> bool:
    order = compare(first, second)
    return order is not None and order <= 0
