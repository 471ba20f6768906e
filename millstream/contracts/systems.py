"""The contract between the engine and a system (log, Kafka, Kinesis...).

The engine imports only this module; a concrete system is reached through its factory name in
config (``systems.<s>.samza.factory``). Offsets are strings whose order the system's admin defines.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self, runtime_checkable

from millstream.config.views import ConfigView
from millstream.contracts.metadata import FencedError, MetadataStore
from millstream.errors import ConfigError, MillstreamError
from millstream.model import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition

if TYPE_CHECKING:
    from millstream.config.core import Config
    from millstream.config.settings import Settings
    from millstream.contracts.startpoints import (
        Startpoint,
        StartpointCustom,
        StartpointOldest,
        StartpointSpecific,
        StartpointTimestamp,
        StartpointUpcoming,
    )


class SystemOperationError(MillstreamError):
    """A system failed an operation; the message names the system, stream and partition."""


@dataclass(frozen=True)
class WriterToken:
    """Who writes through a producer: one attempt (``epoch``) of one container of one generation of a job.

    Systems that can refuse a stale writer (the embedded log checks it at every append) keep, per
    partition, the newest token each job's containers wrote with: an append is refused when the same
    container wrote with a newer ``(generation, epoch)``, or any container of the job with a newer
    generation. A zombie attempt therefore cannot add records to a partition its successor has claimed.
    """

    job: str
    """``<job.name>-<job.id>``: jobs sharing a stream never fence each other."""
    container_id: str
    generation: int
    epoch: int
    pooled: bool = True
    """The container's transactional producer (``ProducerPool.state_producer``: changelogs, and everything under
    exactly-once): a Kafka system runs its writes in transactions under the container's ``transactional.id``,
    which only one producer may hold."""

    @property
    def order(self) -> tuple[int, int]:
        """Newer generations win; within one generation, newer attempts of the container win."""
        return (self.generation, self.epoch)

    def describe(self) -> str:
        return f"container {self.container_id} attempt {self.epoch} of generation {self.generation} of job {self.job}"


class WriterFencedError(FencedError):
    """A newer attempt (or generation) claimed the partition: this writer is a zombie and must stop.

    Raised by every later ``send`` and ``flush`` of the fenced producer as well, so a caller that set one
    failure aside (a skip policy) still stops at the next."""

    def __init__(self, target: str, writer: WriterToken, detail: str) -> None:
        self.target = target
        """What refused the write: ``<system>.<stream> partition <n>``."""
        self.writer = writer
        super().__init__(f"{target}: {writer.describe()} was fenced off ({detail}); a newer attempt owns its writes")


class OffsetOutOfRangeError(MillstreamError):
    """A consumer was registered at an offset the partition no longer (or not yet) holds."""


@dataclass(frozen=True)
class SystemStreamPartitionMetadata:
    """Offsets of one partition. ``oldest``/``newest`` are None when the partition holds nothing."""

    oldest_offset: str | None
    newest_offset: str | None
    upcoming_offset: str
    sealed: bool = False
    """True when the partition is bounded and complete: a consumer reaching its end sees end-of-stream."""


@dataclass(frozen=True)
class SystemStreamMetadata:
    stream: str
    partitions: Mapping[int, SystemStreamPartitionMetadata]

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


@dataclass(frozen=True)
class StreamOwner:
    """Who writes a durable stream: a job (``<job.name>-<job.id>``) and what of it (a store's name; empty for a
    stream of the whole job, such as its checkpoint topic or an application's intermediate streams)."""

    job: str
    store: str = ""

    def describe(self) -> str:
        return f"store '{self.store}' of job '{self.job}'" if self.store else f"job '{self.job}'"

    def to_json(self) -> dict[str, str]:
        return {"job": self.job, "store": self.store}

    @classmethod
    def from_json(cls, document: object) -> StreamOwner | None:
        """The owner a record names; None when it is not an owner record (a crash while writing it)."""
        if (
            isinstance(document, dict)
            and isinstance(document.get("job"), str)
            and isinstance(document.get("store"), str)
        ):
            return cls(document["job"], document["store"])
        return None


class StreamOwnedError(ConfigError):
    """A job claimed a stream another job or store owns: it is refused at start (exit code 2), since two
    writers of one changelog overwrite each other's keys and both restore the mixture, silently."""

    def __init__(self, system: str, stream: str, owner: StreamOwner, claimant: StreamOwner, takeover_key: str) -> None:
        self.system = system
        self.stream = stream
        self.owner = owner
        self.claimant = claimant
        super().__init__(
            f"stream '{system}.{stream}' is owned by {owner.describe()}; {claimant.describe()} cannot write it too "
            f"(two writers corrupt each other's state). Give the store a stream of its own, or, to hand the stream "
            f"over on purpose (the old owner must not run again with it), start once with '{takeover_key}=true'"
        )


REPLICATION_FACTOR_KEY = "replication.factor"
"""In a ``StreamSpec.config``: the stream's replicas, for a system that keeps copies (Kafka); every other entry is a
setting of the stream."""

MIN_COMPACTION_LAG_KEY = "min.compaction.lag.ms"
"""In a changelog's ``StreamSpec.config``: no record younger than this many milliseconds is compacted away. A restore
that reverts what followed a checkpoint replays the records up to it, so it needs them all while the checkpoint is
younger than this (older, it restores to the newest record instead); a system that compacts (Kafka) creates the
stream with it and refuses one that compacts sooner."""

DELETE_RETENTION_KEY = "delete.retention.ms"
"""In a changelog's ``StreamSpec.config``: a tombstone outlives the compaction that reaches it by this many
milliseconds at least. A restore starts from a local checkpoint directory only while it is younger than this (a key
deleted after the directory was made must still have its tombstone in the changelog's tail); a system that compacts
(Kafka) creates the stream with it and refuses one that drops tombstones sooner."""


@dataclass(frozen=True)
class StreamSpec:
    """What a stream should look like when a job (or an operator) creates it."""

    system: str
    physical_name: str
    partition_count: int = 1
    config: Mapping[str, str] = field(default_factory=dict)
    """System-specific settings, e.g. ``cleanup.policy=compact`` or ``replication.factor``."""
    stream_id: str | None = None
    intermediate: bool = False
    """An intermediate stream of a high-level application: its records must stay until every consuming
    task has checkpointed past them, so the system creates it without time or size retention (the
    consumers purge it instead) and ``validate_stream`` rejects one that has a retention."""

    @property
    def is_changelog(self) -> bool:
        return self.config.get("cleanup.policy") == "compact"


def compare_integer_offsets(offset1: str, offset2: str) -> int | None:
    """``SystemAdmin.offset_comparator`` of systems whose offsets are integers (the log, Kafka)."""
    try:
        first, second = int(offset1), int(offset2)
    except (TypeError, ValueError):
        return None
    return (first > second) - (first < second)


class SystemAdmin(ABC):
    """Metadata and lifecycle of a system's streams; used by the coordinator and the runtime."""

    def __enter__(self) -> Self:
        """Leaving stops the admin; entering does not start it."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    partitions_are_fixed: ClassVar[bool] = True
    """False for systems whose partitions come and go at run time (Kinesis shards)."""

    takes_kafka_topic_configs: ClassVar[bool] = False
    """True for a system whose streams are Kafka topics: a changelog it creates gets the store's
    ``stores.<s>.changelog.kafka.*`` topic configs in its ``StreamSpec.config`` (other systems are not given them)."""

    origin_offset: ClassVar[str | None] = None
    """The offset of the first record a partition ever holds, where the system numbers records from a
    fixed origin (the log and Kafka: ``"0"``): a reader starting from the oldest offset of an intermediate
    stream can then tell a complete stream from one whose head was already deleted."""

    def start(self) -> None:  # noqa: B027 - optional hook
        """Open connections; called once before any other method."""

    def stop(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the admin is not used afterwards."""

    @abstractmethod
    def get_system_stream_metadata(self, streams: Iterable[str]) -> dict[str, SystemStreamMetadata]:
        """Metadata of the given streams; a stream that does not exist is absent from the result."""

    def partition_counts(self, streams: Iterable[str]) -> dict[str, int]:
        """The partition count of each existing stream among ``streams`` (a stream that does not exist is
        absent). What planning and checks need of a stream, which a system whose metadata reads every
        partition's offsets overrides with a cheaper call: a 1,000-partition stream costs one read, not 1,000."""
        return {name: metadata.partition_count for name, metadata in self.get_system_stream_metadata(streams).items()}

    def get_ssp_metadata(
        self, ssps: Iterable[SystemStreamPartition]
    ) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        ssps = list(ssps)
        by_stream = self.get_system_stream_metadata({ssp.stream for ssp in ssps})
        result = {}
        for ssp in ssps:
            stream = by_stream.get(ssp.stream)
            if stream is not None and ssp.partition in stream.partitions:
                result[ssp] = stream.partitions[ssp.partition]
        return result

    def get_written_ssp_metadata(
        self, ssps: Iterable[SystemStreamPartition]
    ) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        """``get_ssp_metadata`` as the partitions' writer sees them: ``newest`` is the last record written,
        including a just committed transaction whose end the partition may not show readers yet (Kafka
        writes commit markers after the commit returns). A changelog snapshot taken right after its
        producer committed must cover those records. Systems without transactions need not override it."""
        return self.get_ssp_metadata(ssps)

    @abstractmethod
    def offsets_after(self, offsets: Mapping[SystemStreamPartition, str]) -> dict[SystemStreamPartition, str]:
        """The offset following each given offset: where to resume after a checkpointed one."""

    @abstractmethod
    def offset_comparator(self, offset1: str, offset2: str) -> int | None:
        """Negative, zero or positive as offset1 is before, equal or after offset2; None if incomparable."""

    @abstractmethod
    def offset_for_timestamp(self, ssp: SystemStreamPartition, timestamp_ms: int) -> str:
        """The first offset whose record timestamp is at or after ``timestamp_ms``; upcoming if none."""

    @abstractmethod
    def create_stream(self, spec: StreamSpec) -> bool:
        """Create the stream; False (and no change) when it already exists."""

    def validate_stream(self, spec: StreamSpec) -> None:
        """Raise a MillstreamError naming the stream when it does not exist or does not match ``spec``."""
        count = self.partition_counts([spec.physical_name]).get(spec.physical_name)
        if count is None:
            from millstream.errors import StreamNotFoundError

            raise StreamNotFoundError(spec.system, spec.physical_name)
        if count != spec.partition_count:
            raise MillstreamError(
                f"stream '{spec.system}.{spec.physical_name}' has {count} partitions, expected {spec.partition_count}"
            )

    @abstractmethod
    def clear_stream(self, spec: StreamSpec) -> bool:
        """Remove the stream and its data; False when there was nothing to remove."""

    def list_streams(self) -> list[str]:
        """Names of the streams in this system, where the system can list them."""
        raise SystemOperationError(f"{type(self).__name__} cannot list its streams")

    def resolve_startpoint(self, ssp: SystemStreamPartition, startpoint: Startpoint) -> str:
        """The offset a startpoint designates for ``ssp``, used as is (inclusive).

        The default resolves the four generic types through this admin's own metadata and timestamp
        lookup; a system with its own startpoint types overrides it (or ``visit_custom``).
        """
        return str(startpoint.apply(ssp, _GenericStartpointResolver(self)))

    def delete_messages(self, before: Mapping[SystemStreamPartition, str]) -> bool:
        """Delete each partition's records below the given offset, once every reader has checkpointed
        past them (Samza's ``deleteMessages``); False when this system cannot delete records."""
        return False

    def fence_writers(self, job: str, container_ids: Iterable[str]) -> None:  # noqa: B027 - optional hook
        """Stop these containers' producers (of any older generation of ``job``, ``<job.name>-<job.id>``) from
        writing anything more, before a new generation's containers restore state.

        The coordinator calls it when it publishes a generation, on an admin it has not started, with the
        previous generation's containers: a task moved to another container is no longer fenced by its
        successor taking over the same writer identity. Systems that check each write's ``WriterToken``
        (the embedded log refuses older generations) need nothing; Kafka fences each container's
        ``transactional.id``."""

    records_owners: ClassVar[bool] = False
    """True for systems that keep a stream's owner with the stream (``claim_stream``)."""

    def claim_stream(
        self, stream: str, owner: StreamOwner, *, takeover: bool = False, takeover_key: str = "takeover"
    ) -> StreamOwner | None:
        """Record ``owner`` as the one writer of ``stream``, kept where the stream lives (so every job using
        this system sees it, whatever its metadata store); return the owner recorded before (None: none).

        The same owner claiming again (a restart) is accepted. Another owner is refused with
        ``StreamOwnedError`` (naming ``takeover_key``, the config key that hands it over) unless ``takeover``,
        which records ``owner`` instead. A claim is atomic against
        concurrent claims: of two jobs claiming an unowned stream at once, one wins, the other is refused.
        Systems that cannot keep a record (``records_owners`` False) accept every claim and return None."""
        return None

    def seal_stream(self, stream: str) -> None:
        """Mark ``stream`` bounded and complete, for systems that have bounded streams."""
        raise SystemOperationError(f"{type(self).__name__} has no bounded streams: cannot seal '{stream}'")


class ShardDescription(Protocol):
    """One shard of a stream whose partitions split and merge, as a planner needs it."""

    @property
    def shard_id(self) -> str: ...
    @property
    def parents(self) -> tuple[str, ...]:
        """The shards a split or merge closed to open this one (none listed: it holds the oldest records)."""

    @property
    def closed(self) -> bool:
        """True once a split or merge closed the shard: no record will be added to it."""


@runtime_checkable
class ShardedSystemAdmin(Protocol):
    """The capability of an admin whose partitions split and merge while a stream lives (Kinesis shards; its
    ``partitions_are_fixed`` is False): bounded reads of a stream shard by shard, parents before children.

    A reader outside the job (a DataFrame read, batch or streaming) plans and reads such a stream through these
    calls alone, so it never names the system. A shard's start position is a JSON object, kept in a streaming
    query's offsets: ``{"ShardIteratorType": "TRIM_HORIZON"}``, ``{"ShardIteratorType": "AT_TIMESTAMP",
    "Timestamp": <epoch ms>}`` or ``{"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": <offset>}``.
    """

    def shard_lineage(self, stream: str) -> Sequence[ShardDescription] | None:
        """Every shard listed now (open ones and closed ones still held), by shard id; None: no such stream."""

    def shard_offsets(self, offset: str) -> dict[str, str]:
        """Shard id → record offset named by a startpoint's offset (``shardId:offset[,...]``); ValueError
        saying why when ``offset`` is not one."""

    def read_shard(
        self,
        ssp: SystemStreamPartition,
        shard_id: str,
        start: Mapping[str, Any],
        ends_before: Callable[[str, int], bool],
    ) -> Iterator[list[IncomingMessageEnvelope]]:
        """The envelopes of ``shard_id`` from ``start`` in batches (``ssp`` on each, offsets and headers as a job's
        consumer gives them), up to the first record for which ``ends_before(offset, arrival ms)`` is true, the
        shard's tip (every record written until the read reached it) or the end of a closed shard. A refusal
        of the system (a position it no longer holds) raises an error naming the stream and shard."""


class _GenericStartpointResolver:
    """Resolves the generic startpoint types with nothing but the SystemAdmin contract."""

    def __init__(self, admin: SystemAdmin) -> None:
        self.admin = admin

    def _metadata(self, ssp: SystemStreamPartition) -> SystemStreamPartitionMetadata:
        metadata = self.admin.get_ssp_metadata([ssp]).get(ssp)
        if metadata is None:
            raise SystemOperationError(f"cannot resolve a startpoint for {ssp}: the partition does not exist")
        return metadata

    def visit_specific(self, ssp: SystemStreamPartition, startpoint: StartpointSpecific) -> str:
        return startpoint.specific_offset

    def visit_timestamp(self, ssp: SystemStreamPartition, startpoint: StartpointTimestamp) -> str:
        return self.admin.offset_for_timestamp(ssp, startpoint.timestamp_offset)

    def visit_oldest(self, ssp: SystemStreamPartition, startpoint: StartpointOldest) -> str:
        metadata = self._metadata(ssp)
        return metadata.oldest_offset or metadata.upcoming_offset

    def visit_upcoming(self, ssp: SystemStreamPartition, startpoint: StartpointUpcoming) -> str:
        return self._metadata(ssp).upcoming_offset

    def visit_custom(self, ssp: SystemStreamPartition, startpoint: StartpointCustom) -> str:
        raise SystemOperationError(
            f"{type(self.admin).__name__} does not support {type(startpoint).__name__} (for {ssp})"
        )


class SystemConsumer(ABC):
    """Reads registered partitions from given offsets.

    ``poll`` returns envelopes whose ``key`` and ``message`` are still bytes; the runtime applies
    serdes. A partition that is bounded and complete yields one end-of-stream envelope
    (``IncomingMessageEnvelope.end_of_stream``) after its last record, and nothing after it.
    """

    def __enter__(self) -> Self:
        """Leaving stops the consumer; entering does not start it (partitions are registered first)."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @abstractmethod
    def register(self, ssp: SystemStreamPartition, offset: str) -> None:
        """Read ``ssp`` starting at ``offset`` (inclusive). Called before ``start``."""

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def poll(
        self, ssps: Set[SystemStreamPartition], timeout: float
    ) -> dict[SystemStreamPartition, list[IncomingMessageEnvelope]]:
        """Up to a batch of envelopes for each of ``ssps``, waiting at most ``timeout`` seconds for any."""

    def position(self, ssp: SystemStreamPartition) -> str | None:
        """The offset the next envelope of ``ssp`` would have, once every one polled so far was returned;
        None when the system cannot tell. It moves past offsets that hold no record a reader sees (Kafka's
        transaction markers and aborted records), which a reader waiting for a given offset needs to know."""
        return None

    @abstractmethod
    def stop(self) -> None: ...


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """Consecutive records of one partition, column by column: what a bulk read hands over instead of an
    envelope per record (a changelog replay needs only each record's key and value bytes).

    ``keys[i]`` and ``values[i]`` are the i-th record's, still bytes (no serde applied); ``keys`` is None when
    no record of the batch has a key, and a None value is a tombstone. ``next_offset`` is the offset a reader
    goes on at after the batch (past any gap the system skipped, such as an aborted transaction's records);
    ``size`` the bytes of the values, as ``IncomingMessageEnvelope.size`` counts them. A batch may be empty: it
    then only says that the read moved on to ``next_offset``."""

    keys: Sequence[bytes | None] | None
    values: Sequence[bytes | None]
    next_offset: str
    size: int

    def __len__(self) -> int:
        return len(self.values)


@runtime_checkable
class BulkReadingSystemConsumer(Protocol):
    """The capability of a consumer that hands over a partition's records between two offsets in bulk, as
    ``RecordBatch`` columns with no envelope per record (the embedded log). A changelog restore asks for it
    and, for systems without it (Kafka, Kinesis), reads envelope by envelope through ``poll``."""

    def read_range(self, ssp: SystemStreamPartition, start: str, end: str) -> Generator[RecordBatch, None, None]:
        """The records of ``ssp`` from ``start`` through ``end`` (inclusive), in offset order, in batches, on a
        consumer that was neither registered nor started (``stop`` releases what the read holds).

        Never a record past ``end``. It may stop before ``end`` when what follows cannot be read now (held
        by a transaction still open): the last batch's ``next_offset`` says where a reader goes on, by
        ``poll``, which waits for it. Nothing is read when ``start`` is past ``end``. A ``start`` the
        partition no longer holds raises ``OffsetOutOfRangeError``, and a partition that cannot be read an
        error naming it. A generator, so that closing it early releases the partition it reads."""


@runtime_checkable
class DescribingSystemConsumer(Protocol):
    """The capability of a consumer that reads the offsets of the partitions it is about to be registered for and
    keeps what that opened for ``register``: a container asks it for its input partitions' metadata instead of the
    system's admin, so each partition is opened once at start-up rather than once by the admin and again by the
    consumer (the embedded log, where an open is a file and its SQLite connection). Systems without it are asked
    through their admin, as Samza does."""

    def describe(
        self, ssps: Iterable[SystemStreamPartition]
    ) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        """What ``SystemAdmin.get_ssp_metadata`` answers for ``ssps``, on a consumer not yet started: a partition
        that does not exist is left out, one that cannot be read raises naming it. What it kept open and no
        ``register`` took is released by ``start`` or ``stop``."""


_BYTES_OR_NONE = frozenset({bytes, type(None)})


def all_none(values: Sequence[object]) -> bool:
    """Whether every value is None (also when there is none): a column of keys or headers that a batch may
    leave out. The first value decides most columns without counting."""
    return not values or (values[0] is None and values.count(None) == len(values))


def all_bytes_or_none(values: Iterable[object]) -> bool:
    """Whether every value is bytes or None, checked in C (the set of the values' types): what a batch
    must hold to take a producer's batch path."""
    return set(map(type, values)) <= _BYTES_OR_NONE


class SystemProducer(ABC):
    """Writes envelopes whose ``key``, ``message`` and ``partition_key`` are already bytes.

    ``send`` may buffer; ``flush`` returns only when everything sent before it is durable in the
    system, and raises if any of it failed — this is what makes checkpoints at-least-once.
    """

    def __enter__(self) -> Self:
        """Leaving flushes and stops the producer; entering does not start it."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def register(self, source: str) -> None:  # noqa: B027 - optional hook
        """Declare a source (a task name) that will send; flush is per source."""

    def set_writer(self, writer: WriterToken) -> None:  # noqa: B027 - optional hook
        """Called before ``start`` by a container: every write of this producer is on behalf of ``writer``.

        A system that fences writers refuses this producer's writes, with ``WriterFencedError``, once a
        newer attempt of the container (or a newer generation) has written or claimed the partition."""

    def claim(self, ssp: SystemStreamPartition) -> None:  # noqa: B027 - optional hook
        """Fence off older writers of ``ssp`` now, before the caller reads its end (a store's restore):
        nothing a zombie appends afterwards can land behind the offsets the caller's checkpoints name."""

    def describe(
        self, ssps: Iterable[SystemStreamPartition]
    ) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        """What ``SystemAdmin.get_ssp_metadata`` answers for those of ``ssps`` this producer can read through
        what it already holds, such as a partition it just claimed (the embedded log: the partition file the
        claim opened, one query on its connection); the others are left out, for the admin to answer. This
        default holds none.

        A store's restore asks here first, right after the claim: on the embedded log the admin would otherwise
        open each changelog partition a second time, once per task at every start."""
        return {}

    def written_offsets(self, ssps: Iterable[SystemStreamPartition]) -> dict[SystemStreamPartition, str]:
        """The offset of the newest record this producer appended to each of ``ssps`` since it started (the
        records of an open transaction included); a partition it appended nothing to is left out. This
        default knows none.

        A changelog snapshot takes the end of the task's changelog partition from here, the way Kafka Streams
        takes it from its producer's acknowledgements: the task claimed the partition and writes it through
        this producer alone, so the newest record appended is the partition's end, positively given by the
        append itself, and the commit asks the admin nothing. Only what an append returned may be reported:
        never an offset the system did not acknowledge."""
        return {}

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None: ...

    def send_batch(
        self, source: str, stream: SystemStream, messages: Sequence[bytes | None], keys: Sequence[bytes | None] | None
    ) -> None:
        """Send ``messages[i]`` keyed ``keys[i]`` (bytes; no keys: ``None`` each) to ``stream``, in order, as
        ``send`` would one by one. This default builds the envelopes; a producer with a cheaper path for a
        batch (Kafka's, the embedded log's) overrides it."""
        for message, key in zip(messages, repeat(None) if keys is None else keys, strict=False):
            self.send(source, OutgoingMessageEnvelope(stream, message, key))

    @abstractmethod
    def flush(self, source: str) -> None: ...

    @property
    def transactional(self) -> bool:
        """Whether this producer writes in transactions that ``commit_transaction`` ends (what exactly-once
        needs of every producer it writes through)."""
        return False

    @property
    def flush_covers_every_source(self) -> bool:
        """Whether a started producer's ``flush(source)`` makes every source's sends durable, not only
        ``source``'s (a client that can only flush as a whole, or whose flush commits a transaction). Callers
        that share it between threads then let the sends already waiting go before a flush, so that one flush
        covers them all (``systems.producers.SerializedProducer``)."""
        return False

    def commit_transaction(self) -> None:  # noqa: B027 - optional hook
        """Make everything sent since the last call visible, atomically, and begin the next transaction. Only a
        ``transactional`` producer whose ``flush`` does not commit (exactly-once) needs it; a no-op otherwise."""

    def send_lingering(self, drained: bool = False) -> float | None:
        """Send what ``send`` held back for batching once it waited ``linger.ms``, or at once when ``drained``:
        the run loop found no input waiting, so no record would join the batch before ``linger.ms`` (lingering
        then only adds latency). The run loop calls this between batches. Returns the seconds until what is
        still held back must go, None when nothing is (this default: a producer that sends on its own, as
        Kafka's does in the background)."""
        return None

    @abstractmethod
    def stop(self) -> None:
        """Flush everything and release resources."""


@dataclass(frozen=True)
class SystemContext:
    """What a system factory may need from the process that builds it, handed to it instead of built by it.

    A container's services (``millstream.runtime.services``) hand their own; the system registry hands a
    driver-side one."""

    open_metadata_store: Callable[[], MetadataStore]
    """A new connection to the job's metadata store, not yet opened; the caller closes it. For what runs on a
    thread of its own and must not share the container's (a consumer's lease store) or runs once (a fence
    check)."""


class SystemConfigView(ConfigView):
    """A system's own keys under ``systems.<s>.`` (a log's, Kafka's, Kinesis's), read as a named section:
    ``settings.view(LogSystemConfig, "log")`` parses them once per settings.

    The namespace is shared with ``samza.*``, ``streams.*`` and the client prefixes a factory hands through
    (``SystemFactory.open_prefixes``), which other schemas read or no schema checks: only this schema's own keys
    are parsed here (``SystemFactory.config_keys`` is what refuses the others)."""

    SECTION: ClassVar[str] = "systems.{name}."

    @classmethod
    def read(cls, config: Config, name: object = None) -> Self:
        prefix = cls.prefix_for(name)
        keys = cls.keys()
        return cls.parse({k: v for k, v in config.subset(prefix).items() if k in keys}, prefix)

    @classmethod
    def keys(cls) -> frozenset[str]:
        """The keys this schema accepts, relative to ``systems.<s>.`` (a factory's ``config_keys``)."""
        return frozenset(info.alias or name for name, info in cls.model_fields.items())


@dataclass(frozen=True, slots=True)
class FileBudget:
    """The most file descriptors a container's admin, consumer and producer of a system hold at once, and the
    config keys that bound them (what a message about ``ulimit -n`` names)."""

    descriptors: int
    keys: tuple[str, ...]


class SystemFactory(ABC):
    """Builds a system's admin, consumers and producers from config.

    ``config_keys`` lists the keys (relative to ``systems.<name>.``, outside ``samza.`` and
    ``streams.``) this system accepts; any other key there is a configuration error. None means the
    system's namespace is open (e.g. it passes keys through to a client library).

    A factory never opens the job's metadata store itself: what it needs comes through its
    :class:`SystemContext` (``bind``), which the composition root that built it hands over.

    Each method's ``config`` is the job's ``Settings``: the flat config (a factory reads its open namespace
    with ``config.subset``) whose typed views are parsed once and kept, so a factory reads its own keys with
    ``config.view(MySystemConfig, system_name)`` (a ``SystemConfigView``) and the job's with ``config.task``
    instead of parsing them at each admin, consumer and producer it builds. A factory written against
    ``Config`` still works: ``Settings`` is one.
    """

    config_keys: ClassVar[frozenset[str] | None] = frozenset()
    open_prefixes: ClassVar[tuple[str, ...]] = ()
    """Key prefixes under ``systems.<name>.`` handed through to a client library unchecked."""

    _context: SystemContext | None = None

    def bind(self, context: SystemContext) -> Self:
        """Hand the factory its context; returns the factory."""
        self._context = context
        return self

    @property
    def context(self) -> SystemContext:
        """The context the composition root bound; a factory built by hand has none."""
        if self._context is None:
            raise MillstreamError(
                f"{type(self).__name__} has no SystemContext: build it through a container's services or the "
                "system registry (millstream.composition.systems.system_factory), which bind one"
            )
        return self._context

    @abstractmethod
    def get_admin(self, system_name: str, config: Settings) -> SystemAdmin: ...

    def transactional(self, system_name: str, config: Settings) -> bool:
        """Whether the system's container producers can write in transactions a commit ends (exactly-once)."""
        return False

    def describing_consumers(self, system_name: str, config: Settings) -> bool:
        """Whether the system's consumers are ``DescribingSystemConsumer``: a container then creates its consumer
        before it reads its tasks' partitions' offsets, and asks the consumer instead of the admin."""
        return False

    @abstractmethod
    def get_consumer(self, system_name: str, config: Settings) -> SystemConsumer: ...

    @abstractmethod
    def get_producer(self, system_name: str, config: Settings) -> SystemProducer: ...

    def key_partitioner(self) -> Callable[[bytes, int], int] | None:
        """The partition this system's producers send a key (serialized bytes) to, given the partition
        count; None when it cannot be computed outside a producer (the key alone does not decide it).

        Bulk builds of adjunct stores use it to put each record where the task reading the key's
        partition looks for it, so it must be a picklable module-level function: it runs in Spark
        executors."""
        return None

    def file_budget(self, system_name: str, config: Settings) -> FileBudget | None:
        """The descriptors a container's admin, consumer and producer of this system may hold at once, when its
        config bounds them; None (the default) when not: the container checks ``ulimit -n`` only for the others."""
        return None

    def validate_job(self, system_name: str, config: Settings) -> None:  # noqa: B027 - optional hook
        """Refuse, with a ``ConfigError`` naming the key, a job this input system cannot run (e.g.
        Kinesis with stateful stores); the coordinator calls it for each input system when planning."""
