"""``AdjunctDataStoreManager`` (SEP-4): which stores a container's adjunct streams feed, how each is
recovered at start, and how every adjunct message is stored instead of delivered to ``process``.

One manager per container. Partitioned inputs fill one store per task (owner: the task); broadcast
inputs (``task.broadcast.inputs``) fill one store per container (owner: ``container-<id>``), written
once by the container's adjunct loop on behalf of all its tasks and read by each of them.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from millstream.adjunct.extractor import KeyValueExtractor, key_value_extractor
from millstream.adjunct.instances import (
    AdjunctStore,
    AdjunctStoreSpec,
    PlainAdjunctStore,
    VersionedAdjunctStore,
    open_engine_for,
)
from millstream.adjunct.markers import end_of_version_label
from millstream.adjunct.published import download_version, latest_version
from millstream.adjunct.recovery import (
    Found,
    RecordedOffsets,
    check_validity,
    decide,
    resume_offsets,
)
from millstream.checkpoint.offset_manager import OffsetManager, count_before, keep_earliest
from millstream.config.settings import Settings
from millstream.config.views import StoreConfig, StreamSamzaConfig, adjunct_store_names
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.systems import SystemAdmin, SystemStreamPartitionMetadata
from millstream.errors import ConfigError, MillstreamError
from millstream.job_model import JobModel
from millstream.model import IncomingMessageEnvelope, SystemStreamPartition, TaskName
from millstream.plugins import load_object
from millstream.serde.base import Serde, SerdeError
from millstream.serde.registry import SerdeRegistry
from millstream.storage.factory import storage_engine_factory
from millstream.storage.kv import KeyValueStore
from millstream.storage.layout import StoreLayout, delete_path

log = logging.getLogger(__name__)

ADSTORE_OFFSETS_NAMESPACE = "adstore-offsets"
"""Where each adjunct store instance records its positions at every commit: ``<store>/<owner>``."""


class AdjunctDeserializationError(MillstreamError):
    """A message of an adjunct stream could not be decoded; names stream, partition and offset."""


@dataclass(frozen=True)
class AdjunctContext:
    config: Settings
    job_model: JobModel
    container_id: str
    metadata_store: MetadataStore
    """The adjunct loop's own connection (it runs on its own thread)."""
    serdes: SerdeRegistry
    admins: Mapping[str, SystemAdmin]


class AdjunctDataStoreManager(ABC):
    """The contract the container's adjunct loop drives (``stores.adstore.manager.factory``)."""

    @property
    @abstractmethod
    def ssps(self) -> frozenset[SystemStreamPartition]:
        """Every adjunct partition of the container: none of them reaches a task's ``process``."""

    @abstractmethod
    def start(
        self, metadata: Mapping[SystemStreamPartition, SystemStreamPartitionMetadata]
    ) -> dict[SystemStreamPartition, str]:
        """Recover every store (the recovery table); the offset to start reading each partition at."""

    @property
    @abstractmethod
    def bootstrap_ssps(self) -> frozenset[SystemStreamPartition]:
        """Partitions that must catch up before any task processes a message."""

    def process(self, envelope: IncomingMessageEnvelope) -> bool:
        """Store one message; True when it was an adjunct message (SEP-4's contract)."""
        if envelope.ssp not in self.ssps:
            return False
        self.process_batch(envelope.ssp, [envelope])
        return True

    @abstractmethod
    def process_batch(self, ssp: SystemStreamPartition, envelopes: list[IncomingMessageEnvelope]) -> int:
        """Store a batch of one partition in order; how many it consumed (it stops early when the
        partition is held at an end-of-version marker)."""

    @abstractmethod
    def held(self) -> frozenset[SystemStreamPartition]:
        """Partitions waiting at an end-of-version marker for the others of their store."""

    @abstractmethod
    def commit(self) -> None: ...

    @abstractmethod
    def maintain(self) -> None:
        """Periodic work on the adjunct loop's thread (new bulk-built versions, retired versions)."""

    @abstractmethod
    def stores_for(self, task_name: TaskName) -> dict[str, KeyValueStore]:
        """The read-only views a task's ``context.get_store`` returns."""

    def unavailable_for(self, task_name: TaskName) -> dict[str, str]:
        """Adjunct stores the task has none of: ``get_store``'s error for each."""
        return {}

    def serving_versions(self) -> dict[tuple[str, str], str | None]:
        """(store, owner) → the version its readers see now (None: not versioned, or none yet)."""
        return {}

    @abstractmethod
    def close(self) -> None: ...


class AdjunctDataStoreManagerFactory(ABC):
    @abstractmethod
    def get_adjunct_data_store_manager(self, context: AdjunctContext) -> AdjunctDataStoreManager: ...


@dataclass
class _Route:
    """How one partition's messages reach one store."""

    store: AdjunctStore
    extractor: KeyValueExtractor | None
    raw: bool
    """The stream's serdes are the store's and no extractor is set: bytes go to the engine as they are."""
    key_decoder: Serde | None
    msg_decoder: Serde | None
    """The input stream's serdes (resolved once: this is the per-message path)."""
    skip_before: str | None = None
    """This store starts later than the partition is read from (another store shares the partition)."""


class StreamAdjunctDataStoreManager(AdjunctDataStoreManager):
    """The built-in manager."""

    def __init__(self, context: AdjunctContext) -> None:
        self.context = context
        config = context.config
        self.stores: list[AdjunctStore] = []
        self._views: dict[TaskName, dict[str, KeyValueStore]] = {}
        self._bootstrap: set[SystemStreamPartition] = set()
        self._routes: dict[SystemStreamPartition, list[_Route]] = {}
        self._published: dict[str, int] = {}
        """Versioned store → creation time of the last bulk-built version looked at."""
        self._next_poll: dict[str, float] = {}
        self._poll_s: dict[str, float] = {}
        """Versioned store instance → how often it looks for a bulk-built version."""
        self._refused: set[str] = set()
        broadcast_streams = {ssp.system_stream for ssp in config.task.broadcast_ssps()}
        container = context.job_model.containers[context.container_id]
        layout = StoreLayout.of(config)
        serdes = context.serdes
        for name in adjunct_store_names(config):
            own = config.view(StoreConfig, name)
            stream = own.adjunct_input(name)
            factory = storage_engine_factory(config, name)
            open_engine = open_engine_for(factory, name, own, len(container.tasks))
            key_serde = serdes.get(own.key_serde, f"stores.{name}.key.serde") if own.key_serde else None
            msg_serde = serdes.get(own.msg_serde, f"stores.{name}.msg.serde") if own.msg_serde else None
            extractor = key_value_extractor(config, name)
            raw = extractor is None and serdes.key_serde(stream) is key_serde and serdes.msg_serde(stream) is msg_serde
            owners: dict[str, tuple[frozenset[SystemStreamPartition], list[TaskName]]] = {}
            for task_name, task in sorted(container.tasks.items(), key=lambda kv: kv[0].sort_key()):
                ssps = frozenset(ssp for ssp in task.ssps if ssp.system_stream == stream)
                if not ssps:
                    continue
                owner = f"container-{context.container_id}" if stream in broadcast_streams else str(task_name)
                union, tasks = owners.get(owner, (frozenset(), []))
                owners[owner] = (union | ssps, [*tasks, task_name])
            for owner, (ssps, tasks) in owners.items():
                directory = layout.store_dir(name, owner, logged=False) if factory.persistent else None
                spec = AdjunctStoreSpec(name, owner, stream, ssps, directory, open_engine, key_serde, msg_serde)
                store: AdjunctStore
                if own.adstore_versioned:
                    store = VersionedAdjunctStore(spec, own.adstore_version_retire_ms / 1000)
                    self._poll_s[store.key] = own.adstore_version_poll_ms / 1000
                else:
                    store = PlainAdjunctStore(spec)
                self.stores.append(store)
                for ssp in ssps:
                    route = _Route(store, extractor, raw, serdes.key_serde(stream), serdes.msg_serde(stream))
                    self._routes.setdefault(ssp, []).append(route)
                for task_name in tasks:
                    self._views.setdefault(task_name, {})[name] = store.view()
                if config.view(StreamSamzaConfig, stream).bootstrap:
                    self._bootstrap.update(ssps)
        self._ssps = frozenset(self._routes)
        self._drop_errors = config.task.drop_deserialization_errors
        self.dropped = 0

    @property
    def ssps(self) -> frozenset[SystemStreamPartition]:
        return self._ssps

    @property
    def bootstrap_ssps(self) -> frozenset[SystemStreamPartition]:
        return frozenset(self._bootstrap)

    # --- start: the recovery table ---------------------------------------------------------------

    def start(
        self, metadata: Mapping[SystemStreamPartition, SystemStreamPartitionMetadata]
    ) -> dict[SystemStreamPartition, str]:
        config = self.context.config
        admins = self.context.admins
        registered: dict[SystemStreamPartition, str] = {}
        starts: dict[AdjunctStore, dict[SystemStreamPartition, str]] = {}
        for store in self.stores:
            own = config.view(StoreConfig, store.name)
            samza = config.view(StreamSamzaConfig, store.stream)
            recorded = store.recorded()
            found, reason = Found.ABSENT, "no store found"
            resume: dict[SystemStreamPartition, str] = {}
            if recorded is not None and not samza.reset_offset:
                resume = resume_offsets(recorded.positions, admins)
                found, reason = check_validity(recorded, resume, store.ssps, metadata, admins, own.adstore_max_age_ms)
            elif store.found_on_disk:
                found, reason = (
                    Found.INVALID,
                    ("reset.offset is set" if samza.reset_offset else "it recorded no readable offsets"),
                )
            decision = decide(store.persistent, samza.bootstrap, found)
            if decision.recreate and store.persistent and found is not Found.ABSENT:
                log.warning("adjunct store %s: re-created: %s", store, reason)
            if decision.recreate or found is Found.INVALID:
                store.recreate()
            if decision.start == "recorded":
                start = resume
            elif decision.start == "oldest":
                start = {ssp: metadata[ssp].oldest_offset or metadata[ssp].upcoming_offset for ssp in store.ssps}
            else:
                start = self._after_last(store, metadata, ignore_recorded=samza.reset_offset)
            log.info(
                "adjunct store %s: %s (%s); %s from %s",
                store, found.value, reason, "bootstrap" if samza.bootstrap else "reading",
                {ssp.key(): offset for ssp, offset in sorted(start.items())},
            )  # fmt: skip
            store.started = {ssp: ("next", offset) for ssp, offset in start.items()}
            store.positions = dict(store.started)
            starts[store] = start
            keep_earliest(registered, start, admins)
        for store, start in starts.items():
            for ssp, offset in start.items():
                if offset != registered[ssp]:
                    for route in self._routes[ssp]:
                        if route.store is store:
                            route.skip_before = offset
        self.maintain(force=True)
        return registered

    def _after_last(
        self,
        store: AdjunctStore,
        metadata: Mapping[SystemStreamPartition, SystemStreamPartitionMetadata],
        ignore_recorded: bool,
    ) -> dict[SystemStreamPartition, str]:
        """After the last offset the store's previous incarnation recorded, wherever it ran; else the
        stream's ``offset.default``. A recorded offset trimmed by retention moves to the oldest, loudly."""
        data = None if ignore_recorded else self.context.metadata_store.get(ADSTORE_OFFSETS_NAMESPACE, store.key)
        recorded = RecordedOffsets.from_bytes(data) if data else None
        positions = {ssp: p for ssp, p in (recorded.positions.items() if recorded else ()) if ssp in store.ssps}
        resume = resume_offsets(positions, self.context.admins)
        offsets = OffsetManager(self.context.config, self.context.admins)
        return offsets.resume_or_default(f"adjunct store {store}", store.ssps, resume, metadata)

    # --- processing ------------------------------------------------------------------------------

    def process_batch(self, ssp: SystemStreamPartition, envelopes: list[IncomingMessageEnvelope]) -> int:
        routes = self._routes[ssp]
        if len(routes) == 1 and routes[0].skip_before is None:
            return self._store_batch(routes[0], ssp, envelopes)
        consumed = len(envelopes)
        for route in routes:
            batch = envelopes
            if route.skip_before is not None:
                batch = self._skip(route, ssp, envelopes)
            if batch:
                done = self._store_batch(route, ssp, batch)
                consumed = min(consumed, len(envelopes) - len(batch) + done)
        return consumed

    def _skip(
        self, route: _Route, ssp: SystemStreamPartition, envelopes: list[IncomingMessageEnvelope]
    ) -> list[IncomingMessageEnvelope]:
        start = route.skip_before
        assert start is not None
        skipped = count_before(envelopes, start, self.context.admins[ssp.system].offset_comparator)
        if skipped < len(envelopes):
            route.skip_before = None
        return envelopes[skipped:]

    def _store_batch(self, route: _Route, ssp: SystemStreamPartition, envelopes: list[IncomingMessageEnvelope]) -> int:
        store = route.store
        raw: list[tuple[bytes, bytes | None]] = []
        decoded: list[tuple[Any, Any]] = []
        last: str | None = None
        consumed = 0
        for envelope in envelopes:
            consumed += 1
            if envelope.headers and (label := end_of_version_label(envelope)) is not None:
                self._flush(store, raw, decoded)
                raw, decoded = [], []
                store.positions[ssp] = ("last", envelope.offset)
                last = None
                if store.end_of_version(ssp, label, envelope.offset):
                    return consumed
                continue
            if route.raw:
                # stored as they came, but decoded once: a malformed message fails here, naming its offset,
                # not later in a task's lookup
                if envelope.key is not None and self._decode(route, envelope) is not None:
                    raw.append((envelope.key, envelope.message))
            else:
                entry = self._entry(route, envelope)
                if entry is not None:
                    decoded.append(entry)
            last = envelope.offset
        self._flush(store, raw, decoded)
        if last is not None:
            store.positions[ssp] = ("last", last)
        return consumed

    @staticmethod
    def _flush(store: AdjunctStore, raw: list[tuple[bytes, bytes | None]], decoded: list[tuple[Any, Any]]) -> None:
        if raw:
            store.write_raw(raw)
        if decoded:
            store.write(decoded)

    def _decode(self, route: _Route, envelope: IncomingMessageEnvelope) -> tuple[Any, Any] | None:
        """Key and message as the stream's serdes decode them; None when set aside as undecodable
        (``task.drop.deserialization.errors``), else the error names the offset."""
        key_serde, msg_serde = route.key_decoder, route.msg_decoder
        key, message = envelope.key, envelope.message
        try:
            if key_serde is not None and key is not None:
                key = key_serde.from_bytes(key)
            if msg_serde is not None and message is not None:
                message = msg_serde.from_bytes(message)
        except SerdeError as error:
            ssp = envelope.ssp
            if not self._drop_errors:
                raise AdjunctDeserializationError(
                    f"adjunct store '{route.store.name}': cannot deserialize message at offset {envelope.offset} of "
                    f"stream '{ssp.system}.{ssp.stream}' partition {ssp.partition}: {error} "
                    "(set task.drop.deserialization.errors=true to skip such messages)"
                ) from None
            self.dropped += 1
            log.warning("adjunct store %s: skipped undecodable message at offset %s of %s (%s)",
                        route.store, envelope.offset, ssp, error)  # fmt: skip
            return None
        return key, message

    def _entry(self, route: _Route, envelope: IncomingMessageEnvelope) -> tuple[Any, Any] | None:
        decoded = self._decode(route, envelope)
        if decoded is None:
            return None
        if route.extractor is None:
            return None if decoded[0] is None else decoded
        envelope.key, envelope.message = decoded
        key = route.extractor.get_key(envelope)
        return None if key is None else (key, route.extractor.get_value(envelope))

    def held(self) -> frozenset[SystemStreamPartition]:
        held: frozenset[SystemStreamPartition] = frozenset()
        for store in self.stores:
            held |= store.held()
        return held

    # --- commit and maintenance ------------------------------------------------------------------

    def commit(self) -> None:
        for store in self.stores:
            positions = store.commit()
            document = RecordedOffsets(positions, int(time.time() * 1000), store.serving_version).to_bytes()
            self.context.metadata_store.put(ADSTORE_OFFSETS_NAMESPACE, store.key, document)

    def maintain(self, force: bool = False) -> None:
        now = time.monotonic()
        for store in self.stores:
            store.maintain()
            if isinstance(store, VersionedAdjunctStore) and (force or now >= self._next_poll.get(store.key, 0.0)):
                self._next_poll[store.key] = now + self._poll_s[store.key]
                self._install_published(store)

    def _install_published(self, store: VersionedAdjunctStore) -> None:
        """Switch to a version ``millstream adstore build`` published since the one serving."""
        record = latest_version(self.context.metadata_store, store.name)
        if record is None or record.created_ms <= (store.versions.sealed_at_ms or 0):
            return
        if record.version == store.versions.serving_label:
            return
        partitions = None if record.layout == "broadcast" else sorted(ssp.partition for ssp in store.ssps)
        if record.layout == "partitioned":
            counts = self.context.admins[store.stream.system].partition_counts([store.stream.stream])
            current = counts.get(store.stream.stream, 0)
            if record.partition_count and record.partition_count != current:
                if record.version not in self._refused:
                    self._refused.add(record.version)
                    log.error(
                        "adjunct store %s: version %s was built for %d partitions of %s, now %d: not installed",
                        store, record.version, record.partition_count, store.stream, current,
                    )  # fmt: skip
                return
        assert store.directory is not None, "bulk-built versions need a persistent store (validated at start)"
        target = store.directory / "incoming" / record.version
        files = download_version(self.context.config, record, partitions, target)
        try:
            store.install(record.version, files)
        finally:
            delete_path(target)

    def serving_versions(self) -> dict[tuple[str, str], str | None]:
        return {(store.name, store.owner): store.serving_version for store in self.stores}

    def stores_for(self, task_name: TaskName) -> dict[str, KeyValueStore]:
        return dict(self._views.get(task_name, {}))

    def unavailable_for(self, task_name: TaskName) -> dict[str, str]:
        config = self.context.config
        return {
            name: (
                f"task '{task_name}' reads no partition of '{config.view(StoreConfig, name).adstore_input}', the input "
                f"of adjunct store '{name}': give that stream as many partitions as the main inputs, or list it in "
                "task.broadcast.inputs for a store per container with every key"
            )
            for name in adjunct_store_names(config)
            if name not in self._views.get(task_name, {})
        }

    def close(self) -> None:
        for store in self.stores:
            store.close()


def adjunct_data_store_manager(context: AdjunctContext) -> AdjunctDataStoreManager | None:
    """The container's manager, or None when the job has no adjunct stores."""
    if not adjunct_store_names(context.config):
        return None
    name = context.config.stores.adstore_manager_factory
    if not name:
        return StreamAdjunctDataStoreManager(context)
    factory_class = load_object(name, "stores.adstore.manager.factory")
    if not (isinstance(factory_class, type) and issubclass(factory_class, AdjunctDataStoreManagerFactory)):
        raise ConfigError(
            f"config key 'stores.adstore.manager.factory': '{name}' is not a "
            "millstream.adjunct.manager.AdjunctDataStoreManagerFactory"
        )
    return factory_class().get_adjunct_data_store_manager(context)
