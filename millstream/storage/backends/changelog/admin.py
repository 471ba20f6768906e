"""Changelog streams: one per store, a partition per task (at least), compacted; created by the job
coordinator before any container starts, with every task's partition assigned (and kept) in the
metadata store."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from millstream.config.settings import Settings
from millstream.config.views import CHANGELOG_KAFKA_PREFIX, StoreConfig, parse_stream
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.systems import (
    DELETE_RETENTION_KEY,
    MIN_COMPACTION_LAG_KEY,
    REPLICATION_FACTOR_KEY,
    StreamOwner,
    StreamSpec,
    SystemAdmin,
)
from millstream.errors import MillstreamError
from millstream.job_model import JobModel
from millstream.model import SystemStream
from millstream.storage.backends.base import AdminSource, StateBackendAdmin
from millstream.storage.changelog_partitions import assign_changelog_partitions

log = logging.getLogger(__name__)

CHANGELOG_STREAM_CONFIG = {"cleanup.policy": "compact"}
KAFKA_CHANGELOG_TOPIC_CONFIG = {"segment.bytes": str(512 * 1024 * 1024)}
"""What a Kafka changelog the job creates gets beyond ``_stream_config`` unless the store's ``changelog.kafka.*``
keys say otherwise: Samza's segment size, half the broker's default. The broker compacts only closed segments, so
the open one is what a restore replays uncompacted: smaller segments bound it lower."""


def _stream_config(store: StoreConfig) -> dict[str, str]:
    """Compacted, never sooner than ``stores.<s>.changelog.min.compaction.lag.ms`` (what the restore's revert relies
    on), its tombstones kept ``stores.<s>.changelog.delete.retention.ms`` (what a restore from a local checkpoint
    directory relies on), with the store's replicas when it sets them."""
    config = {
        **CHANGELOG_STREAM_CONFIG,
        MIN_COMPACTION_LAG_KEY: str(store.changelog_min_compaction_lag_ms),
        DELETE_RETENTION_KEY: str(store.changelog_delete_retention_ms),
    }
    if store.changelog_replication_factor is not None:
        config[REPLICATION_FACTOR_KEY] = str(store.changelog_replication_factor)
    return config


def _spec(stream: SystemStream, partitions: int, store: StoreConfig, admin: SystemAdmin | None = None) -> StreamSpec:
    """The changelog's spec: ``_stream_config``, what a restore needs of the stream and what an existing one is
    checked against; to create it on Kafka (``admin`` given), Samza's segment size and the store's
    ``changelog.kafka.*`` topic configs over that (Samza's order; ``StoreConfig`` refused any that would weaken
    what a restore needs)."""
    config = _stream_config(store)
    if admin is not None and admin.takes_kafka_topic_configs:
        config.update(KAFKA_CHANGELOG_TOPIC_CONFIG)
        config.update(store.changelog_kafka)
    return StreamSpec(stream.system, stream.stream, partitions, config)


def _create(admin: SystemAdmin, spec: StreamSpec, store: str, store_config: StoreConfig) -> bool:
    """``admin.create_stream(spec)``; a failure names the store and the keys it set for the topic (a cluster of
    fewer brokers refuses the replicas, a broker refuses a topic config it does not know)."""
    try:
        return admin.create_stream(spec)
    except MillstreamError as error:
        topic = store_config.changelog_kafka if admin.takes_kafka_topic_configs else {}
        keys = [f"{CHANGELOG_KAFKA_PREFIX}{name}={value}" for name, value in topic.items()]
        if REPLICATION_FACTOR_KEY in spec.config:
            keys.insert(0, f"changelog.replication.factor={spec.config[REPLICATION_FACTOR_KEY]}")
        if not keys:
            raise
        given = ", ".join(f"stores.{store}.{key}" for key in keys)
        raise MillstreamError(f"cannot create the changelog of store '{store}' with {given}: {error}") from error


class ChangelogStateBackendAdmin(StateBackendAdmin):
    def __init__(
        self,
        config: Settings,
        job_model: JobModel,
        metadata_store: MetadataStore,
        stores: Mapping[str, StoreConfig],
        admins: AdminSource,
    ) -> None:
        self.config = config
        self.admins = admins
        self.job_model = job_model
        self.metadata_store = metadata_store
        self.changelogs: dict[str, SystemStream] = {
            store: parse_stream(store_config.changelog, f"stores.{store}.changelog")
            for store, store_config in stores.items()
            if store_config.changelog
        }
        self.takeover = {store: store_config.changelog_owner_takeover for store, store_config in stores.items()}
        self.stores = dict(stores)

    def _partitions_needed(self) -> int:
        mapping = assign_changelog_partitions(self.metadata_store, self.job_model.tasks)
        return max([len(self.job_model.tasks), *(partition + 1 for partition in mapping.values())])

    def create_resources(self) -> None:
        needed = self._partitions_needed()
        for store, stream in sorted(self.changelogs.items()):
            admin = self.admins(stream.system)
            spec = _spec(stream, needed, self.stores[store], admin)
            if self.stores[store].changelog_kafka and not admin.takes_kafka_topic_configs:
                log.warning(
                    "store '%s': stores.%s.%s* ignored: changelog %s is not on Kafka", store, store,
                    CHANGELOG_KAFKA_PREFIX, stream,
                )  # fmt: skip
            if _create(admin, spec, store, self.stores[store]):
                log.info("created changelog %s of store '%s' with %d partition(s)", stream, store, needed)
            self._check(admin, store, _spec(stream, needed, self.stores[store]))
            self._claim(admin, store, stream)

    def validate_resources(self) -> None:
        needed = self._partitions_needed()
        for store, stream in sorted(self.changelogs.items()):
            self._check(self.admins(stream.system), store, _spec(stream, needed, self.stores[store]))

    def _claim(self, admin: SystemAdmin, store: str, stream: SystemStream) -> None:
        """Own the changelog before any container writes it: a second job (a copied config naming the same
        changelog) or a second store of this job would interleave its keys with the owner's, and each
        restore would load the mixture with no error. The record lives with the stream, not in the job's
        metadata store, which the other job does not share."""
        owner = StreamOwner(self.config.job.job_key, store)
        takeover_key = f"stores.{store}.changelog.owner.takeover"
        previous = admin.claim_stream(stream.stream, owner, takeover=self.takeover[store], takeover_key=takeover_key)
        if not admin.records_owners:
            log.warning(
                "system '%s' keeps no stream owners: changelog %s of store '%s' is not protected",
                stream.system,
                stream,
                store,
            )
        elif previous is not None and previous != owner:
            log.warning(
                "changelog %s: handed over from %s to %s (%s); remove the key",
                stream,
                previous.describe(),
                owner.describe(),
                takeover_key,
            )

    @staticmethod
    def _check(admin: SystemAdmin, store: str, spec: StreamSpec) -> None:
        """The changelog exists with a partition per task at least, and its system finds it fit for ``spec``
        (Kafka: compacted, never sooner than the store's min compaction lag, its tombstones kept as long as the
        store's delete retention)."""
        stream = f"{spec.system}.{spec.physical_name}"
        count = admin.partition_counts([spec.physical_name]).get(spec.physical_name)
        if count is None:
            raise MillstreamError(f"changelog '{stream}' of store '{store}' does not exist")
        if count < spec.partition_count:
            raise MillstreamError(
                f"changelog '{stream}' of store '{store}' has {count} partition(s); the job "
                f"needs {spec.partition_count} (one per task)"
            )
        try:
            admin.validate_stream(replace(spec, partition_count=count))
        except MillstreamError as error:
            keys = ", ".join(
                f"stores.{store}.changelog.{key}={spec.config.get(key)}"
                for key in (MIN_COMPACTION_LAG_KEY, DELETE_RETENTION_KEY)
            )
            raise MillstreamError(f"changelog '{stream}' of store '{store}' ({keys}): {error}") from error
