"""Changelog backup: every change is sent to the store's changelog partition as it happens (through
the container's producer, so the commit's producer flush makes it durable); the snapshot is the newest
changelog offset after that flush, the upload has nothing left to do, and there is nothing to clean."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId
from millstream.model import OutgoingMessageEnvelope, SystemStreamPartition
from millstream.storage.backends.base import StoreSpec, TaskBackendContext, TaskBackupManager
from millstream.storage.backends.changelog.marker import ChangelogStateCheckpointMarker, v1_entry
from millstream.storage.errors import StateBackupError
from millstream.storage.kv import ChangelogWriter


class ChangelogTaskBackupManager(TaskBackupManager):
    """Writes every change to the store's changelog partition; a snapshot is the partition's newest offset.

    A snapshot records only a position the system positively gave (an append's acknowledgement, or the
    admin's answer where the producer has none, see ``_newest_offsets``): a failed or timed-out metadata call
    fails the commit (naming the task, store and partition), and so does an answer that cannot be true for
    what this task knows, an empty partition although the task wrote to it since the last snapshot, or a
    newest offset before the one its last snapshot recorded (changelog offsets never go back). A checkpoint
    whose marker said "empty" for a changelog holding records would restore an empty store while the
    input offsets move on: silent state loss."""

    def __init__(self, context: TaskBackendContext) -> None:
        self.context = context
        self.stores: dict[str, SystemStreamPartition] = {}
        for name, spec in context.stores.items():
            self.stores[name] = _changelog_of(context, spec)
        self._known: dict[str, str | None] = {}
        """Per store, the newest changelog offset this attempt's last snapshot recorded (None: empty). Not the
        checkpoint's: a restore may have found the changelog behind it (re-created) and replayed what is there."""
        self._written: set[str] = set()
        """Stores written to since the last snapshot."""

    def init(self, checkpoint: Checkpoint | None) -> None:
        pass

    def store_writer(self, store: str) -> ChangelogWriter | None:
        ssp = self.stores.get(store)
        if ssp is None:
            return None
        producer = self.context.systems.producer(ssp.system)
        send = producer.send
        source = self.context.task_name
        stream = ssp.system_stream
        partition = ssp.partition
        written = self._written

        def write(key: bytes, value: bytes | None) -> None:
            written.add(store)
            send(source, OutgoingMessageEnvelope(stream, value, key, partition=partition))

        return write

    def snapshot(self, checkpoint_id: CheckpointId) -> dict[str, str]:
        newest = self._newest_offsets()
        markers = {}
        for store, ssp in self.stores.items():
            offset = newest[ssp]
            self._check_position(store, ssp, offset)
            markers[store] = ChangelogStateCheckpointMarker(ssp, offset).to_string()
        self._known.update({store: newest[ssp] for store, ssp in self.stores.items()})
        self._written.clear()
        return markers

    def _newest_offsets(self) -> dict[SystemStreamPartition, str | None]:
        """The newest offset of every changelog partition of the task: what the producer's appends returned
        (``SystemProducer.written_offsets``), else, for a store not written since the last snapshot, the
        offset that snapshot recorded (the task claimed the partition: nobody else appends to it), else the
        admin's answer, one metadata call per system. So a commit asks the admin only about partitions it
        has no acknowledged position for, and its cost does not follow the container's other partitions."""
        by_system: dict[str, list[SystemStreamPartition]] = {}
        for ssp in self.stores.values():
            by_system.setdefault(ssp.system, []).append(ssp)
        unchanged = {
            ssp: self._known[store]
            for store, ssp in self.stores.items()
            if store in self._known and store not in self._written
        }
        newest: dict[SystemStreamPartition, str | None] = {}
        for system, ssps in by_system.items():
            newest.update(self._appended(system, ssps))
            unknown = [ssp for ssp in ssps if ssp not in newest and ssp not in unchanged]
            if unknown:
                newest.update(self._asked(system, unknown))
        return {**unchanged, **newest}

    def _appended(self, system: str, ssps: list[SystemStreamPartition]) -> dict[SystemStreamPartition, str]:
        try:
            return self.context.systems.producer(system).written_offsets(ssps)
        except Exception as error:
            raise self._unreadable(ssps, error) from error

    def _asked(self, system: str, ssps: list[SystemStreamPartition]) -> dict[SystemStreamPartition, str | None]:
        try:
            found = self.context.systems.admin(system).get_written_ssp_metadata(ssps)
        except Exception as error:
            raise self._unreadable(ssps, error) from error
        newest: dict[SystemStreamPartition, str | None] = {}
        for ssp in ssps:
            if (metadata := found.get(ssp)) is None:
                raise StateBackupError(
                    f"task '{self.context.task_name}' store(s) {self._stores_of([ssp])}: changelog partition "
                    f"{ssp} does not exist"
                )
            newest[ssp] = metadata.newest_offset
        return newest

    def _unreadable(self, ssps: list[SystemStreamPartition], error: Exception) -> StateBackupError:
        return StateBackupError(
            f"task '{self.context.task_name}': cannot read the newest offset of changelog partition(s) "
            f"{', '.join(str(ssp) for ssp in ssps)} for the snapshot of store(s) {self._stores_of(ssps)}: "
            f"{error}; the commit fails and no checkpoint is written"
        )

    def _check_position(self, store: str, ssp: SystemStreamPartition, offset: str | None) -> None:
        where = f"task '{self.context.task_name}' store '{store}': changelog partition {ssp}"
        known = self._known.get(store)
        if offset is None and store in self._written:
            problem = "reports no records although the task wrote to it since the last snapshot"
        elif offset is not None and known is not None and not _at_or_after(self._compare(ssp), offset, known):
            problem = f"reports newest offset {offset}, before offset {known} the last snapshot recorded"
        else:
            return
        raise StateBackupError(
            f"{where} {problem}: the system's answer cannot be a position of this store; the commit fails and no "
            "checkpoint is written (was the changelog deleted or re-created while the job ran?)"
        )

    def _compare(self, ssp: SystemStreamPartition) -> Callable[[str, str], int | None]:
        return self.context.systems.admin(ssp.system).offset_comparator

    def _stores_of(self, ssps: list[SystemStreamPartition]) -> str:
        return ", ".join(f"'{store}'" for store, ssp in self.stores.items() if ssp in ssps)

    def upload(self, checkpoint_id: CheckpointId, markers: Mapping[str, str]) -> dict[str, str]:
        return dict(markers)

    def cleanup(self, checkpoint_id: CheckpointId, markers: Mapping[str, str]) -> None:
        pass

    def changelog_offsets(
        self, checkpoint_id: CheckpointId, markers: Mapping[str, str]
    ) -> dict[SystemStreamPartition, str]:
        entries = {}
        for store, text in markers.items():
            marker = ChangelogStateCheckpointMarker.parse(text, f"task '{self.context.task_name}' store '{store}'")
            entries[marker.changelog_ssp] = v1_entry(checkpoint_id, marker.changelog_offset)
        return entries


def _changelog_of(context: TaskBackendContext, spec: StoreSpec) -> SystemStreamPartition:
    if spec.changelog is None:
        raise StateBackupError(
            f"task '{context.task_name}' store '{spec.name}' uses the changelog backend but has no "
            f"'stores.{spec.name}.changelog'"
        )
    return spec.changelog


def _at_or_after(compare: Callable[[str, str], int | None], offset: str, floor: str) -> bool:
    order = compare(offset, floor)
    return order is not None and order >= 0
