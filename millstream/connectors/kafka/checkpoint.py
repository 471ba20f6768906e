"""Checkpoints in a Kafka topic, as Samza's ``KafkaCheckpointManager`` keeps them.

**Topic.** One single-partition compacted topic per job (``task.checkpoint.topic``, default
``__millstream-checkpoint-<job.name>-<job.id>``) on ``task.checkpoint.system``. A record's key is
Samza's JSON ``{"systemstreampartition-grouper-factory": <grouper FQCN>, "taskName": <task>,
"type": "checkpoint"}`` for a ``CheckpointV1`` (Samza's V1 JSON) and ``"type": "checkpoint-v2"`` for
a ``CheckpointV2`` (Samza's V2 JSON); compaction keeps each task's latest record of each type.

**Reading** scans the topic from the beginning once, then only what was appended since, always up
to the high watermark as of the call. Records of a version not in ``task.checkpoint.read.versions``
are skipped unread (so a job reading V1 ignores V2 records, and vice versa); of a type this
millstream does not know, skipped with a warning. Among a task's latest record of each version
read, :func:`select_checkpoint` chooses by priority and ``task.live.checkpoint.max.age.ms``, the
records' timestamps being their write times — the same choice a scan of the compacted topic gives.
A record that cannot be read (bad key, bad JSON, a grouper other than the job's) fails the read
when ``task.checkpoint.validation.enabled`` (the default) and is skipped with a warning otherwise.

**Writing is fenced, with Kafka transactions plus the metadata store.** Each container writes
through a transactional producer whose ``transactional.id`` is the container's
(``millstream-checkpoint-<job>-<container id>``). A write is:

1. begin a transaction and append the checkpoint (it is in the log, invisible to readers);
2. check in the metadata store that the job is still at the writer's generation and the container
   still at the writer's attempt (``WriterFence``); if not, abort and raise ``FencedError``;
3. commit.

A container's tasks finish their commits on a thread pool and hand their checkpoints to one group commit
(``checkpoint/group_commit.py``), which writes those of every task committing at the same time as one batch
(``write_batch``): one transaction, one produce batch and one flush for the whole batch, one record per task
and version as Samza writes them. A producer runs one transaction at a time: batches arriving meanwhile are
grouped too, and the first writer to get the producer writes every waiting record in one transaction (each
task's commit returns once its record is committed).

Why this is as strong as the SQLite manager's compare-and-put: a newer writer (a new attempt or a
new generation) fences the old one *before* it reads the checkpoints it resumes from, and that
read goes up to the high watermark, waiting for open transactions. So if the old writer's check
(step 2) passed, its record was already in the log when the fence was raised, and the new writer's
read waits for and includes it; every later write of the old writer fails the check. A new attempt
of the same container additionally aborts the old attempt's open transaction at once (starting a
producer with the same ``transactional.id`` fences the old one), so the new attempt's read never
waits. Aborted records are never visible and are removed by the log cleaner, so compaction keeps
exactly the accepted checkpoints. A plain idempotent producer could not do this: a write cannot be
taken back once the check after it fails, and a check before it races with the fence.

Transient failures (brokers restarting, a coordinator moving) are retried with exponential
backoff (0.2 s up to 2 s) for :data:`WRITE_TIMEOUT_S`; a producer made unusable is replaced, after
checking the fence again, so a replacement never fences a newer attempt. A producer the brokers fenced
(a transaction timed out while they restarted) is such an unusable producer, not a ``FencedError``: only a
newer attempt or generation in the metadata store fences a writer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from millstream.checkpoint.base import CheckpointManager, WriterFence, require_fence
from millstream.checkpoint.checkpoint import (
    CHECKPOINT_TYPES,
    Checkpoint,
    CheckpointFormatError,
    deserialize_checkpoint,
    select_checkpoint,
    serialize_checkpoint,
    version_of_type,
)
from millstream.checkpoint.factory import CheckpointManagerFactory
from millstream.config.settings import Settings
from millstream.connectors.kafka.admin import KafkaSystemAdmin
from millstream.connectors.kafka.config import KafkaClientSettings, resolve_kafka_system
from millstream.connectors.kafka.replicated_log import (
    LogReader,
    TransactionalWriter,
    classify,
    ensure_log_topic,
    log_topic_name,
)
from millstream.contracts.metadata import FencedError, MetadataStore
from millstream.contracts.systems import StreamOwner, StreamSpec, SystemProducer
from millstream.errors import MillstreamError
from millstream.model import OutgoingMessageEnvelope, SystemStream, TaskName

log = logging.getLogger(__name__)

CHECKPOINT_TYPE = CHECKPOINT_TYPES[1]
CHECKPOINT_V2_TYPE = CHECKPOINT_TYPES[2]
GROUPER_FIELD = "systemstreampartition-grouper-factory"
TASK_FIELD = "taskName"
TYPE_FIELD = "type"
SAMZA_GROUPERS = {
    "GroupByPartition": "org.apache.samza.container.grouper.stream.GroupByPartitionFactory",
    "GroupBySystemStreamPartition": "org.apache.samza.container.grouper.stream.GroupBySystemStreamPartitionFactory",
}
TRANSACTION_TIMEOUT_MS = 30_000
WRITE_TIMEOUT_S = 300.0
READ_TIMEOUT_S = 120.0
BACKOFF_S = (0.2, 2.0)
"""Backoff between attempts of a checkpoint write: capped low, so a write resumes within seconds of the
brokers coming back instead of sleeping through most of a long backoff."""


class CheckpointWriteError(MillstreamError):
    """A checkpoint could not be written within the retry window; names the topic and task."""


@dataclass
class _PendingWrite:
    """One task's checkpoint record waiting for a transaction, and how that transaction ended."""

    task_name: TaskName
    record: tuple[bytes, bytes]
    done: bool = False
    error: BaseException | None = field(default=None, repr=False)

    def finish(self, error: BaseException | None) -> None:
        self.done, self.error = True, error


def checkpoint_key(grouper_factory: str, task_name: str, kind: str = CHECKPOINT_TYPE) -> bytes:
    """Samza's ``KafkaCheckpointLogKey`` JSON, byte for byte the same for the same task (compaction
    keeps one record per distinct key)."""
    return orjson.dumps({GROUPER_FIELD: grouper_factory, TASK_FIELD: task_name, TYPE_FIELD: kind})


def grouper_factory_name(config: Settings) -> str:
    """The grouper as Samza names it in checkpoint keys: its factory's fully qualified class name."""
    configured = config.job.grouper_factory
    return SAMZA_GROUPERS.get(configured, configured)


def checkpoint_system(config: Settings) -> str:
    """The Kafka system of the checkpoint topic: ``task.checkpoint.system``, else ``job.coordinator.system``,
    else the only Kafka system configured."""
    return resolve_kafka_system(
        config,
        config.task.checkpoint_system or config.job.coordinator_system,
        "task.checkpoint.system",
        "task.checkpoint.factory=kafka",
    )


class KafkaCheckpointManager(CheckpointManager):
    """Checkpoints of one job in its Kafka checkpoint topic; read-only without a ``WriterFence``."""

    def __init__(self, config: Settings, store: MetadataStore, fence: WriterFence | None = None) -> None:
        job = config.job
        task = config.task
        self.system = checkpoint_system(config)
        self.kafka = KafkaClientSettings(config, self.system)
        self.topic = task.checkpoint_topic or log_topic_name("checkpoint", job.name, job.id)
        self.replication_factor = task.checkpoint_replication_factor
        self.validation = task.checkpoint_validation_enabled
        self.read_versions = tuple(task.checkpoint_read_versions)
        self.max_age_ms = task.live_checkpoint_max_age_ms
        self.grouper_factory = grouper_factory_name(config)
        self.store = store
        self.fence = fence
        self._job_key = job.job_key
        self._tasks: set[TaskName] = set()
        self._latest: dict[TaskName, dict[int, tuple[int, int, Checkpoint]]] = {}
        """task → version → (offset, written at ms, checkpoint) of the task's latest record of that version."""
        self._reader: LogReader | None = None
        self._writer: TransactionalWriter | None = None
        self._absent = False
        """A read-only manager found no checkpoint topic: there is nothing to read."""
        self.skipped = 0
        """Records skipped because they could not be read (validation off)."""
        self._queue: list[_PendingWrite] = []
        self._queue_lock = threading.Lock()
        self._transaction_lock = threading.Lock()
        """Held for a whole transaction: the producer runs one at a time (see ``write_checkpoint``)."""
        self.exactly_once = task.exactly_once
        self._in_transaction: SystemProducer | None = None
        """Exactly-once: the container's transactional producer checkpoints are appended through."""

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """As a writer: create the topic if missing and take over the container's transactional id,
        which aborts and fences any earlier attempt of this container. A reader (no fence) creates
        nothing: a job that never checkpointed has no checkpoints to show."""
        if self.fence is None:
            if self.topic not in KafkaSystemAdmin(self.system, self.kafka).partition_counts([self.topic]):
                self._absent = True
                return
        else:
            ensure_log_topic(self.kafka, self.topic, self.replication_factor, "the checkpoint")
        self._absent = False
        self._open_reader()
        if self.fence is not None and not self.exactly_once:  # exactly-once writes through the container's
            self._open_writer(time.monotonic() + WRITE_TIMEOUT_S)

    def register(self, task_name: TaskName) -> None:
        self._tasks.add(task_name)

    def stop(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _open_reader(self) -> LogReader:
        if self._reader is None:
            self._reader = LogReader(self.kafka, self.topic, self._apply, client="checkpoint-reader")
            self._latest = {}
        return self._reader

    def _open_writer(self, deadline: float) -> TransactionalWriter:
        fence = require_fence(self.fence, "write checkpoints")
        if self._writer is None:
            self._writer = TransactionalWriter(
                self.kafka,
                self.topic,
                f"millstream-checkpoint-{self._job_key}-{fence.container_id}",
                transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
                client="checkpoint-writer",
            )
        if not self._writer.is_open:
            # Starting the producer fences every other producer of this container: only do it while
            # this attempt is still the container's current one.
            self._check_fence(fence, "start writing checkpoints")
            self._writer.open(deadline)
        return self._writer

    # --- reading ---------------------------------------------------------------------------------

    def _catch_up(self) -> None:
        if self._absent:
            return
        self._open_reader().catch_up(time.monotonic() + READ_TIMEOUT_S)

    def read_last_checkpoint(self, task_name: TaskName) -> Checkpoint | None:
        self._catch_up()
        return self._select(task_name)

    def read_all(self) -> dict[TaskName, Checkpoint]:
        self._catch_up()
        chosen = {task: self._select(task) for task in self._latest}
        return {task: checkpoint for task, checkpoint in chosen.items() if checkpoint is not None}

    def _select(self, task_name: TaskName) -> Checkpoint | None:
        records = sorted(self._latest.get(task_name, {}).values(), key=lambda record: record[0])
        return select_checkpoint(
            [(checkpoint, written) for _, written, checkpoint in records], self.read_versions, self.max_age_ms
        )

    def _apply(self, message: Any) -> None:
        where = f"checkpoint topic '{self.topic}' partition 0 offset {message.offset()}"
        raw_key = message.key()
        try:
            key = orjson.loads(raw_key)
            kind = key[TYPE_FIELD]
            task_name = TaskName(key[TASK_FIELD])
            grouper = key[GROUPER_FIELD]
            if not isinstance(kind, str) or not isinstance(grouper, str):
                raise TypeError("type and grouper factory must be strings")
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            self._invalid(f"{where}: the key {raw_key!r} is not a checkpoint key ({error})")
            return
        version = version_of_type(kind)
        if version is None:
            log.warning("%s: skipped a record of unknown type %r (task '%s')", where, kind, task_name)
            return
        if version not in self.read_versions:
            return  # task.checkpoint.read.versions does not include it: not even parsed
        if grouper != self.grouper_factory:
            problem = (
                f"{where}: the checkpoint of task '{task_name}' was written with grouper '{grouper}', "
                f"but the job uses '{self.grouper_factory}'"
            )
            if self.validation:
                raise CheckpointFormatError(
                    f"{problem} (set task.checkpoint.validation.enabled=false to read it anyway)"
                )
            log.warning("%s; reading it anyway (task.checkpoint.validation.enabled=false)", problem)
        value = message.value()
        versions = self._latest.setdefault(task_name, {})
        if value is None:
            versions.pop(version, None)
            if not versions:
                del self._latest[task_name]
            return
        try:
            checkpoint = deserialize_checkpoint(version, value, where=f"{where} (task '{task_name}')")
        except CheckpointFormatError as error:
            self._invalid(str(error))
            return
        versions[version] = (int(message.offset()), int(message.timestamp()[1]), checkpoint)

    def _invalid(self, problem: str) -> None:
        if self.validation:
            raise CheckpointFormatError(
                f"{problem} (set task.checkpoint.validation.enabled=false to skip unreadable checkpoints)"
            )
        self.skipped += 1
        log.warning("%s: skipped (task.checkpoint.validation.enabled=false)", problem)

    # --- writing ---------------------------------------------------------------------------------

    def join_transaction(self, producer: SystemProducer) -> None:
        """Exactly-once: append checkpoints through the container's transactional producer of this system;
        they are committed with the output and changelog writes they cover (Kafka Streams'
        ``sendOffsetsToTransaction``, with the checkpoint topic in place of consumer-group offsets)."""
        self._in_transaction = producer

    def write_checkpoint(self, task_name: TaskName, checkpoint: Checkpoint) -> None:
        """Append the checkpoint in a transaction of the container's producer and commit it; under exactly-once,
        append it to the container's open transaction, which the container's commit ends (``write_batch``)."""
        failures = self.write_batch([(task_name, checkpoint)])
        if task_name in failures:
            raise failures[task_name]

    def write_batch(self, checkpoints: Sequence[tuple[TaskName, Checkpoint]]) -> dict[TaskName, BaseException]:
        """Append a batch of checkpoints (one record per task and version, Samza's format) in one transaction:
        one produce batch, one flush, one fence check and one commit; under exactly-once, append them to the
        container's open transaction, which the container's commit ends. All or none: a failure raises for the
        whole batch.

        Batches may also arrive from several threads at once (a manager used without ``CheckpointGroupCommit``),
        and a transactional producer runs one transaction at a time: writes that arrive while a transaction is
        under way wait, and the first of them to get the producer writes every waiting record in one
        transaction.
        """
        if not checkpoints:
            return {}
        tasks = sorted({task_name for task_name, _ in checkpoints})
        fence = require_fence(self.fence, f"write the checkpoints of task(s) {', '.join(tasks)}")
        writes: list[_PendingWrite] = []
        for task_name, checkpoint in checkpoints:
            kind = CHECKPOINT_TYPES.get(checkpoint.version)
            if kind is None:
                raise CheckpointFormatError(
                    f"task '{task_name}': cannot write a version {checkpoint.version} checkpoint"
                )
            record = (checkpoint_key(self.grouper_factory, task_name, kind), serialize_checkpoint(checkpoint))
            writes.append(_PendingWrite(task_name, record))
        if self._in_transaction is not None:
            stream = SystemStream(self.system, self.topic)
            for write in writes:
                key, value = write.record
                self._in_transaction.send(write.task_name, OutgoingMessageEnvelope(stream, value, key, partition=0))
            return {}
        with self._queue_lock:
            self._queue.extend(writes)
        with self._transaction_lock:
            if not writes[-1].done:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                try:
                    self._write_batch(fence, batch)
                except BaseException as error:
                    for pending in batch:
                        pending.finish(error)
                    raise
                for pending in batch:
                    pending.finish(None)
        failed = next((write.error for write in writes if write.error is not None), None)
        if failed is not None:  # written, and failed, by another thread's write
            raise failed
        return {}

    def _write_batch(self, fence: WriterFence, batch: list[_PendingWrite]) -> None:
        tasks = ", ".join(f"'{pending.task_name}'" for pending in batch)
        what = f"checkpoint of task{'s' if len(batch) > 1 else ''} {tasks}"
        deadline = time.monotonic() + WRITE_TIMEOUT_S
        backoff = BACKOFF_S[0]
        while True:
            writer: TransactionalWriter | None = None
            try:
                writer = self._open_writer(deadline)
                writer.begin()
                writer.append([pending.record for pending in batch], deadline)
                if not fence.is_current(self.store):
                    writer.abort(deadline)
                    raise self._fenced(fence, f"{what} refused")
                writer.commit(deadline)
                return
            except FencedError:
                raise
            except Exception as error:  # classified below; anything unknown is re-raised
                kind = classify(error)
                if kind == "fenced":
                    if writer is not None:
                        writer.discard()
                    kind = self._fenced_by_broker(fence, what, error)
                if kind == "other" and not isinstance(error, MillstreamError):
                    raise
                if time.monotonic() + backoff > deadline:
                    raise CheckpointWriteError(
                        f"{what} to topic '{self.topic}' at {self.kafka.bootstrap_servers} failed for "
                        f"{WRITE_TIMEOUT_S:.0f}s: {error}"
                    ) from error
                log.warning("%s to topic '%s' failed (%s); retrying in %.1fs", what, self.topic, error, backoff)
                self._reset_writer(writer, kind, deadline)
                time.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_S[1])

    def _fenced_by_broker(self, fence: WriterFence, what: str, error: BaseException) -> str:
        """A producer fenced while this attempt is still the container's current one was fenced by the brokers,
        not by a newer attempt (which raises the epoch in the metadata store before it starts its producer):
        a transaction the restarted coordinator timed out bumps the producer epoch. That is transient — a new
        producer is started (after checking the fence again) and the write is done again; only a real fence
        is a ``FencedError``."""
        if not fence.is_current(self.store):
            raise self._fenced(fence, f"{what} refused") from None
        log.warning("%s: the producer was fenced by the brokers, not by a newer attempt (%s)", what, error)
        return "fatal"

    def _reset_writer(self, writer: TransactionalWriter | None, kind: str, deadline: float) -> None:
        if writer is None or not writer.is_open:
            return
        if kind in ("abort", "retry"):
            try:
                writer.abort(min(deadline, time.monotonic() + 10))
                return
            except Exception as error:  # the producer is unusable; the next attempt starts another
                log.debug("abort failed: %s", error)
        writer.discard()

    def clear_checkpoints(self) -> None:
        """Delete the checkpoint topic and create it empty. An operator's action on a stopped job; a
        fenced manager refuses it once superseded."""
        if self.fence is not None:
            self._check_fence(self.fence, "clear checkpoints")
        self.stop()
        admin = KafkaSystemAdmin(self.system, self.kafka)
        admin.clear_stream(StreamSpec(self.system, self.topic))
        ensure_log_topic(self.kafka, self.topic, self.replication_factor, "the checkpoint")
        self._latest = {}
        self._absent = False

    # --- fencing ---------------------------------------------------------------------------------

    def _check_fence(self, fence: WriterFence, action: str) -> None:
        if not fence.is_current(self.store):
            raise self._fenced(fence, f"cannot {action}")

    @staticmethod
    def _fenced(fence: WriterFence, what: str) -> FencedError:
        return FencedError(
            f"{what}: container '{fence.container_id}' (generation {fence.generation}, attempt {fence.epoch}) "
            "has been superseded by a newer generation or a newer attempt of the container"
        )


class KafkaCheckpointManagerFactory(CheckpointManagerFactory):
    """``task.checkpoint.factory=kafka`` (Samza's ``KafkaCheckpointManagerFactory`` class name is an alias)."""

    def get_checkpoint_manager(
        self, config: Settings, store: MetadataStore, fence: WriterFence | None = None
    ) -> CheckpointManager:
        return KafkaCheckpointManager(config, store, fence)

    def claim_resources(self, config: Settings) -> None:
        """The checkpoint topic is owned by one job: checkpoint keys name the grouper and the task, not the
        job, so a second job on the topic (a copied config keeping ``task.checkpoint.topic``) would resume
        from the other's offsets and skip or repeat input without an error."""
        job = config.job
        task = config.task
        system = checkpoint_system(config)
        topic = task.checkpoint_topic or log_topic_name("checkpoint", job.name, job.id)
        admin = KafkaSystemAdmin(system, KafkaClientSettings(config, system), config=config)
        previous = admin.claim_stream(
            topic,
            StreamOwner(job.job_key),
            takeover=task.checkpoint_owner_takeover,
            takeover_key="task.checkpoint.owner.takeover",
        )
        if previous is not None and previous != StreamOwner(job.job_key):
            log.warning(
                "checkpoint topic '%s': handed over from %s to job '%s'; remove task.checkpoint.owner.takeover",
                topic,
                previous.describe(),
                job.job_key,
            )

    def transaction_system(self, config: Settings) -> str | None:
        return checkpoint_system(config)
