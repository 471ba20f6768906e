"""Metadata and lifecycle of Kafka topics: partitions, offsets, creation, validation, deletion.

Offsets are Kafka's: decimal integers, dense except where compaction removed records or
transactions left control records. ``oldest`` is the log start offset, ``upcoming`` the end offset
the system's consumers read up to (the last stable offset under librdkafka's default
``isolation.level=read_committed``, the high watermark under ``read_uncommitted``), ``newest`` the
one before it; an empty partition has neither oldest nor newest. Kafka partitions never end: no
partition is ever sealed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import orjson
from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec

from millstream.connectors.kafka.client import (
    check_brokers,
    create_client,
    create_topic,
    describe_partitions,
    future_result,
    kafka_error,
    listed_offset,
    parse_offset,
    retry,
    wait_for_topic,
)
from millstream.connectors.kafka.config import KafkaClientSettings
from millstream.connectors.kafka.errors import KafkaSystemError
from millstream.connectors.kafka.grouped_lookups import GroupedLookups
from millstream.connectors.kafka.transactions import fence_transactional_id
from millstream.contracts.systems import (
    DELETE_RETENTION_KEY,
    MIN_COMPACTION_LAG_KEY,
    REPLICATION_FACTOR_KEY,
    StreamOwnedError,
    StreamOwner,
    StreamSpec,
    SystemAdmin,
    SystemOperationError,
    SystemStreamMetadata,
    SystemStreamPartitionMetadata,
    compare_integer_offsets,
)
from millstream.errors import StreamNotFoundError
from millstream.model import SystemStreamPartition

if TYPE_CHECKING:
    from millstream.config.settings import Settings

log = logging.getLogger(__name__)


UNLIMITED_RETENTION = {"retention.ms": "-1", "retention.bytes": "-1"}
"""An intermediate topic's retention (as Kafka Streams' repartition topics and Samza's intermediate
streams): records carry their event time, so a backfill's would expire within minutes under the
broker's default; the consuming stage deletes them once it has checkpointed past them."""


OWNERS_TOPIC = "__millstream-owners"
"""The cluster's record of who owns which topic (``claim_stream``): a single-partition compacted topic whose
record for a topic names its owner, shared by every job on the cluster."""
OWNERS_NAMESPACE = "owner"
CLAIM_ATTEMPTS = 5
"""Conditional writes ``claim_stream`` tries before giving up: each lost race re-reads the owner, so a lost
race ends at the next attempt (the stream is then owned) unless another takeover keeps racing."""

FENCING_THREADS = 8
"""Producers ``fence_writers`` runs at once, each taking over one container's ``transactional.id``."""


BROKER_DELETE_RETENTION_MS = "86400000"
"""Kafka's ``log.cleaner.delete.retention.ms`` default: a topic's ``delete.retention.ms`` when it reports none."""


def _require_at_least(
    topic: str, spec: StreamSpec, config: Mapping[str, str], key: str, default: str, does: str, reason: str
) -> None:
    """Refuse ``topic`` when its ``key`` is below what ``spec`` asks, saying how to raise it or lower the store's."""
    needed = spec.config.get(key)
    given = config.get(key, default)
    if needed is not None and int(given) < int(needed):
        raise KafkaSystemError(
            f"Kafka topic '{topic}' {does} {key}={given}, sooner than the {needed} {reason}; raise it "
            f"(kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config {key}={needed}) "
            f"or lower the store's key to {given}"
        )


class KafkaSystemAdmin(SystemAdmin):
    """``SystemAdmin`` of a Kafka cluster. Thread-safe as librdkafka's admin client is."""

    takes_kafka_topic_configs = True

    def __init__(self, system: str, kafka: KafkaClientSettings, *, config: Settings | None = None) -> None:
        self.system = system
        self.kafka = kafka
        self._config = config
        self._admin: AdminClient | None = None
        self._timeout = kafka.settings.operation_timeout_ms / 1000
        """Of one request."""
        self._deadline = kafka.settings.outage_timeout_ms / 1000
        """Of a call, its retries included: ``systems.<s>.outage.timeout.ms``."""
        self._seen_partitions: dict[str, int] = {}
        """Partition counts this admin has read: Kafka never takes partitions away, so a partition below a count
        seen once still exists, and the offsets of a task's own partitions need no metadata of the whole topic."""
        self._isolation = (
            IsolationLevel.READ_UNCOMMITTED
            if kafka.isolation_level() == "read_uncommitted"
            else IsolationLevel.READ_COMMITTED
        )
        self._offset_lookups = {level: self._grouped(level) for level in IsolationLevel}
        """Per isolation level, the offsets of partitions that threads ask for at once (a container's commit and
        restore threads, a partition each), read in one pair of ListOffsets requests (``GroupedLookups``)."""

    def _grouped(self, level: IsolationLevel) -> GroupedLookups[SystemStreamPartition, SystemStreamPartitionMetadata]:
        def fetch(ssps: list[SystemStreamPartition]) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
            return self._partition_metadata(ssps, level)

        return GroupedLookups(fetch)

    def start(self) -> None:
        """Connect and check that a broker answers within ``systems.<s>.startup.timeout.ms``."""
        self._client()

    def stop(self) -> None:
        self._admin = None

    def _client(self) -> AdminClient:
        if self._admin is None:
            admin = create_client(AdminClient, self.kafka.admin(), "admin", self.kafka)
            check_brokers(admin, self.kafka)
            self._admin = admin
        return self._admin

    def partition_counts(self, streams: Iterable[str]) -> dict[str, int]:
        """Partition count of each existing topic among ``streams``, from the topics' metadata (no offsets)."""
        admin = self._client()
        wanted = list(dict.fromkeys(streams))
        if not wanted:
            return {}
        described = retry(
            lambda: describe_partitions(admin, wanted, self._timeout),
            f"Kafka system '{self.system}': reading metadata of topic{'s' * (len(wanted) > 1)} "
            + ", ".join(f"'{topic}'" for topic in wanted),
            self._deadline,
            kafka=self.kafka,
        )
        counts = {}
        for topic, partitions in described.items():
            if partitions is not None:
                counts[topic] = self._seen_partitions[topic] = len(partitions)
            else:
                self._seen_partitions.pop(topic, None)
        return counts

    def _list_offsets(
        self,
        specs: Mapping[TopicPartition, Any],
        what: str,
        isolation: IsolationLevel | None = None,
        *,
        by_time: bool = False,
    ) -> dict[tuple[str, int], int]:
        """ListOffsets, retried. A failed attempt replaces the admin client: librdkafka's keeps sending a
        partition's old leader epoch after a broker restart (FENCED_LEADER_EPOCH) until recreated. An answer
        without an offset is a failed attempt too (:func:`listed_offset`), never an empty partition: every
        returned offset is one the broker gave."""
        level = self._isolation if isolation is None else isolation

        def attempt() -> dict[tuple[str, int], int]:
            futures = self._client().list_offsets(dict(specs), isolation_level=level, request_timeout=self._timeout)
            return {
                (tp.topic, tp.partition): listed_offset(tp.topic, tp.partition, future.result(), by_timestamp=by_time)
                for tp, future in futures.items()
            }

        def renew(_: BaseException) -> None:
            self._admin = None

        if not specs:
            return {}
        return retry(attempt, f"Kafka system '{self.system}': {what}", self._deadline, on_retry=renew, kafka=self.kafka)

    def get_system_stream_metadata(
        self, streams: Iterable[str], isolation: IsolationLevel | None = None
    ) -> dict[str, SystemStreamMetadata]:
        counts = self.partition_counts(streams)
        ssps = [SystemStreamPartition(self.system, topic, p) for topic, count in counts.items() for p in range(count)]
        by_ssp = self._partition_metadata(ssps, isolation)
        result = {}
        for topic, count in counts.items():
            partitions = {p: by_ssp[SystemStreamPartition(self.system, topic, p)] for p in range(count)}
            result[topic] = SystemStreamMetadata(topic, partitions)
        return result

    def get_ssp_metadata(
        self, ssps: Iterable[SystemStreamPartition]
    ) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        """Only the given partitions' offsets: a task's commit asks about its own changelog partition, so
        its cost does not grow with the number of partitions (and tasks) of the stream; the partitions that
        threads ask about at once are read in one request (``GroupedLookups``)."""
        return self._existing_partition_metadata(ssps, None)

    def get_written_ssp_metadata(
        self, ssps: Iterable[SystemStreamPartition]
    ) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        """The high watermark, not the last stable offset: right after a producer's transaction commits,
        the broker may not have written its commit markers yet, and the last stable offset still stops
        before the transaction's records."""
        return self._existing_partition_metadata(ssps, IsolationLevel.READ_UNCOMMITTED)

    def _existing_partition_metadata(
        self, ssps: Iterable[SystemStreamPartition], isolation: IsolationLevel | None
    ) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        ssps = list(ssps)
        seen = self._seen_partitions
        unknown = {ssp.stream for ssp in ssps if ssp.partition >= seen.get(ssp.stream, 0)}
        counts = {**seen, **self.partition_counts(unknown)} if unknown else seen
        existing = [ssp for ssp in ssps if ssp.partition < counts.get(ssp.stream, 0)]
        if not existing:
            return {}
        return self._offset_lookups[self._isolation if isolation is None else isolation].lookup(existing)

    def _partition_metadata(
        self, ssps: list[SystemStreamPartition], isolation: IsolationLevel | None
    ) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        """Oldest, newest and upcoming offsets of existing partitions, each one the broker gave (an empty
        partition is one whose start the broker said is its end, never one it did not answer for)."""
        partitions = [TopicPartition(ssp.stream, ssp.partition) for ssp in ssps]
        oldest = self._list_offsets({tp: OffsetSpec.earliest() for tp in partitions}, "reading oldest offsets")
        upcoming = self._list_offsets({tp: OffsetSpec.latest() for tp in partitions}, "reading end offsets", isolation)
        result = {}
        for ssp in ssps:
            start, end = oldest[(ssp.stream, ssp.partition)], upcoming[(ssp.stream, ssp.partition)]
            if start >= end:
                result[ssp] = SystemStreamPartitionMetadata(None, None, str(end))
            else:
                result[ssp] = SystemStreamPartitionMetadata(str(start), str(end - 1), str(end))
        return result

    def offsets_after(self, offsets: Mapping[SystemStreamPartition, str]) -> dict[SystemStreamPartition, str]:
        return {ssp: str(parse_offset(ssp.stream, ssp.partition, offset) + 1) for ssp, offset in offsets.items()}

    def offset_comparator(self, offset1: str, offset2: str) -> int | None:
        return compare_integer_offsets(offset1, offset2)

    def offset_for_timestamp(self, ssp: SystemStreamPartition, timestamp_ms: int) -> str:
        """Kafka's ListOffsets by time: the first offset whose timestamp is at or after ``timestamp_ms``;
        the upcoming offset when every record is older."""
        if ssp.stream not in self.partition_counts([ssp.stream]):
            raise StreamNotFoundError(self.system, ssp.stream)
        tp = TopicPartition(ssp.stream, ssp.partition)
        found = self._list_offsets(
            {tp: OffsetSpec.for_timestamp(timestamp_ms)}, f"finding offsets by time in {ssp}", by_time=True
        )
        offset = found[(ssp.stream, ssp.partition)]
        if offset < 0:
            offset = self._list_offsets({tp: OffsetSpec.latest()}, f"reading the end offset of {ssp}")[
                (ssp.stream, ssp.partition)
            ]
        return str(offset)

    def create_stream(self, spec: StreamSpec) -> bool:
        """Create the topic with ``spec.partition_count`` partitions; ``spec.config`` holds topic configs
        (``cleanup.policy=compact`` for changelogs) and optionally ``replication.factor``."""
        config = dict(spec.config)
        if spec.intermediate:
            config = {**UNLIMITED_RETENTION, **config}
        replication = int(config.pop(REPLICATION_FACTOR_KEY, self.kafka.settings.default_replication_factor))
        admin = self._client()
        created = create_topic(admin, self.kafka, spec.physical_name, spec.partition_count, replication, config)
        if created:
            log.info("created Kafka topic %s (%d partitions, %s)", spec.physical_name, spec.partition_count, config)
        return created

    def validate_stream(self, spec: StreamSpec) -> None:
        """Exists, has the expected partition count, and is compacted when the spec asks for it, never sooner than
        its ``min.compaction.lag.ms`` and keeping tombstones at least its ``delete.retention.ms`` when it gives
        them."""
        super().validate_stream(spec)
        if spec.is_changelog:
            self._require_compaction(spec)
        if spec.intermediate:
            self._require_unlimited_retention(spec.physical_name)

    def _require_compaction(self, spec: StreamSpec) -> None:
        topic = spec.physical_name
        config = self.topic_config(topic)
        policy = config.get("cleanup.policy", "")
        if "compact" not in policy.split(","):
            raise KafkaSystemError(f"Kafka topic '{topic}' has cleanup.policy={policy!r}; a changelog needs 'compact'")
        if "delete" in policy.split(",") and config.get("retention.ms") != "-1":
            raise KafkaSystemError(
                f"Kafka topic '{topic}' has cleanup.policy={policy!r} and retention.ms={config.get('retention.ms')}: "
                f"it deletes records older than that, keys a restore needs; a changelog needs 'compact' alone "
                f"(kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config "
                f"cleanup.policy=compact) or retention.ms=-1"
            )
        _require_at_least(
            topic, spec, config, MIN_COMPACTION_LAG_KEY, "0", "compacts records after",
            "a restore that reverts what followed a checkpoint relies on (it would replay a compacted changelog and "
            "lose keys)",
        )  # fmt: skip
        _require_at_least(
            topic, spec, config, DELETE_RETENTION_KEY, BROKER_DELETE_RETENTION_MS, "drops tombstones after",
            "a restore from a local checkpoint directory relies on (a key deleted after the directory was made "
            "would come back)",
        )  # fmt: skip

    def _require_unlimited_retention(self, topic: str) -> None:
        config = self.topic_config(topic)
        limited = {key: config.get(key) for key in UNLIMITED_RETENTION if config.get(key) != "-1"}
        if limited:
            settings = ", ".join(f"{key}={value}" for key, value in limited.items())
            raise KafkaSystemError(
                f"Kafka topic '{topic}' is an intermediate stream but has {settings}: the broker would delete "
                f"records a later stage has not read yet (its consumers purge it as they checkpoint); set "
                f"retention.ms=-1 and retention.bytes=-1 on it (kafka-configs.sh --alter --entity-type topics "
                f"--entity-name {topic} --add-config retention.ms=-1,retention.bytes=-1)"
            )

    origin_offset = "0"

    def delete_messages(self, before: Mapping[SystemStreamPartition, str]) -> bool:
        """Kafka's DeleteRecords: each partition's log start moves up to the given offset."""
        if not before:
            return True
        partitions = [
            TopicPartition(ssp.stream, ssp.partition, parse_offset(ssp.stream, ssp.partition, offset))
            for ssp, offset in before.items()
        ]

        def attempt() -> None:
            futures = self._client().delete_records(partitions, request_timeout=self._timeout)
            for future in futures.values():
                future.result()

        retry(attempt, f"Kafka system '{self.system}': deleting committed records", self._deadline, kafka=self.kafka)
        return True

    def topic_config(self, topic: str) -> dict[str, str]:
        """The effective configuration of ``topic`` (defaults included)."""
        admin = self._client()
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)

        def attempt() -> dict[str, str]:
            try:
                entries = admin.describe_configs([resource], request_timeout=self._timeout)[resource].result()
            except KafkaException as error:
                inner = kafka_error(error)
                if inner is not None and inner.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise StreamNotFoundError(self.system, topic) from None
                raise
            return {name: entry.value for name, entry in entries.items() if entry.value is not None}

        return retry(
            attempt, f"Kafka system '{self.system}': describing topic '{topic}'", self._deadline, kafka=self.kafka
        )

    def clear_stream(self, spec: StreamSpec) -> bool:
        """Delete the topic and wait until the cluster no longer serves it; False if there was none."""
        admin = self._client()
        topic = spec.physical_name
        self._seen_partitions.pop(topic, None)
        try:
            deleted = admin.delete_topics([topic], request_timeout=self._timeout)[topic]
            future_result(deleted, self._timeout, f"deleting topic '{topic}'")
        except KafkaException as error:
            inner = kafka_error(error)
            if inner is not None and inner.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                return False
            raise KafkaSystemError(
                f"Kafka system '{self.system}': cannot delete topic '{topic}': {inner.str() if inner else error}"
            ) from None
        wait_for_topic(admin, self.kafka, topic, present=False)
        return True

    records_owners = True

    def claim_stream(
        self, stream: str, owner: StreamOwner, *, takeover: bool = False, takeover_key: str = "takeover"
    ) -> StreamOwner | None:
        """Kafka keeps no arbitrary keys in a topic's config, so owners live on the same cluster in
        ``__millstream-owners``: the coordinator-stream machinery (``KafkaMetadataStore``) on that topic, one
        record per topic. A claim is its ``compare_and_put`` against the owner just read, so of two jobs
        claiming at once the later write is aborted and re-reads the winner; losing conditional writes never
        reach the compacted log, which therefore holds exactly the current owners."""
        from millstream.connectors.kafka.metadata import KafkaMetadataStore  # the store builds on this module

        if self._config is None:
            raise SystemOperationError(f"Kafka system '{self.system}': this admin has no config to claim '{stream}'")
        overrides = {"job.coordinator.system": self.system, "job.coordinator.topic": OWNERS_TOPIC}
        store = KafkaMetadataStore(self._config.with_overrides(overrides))
        value = orjson.dumps(owner.to_json())
        try:
            for _ in range(CLAIM_ATTEMPTS):
                raw = store.get(OWNERS_NAMESPACE, stream)
                previous = StreamOwner.from_json(_json_or_none(raw))
                if previous == owner:
                    return previous
                if previous is not None and not takeover:
                    raise StreamOwnedError(self.system, stream, previous, owner, takeover_key)
                if store.compare_and_put(OWNERS_NAMESPACE, stream, value, {(OWNERS_NAMESPACE, stream): raw}):
                    return previous
        finally:
            store.close()
        raise SystemOperationError(
            f"Kafka system '{self.system}': claiming topic '{stream}' for {owner.describe()} lost {CLAIM_ATTEMPTS} "
            f"races in a row in '{OWNERS_TOPIC}'"
        )

    def fence_writers(self, job: str, container_ids: Iterable[str]) -> None:
        """With transactional writes, take over each container's ``transactional.id``: a zombie of an older
        generation has its open transaction aborted and fails its next commit with ``WriterFencedError``. Up to
        ``FENCING_THREADS`` ids at once: each takes from tens of milliseconds to half a second (a new id's
        transaction coordinator loads), and the job start waits for all of them."""
        ids = list(container_ids)
        if not self.kafka.settings.transactional_writes or not ids:
            return
        with ThreadPoolExecutor(min(FENCING_THREADS, len(ids)), thread_name_prefix="fence-writers") as pool:
            for fenced in [pool.submit(fence_transactional_id, self.system, self.kafka, cid, job) for cid in ids]:
                fenced.result()  # the first failure, naming its transactional.id

    def list_streams(self) -> list[str]:
        """Every topic but Kafka's and millstream's internal ones (names starting with ``__``)."""
        admin = self._client()
        what = f"Kafka system '{self.system}': listing topics"
        metadata = retry(lambda: admin.list_topics(timeout=self._timeout), what, self._timeout)
        return sorted(topic for topic in metadata.topics if not topic.startswith("__"))


def _json_or_none(raw: bytes | None) -> object:
    try:
        return None if raw is None else orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
