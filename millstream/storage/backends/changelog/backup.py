"""Changelog backup: every change is sent to the store's changelog partition as it happens (through
the container's producer, so the commit's producer flush makes it durable); the snapshot is the newest
changelog offset after that flush, the upload has nothing left to do, and there is nothing to clean."""

from __future__ import annotations

from collections.abc import Mapping

from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId
from millstream.model import OutgoingMessageEnvelope, SystemStreamPartition
from millstream.storage.backends.base import StoreSpec, TaskBackendContext, TaskBackupManager
from millstream.storage.backends.changelog.marker import ChangelogStateCheckpointMarker, v1_entry
from millstream.storage.errors import StateBackupError
from millstream.storage.kv import ChangelogWriter


class ChangelogTaskBackupManager(TaskBackupManager):
    def __init__(self, context: TaskBackendContext) -> None:
        self.context = context
        self.stores: dict[str, SystemStreamPartition] = {}
        for name, spec in context.stores.items():
            self.stores[name] = _changelog_of(context, spec)

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

        def write(key: bytes, value: bytes | None) -> None:
            send(source, OutgoingMessageEnvelope(stream, value, key, partition=partition))

        return write

    def snapshot(self, checkpoint_id: CheckpointId) -> dict[str, str]:
        markers = {}
        for store, ssp in self.stores.items():
            metadata = self.context.systems.admin(ssp.system).get_written_ssp_metadata([ssp]).get(ssp)
            if metadata is None:
                raise StateBackupError(
                    f"task '{self.context.task_name}' store '{store}': changelog partition {ssp} does not exist"
                )
            markers[store] = ChangelogStateCheckpointMarker(ssp, metadata.newest_offset).to_string()
        return markers

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
