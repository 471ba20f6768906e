"""Typed views of the flat config, one per concern, and the startup validation built from them.

Closed namespaces (``job.``, ``task.``, ``systems.``, ``serializers.``, ``metadata.``, ``stores.``,
``metrics.``, ...) accept only the keys declared here or by the system factory they name; anything else in them stops
the job before it starts. Other top-level namespaces (``spark.``, ``sensitive.``, users' own keys)
are open.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from millstream.config.core import Config
from millstream.config.secrets import REDACTED, is_secret_key
from millstream.errors import ConfigError, MillstreamError
from millstream.model import SystemStream, SystemStreamPartition

CLOSED_NAMESPACES = (
    "job.",
    "task.",
    "systems.",
    "serializers.",
    "metadata.",
    "stores.",
    "startpoint.",
    "blob.",
    "app.",
    "metrics.",
    "tables.",
)
DEFAULT_SYSTEM = "log"


def _split_list(value: Any) -> Any:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _parse_bool(value: Any) -> Any:
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "yes", "1", "on"):
            return True
        if lowered in ("false", "no", "0", "off"):
            return False
    return value


def _split_int_list(value: Any) -> Any:
    parts = _split_list(value)
    if isinstance(parts, list):
        return [int(part) if isinstance(part, str) and part.isdigit() else part for part in parts]
    return parts


CommaList = Annotated[list[str], BeforeValidator(_split_list)]
CheckpointVersions = Annotated[list[Literal[1, 2]], BeforeValidator(_split_int_list)]
"""Checkpoint versions, e.g. ``2,1``."""
Bool = Annotated[bool, BeforeValidator(_parse_bool)]


def config_flag(config: Config, key: str, default: bool = False) -> bool:
    """A boolean key read outside its own view, spelled as the views accept it (true/yes/1/on)."""
    value = _parse_bool(config.get(key, default))
    if not isinstance(value, bool):
        raise ConfigError(f"config key '{key}' must be true or false, got '{value}'")
    return value


OffsetDefault = Literal["oldest", "upcoming"]
TrimmedOffsetPolicy = Literal["fail", "oldest", "upcoming"]
ProcessErrorMode = Literal["fail", "skip", "dead-letter"]
ChangelogMismatchPolicy = Literal["fail", "reset", "replay"]
ProcessingGuarantee = Literal["at-least-once", "exactly-once"]
AsyncOrdering = Literal["partition", "key", "unordered"]
EXACTLY_ONCE_COMMIT_MS = 100
"""``task.commit.ms`` under exactly-once unless set: output becomes visible only when its transaction commits
with the checkpoint, so the commit interval is the latency (Kafka Streams commits every 100 ms under EOS)."""

View = TypeVar("View", bound="ConfigView")


class ConfigView(BaseModel):
    """A closed, typed slice of the config under ``PREFIX``; field aliases are the key suffixes."""

    # Attribute docstrings become field descriptions: the generated configuration reference reads them.
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, use_attribute_docstrings=True)
    PREFIX: ClassVar[str] = ""

    @classmethod
    def parse(cls: type[View], values: Mapping[str, str], prefix: str) -> View:
        keys = {info.alias or name for name, info in cls.model_fields.items()}
        unknown = sorted(key for key in values if key not in keys)
        if unknown:
            # Checked here, not by pydantic: populate_by_name would accept field names (commit_ms) as keys.
            raise ConfigError(
                "; ".join(
                    f"unknown config key '{prefix}{key}' (accepted under '{prefix}': {accepted_keys(cls)})"
                    for key in unknown
                )
            )
        try:
            return cls.model_validate(dict(values))
        except ValidationError as error:
            raise _config_error(cls, error, prefix) from None

    @classmethod
    def prefix_for(cls, name: object) -> str:
        """The keys' prefix of the section ``name`` of a schema of named sections (a store, a table, ...); the
        namespace's own ``PREFIX`` for the others, which take no name."""
        if name is not None:
            raise TypeError(f"{cls.__name__} reads one namespace, '{cls.PREFIX}', not named sections")
        return cls.PREFIX

    @classmethod
    def of(cls: type[View], config: Config) -> View:
        """Parse this namespace of ``config`` anew. Being replaced by ``Settings.view``, which parses it once."""
        return cls.read(config)

    @classmethod
    def read(cls: type[View], config: Config, name: object = None) -> View:
        """Parse this schema's keys of ``config``: what ``Settings.view`` does once per settings."""
        prefix = cls.prefix_for(name)
        return cls.parse(config.subset(prefix), prefix)


def accepted_keys(cls: type[BaseModel]) -> str:
    return ", ".join(sorted((info.alias or name) for name, info in cls.model_fields.items()))


def _config_error(cls: type[BaseModel], error: ValidationError, prefix: str) -> ConfigError:
    problems = []
    for detail in error.errors():
        field = ".".join(str(part) for part in detail["loc"])
        key = f"{prefix}{field}"
        if detail["type"] == "extra_forbidden":
            problems.append(f"unknown config key '{key}' (accepted under '{prefix}': {accepted_keys(cls)})")
        else:
            shown = REDACTED if is_secret_key(key) else detail.get("input")
            problems.append(f"config key '{key}' has invalid value {shown!r}: {detail['msg']}")
    return ConfigError("; ".join(problems))


UNBOUNDED_ATTEMPTS = 1_000_000
"""Spark's attempts of a container when ``job.container.restart.failure.rate.max`` is its limit instead."""


class JobConfig(ConfigView):
    PREFIX: ClassVar[str] = "job."

    name: str = "millstream-job"
    """Names the job: with ``job.id`` it keys its metadata (checkpoints, job model, stop and drain signals)."""
    id: str = "1"
    """Tells apart instances of one job name sharing a metadata store."""
    container_count: int = Field(1, alias="container.count", ge=1)
    """Containers, each one long-running Spark task hosting several tasks."""
    container_retry_count: int = Field(3, alias="container.retry.count", ge=0)
    """Times Spark retries a failed container (``spark.task.maxFailures`` follows it); each retry resumes from its
    checkpoint. Not applied when ``container.restart.failure.rate.max`` limits the failures instead."""
    container_restart_backoff_initial_ms: int = Field(0, alias="container.restart.backoff.initial.ms", ge=0)
    """Delay before a failed container's next attempt starts restoring (0: at once). Each restart that follows
    within ``container.restart.backoff.reset.ms`` waits ``container.restart.backoff.multiplier`` times longer, so
    a container failing in a loop does not hammer its stores and brokers (Flink's exponential-delay strategy)."""
    container_restart_backoff_max_ms: int = Field(60_000, alias="container.restart.backoff.max.ms", ge=0)
    """Longest delay between a container's failure and its next attempt."""
    container_restart_backoff_multiplier: float = Field(2.0, alias="container.restart.backoff.multiplier", ge=1)
    """Factor by which the delay grows from one restart to the next; 1: a fixed delay."""
    container_restart_backoff_jitter: float = Field(0.1, alias="container.restart.backoff.jitter", ge=0, le=1)
    """Random share of each delay (±), so containers failing together do not restart in step."""
    container_restart_backoff_reset_ms: int = Field(300_000, alias="container.restart.backoff.reset.ms", ge=0)
    """An attempt that ran this long before failing was stable: the next delay starts again from the initial one."""
    container_restart_failure_rate_max: int = Field(0, alias="container.restart.failure.rate.max", ge=0)
    """Failures of one container allowed within ``container.restart.failure.rate.interval.ms``; one more fails the
    job, naming this limit (Flink's failure-rate strategy). It replaces ``container.retry.count``: a container that
    fails now and then is restarted for as long as the job runs. 0: off, ``container.retry.count`` applies."""
    container_restart_failure_rate_interval_ms: int = Field(
        60_000, alias="container.restart.failure.rate.interval.ms", ge=1
    )
    """The sliding window in which ``container.restart.failure.rate.max`` counts a container's failures."""
    container_failure_repeat_limit: int = Field(2, alias="container.failure.repeat.limit", ge=0)
    """After how many identical failures of a container's user code (same task, stream, partition, offset and
    exception type, or the same ``init()``/``window()`` exception) the failure is deterministic and the job fails
    at once with its message instead of retrying: a retry resumes from the same checkpoint and would fail again.
    2: the second identical failure; 1: the first failure of user code is never retried; 0: never, every
    retry of ``container.retry.count`` is made."""
    grouper_factory: str = Field("GroupByPartition", alias="systemstreampartition.grouper.factory")
    """How partitions become tasks: ``GroupByPartition`` (one task per partition number across all inputs) or
    ``GroupBySystemStreamPartition`` (one task per partition)."""
    data_dir: str = Field(".millstream", alias="data.dir")
    """Where the embedded log, the metadata store and local stores live; relative to the config file."""
    stop_timeout_ms: int = Field(30_000, alias="coordinator.stop.timeout.ms", ge=0)
    """How long a graceful stop (Ctrl-C, SIGTERM) waits for containers to commit before Spark cancels the job."""
    drain_poll_interval_ms: int = Field(1000, alias="drain.poll.interval.ms", ge=1)
    """How often each container looks for a drain request (``millstream job drain``) in the metadata store."""
    slots_headroom: int = Field(1, alias="coordinator.slots.headroom", ge=0)
    """Spark task slots kept free beside the containers for the driver's own jobs."""
    slots_wait_ms: int = Field(30_000, alias="coordinator.slots.wait.ms", ge=0)
    """How long the driver waits for a cluster's executors to register enough task slots (containers + headroom)
    before refusing to start, exit 2: a container without a slot would stay pending forever."""
    container_heartbeat_interval_ms: int = Field(2_000, alias="container.heartbeat.interval.ms", ge=1)
    """How often each container records that it is alive in the metadata store, from a thread of its own (so a
    long restore or a slow ``process`` still beats, but a frozen or cut-off process does not)."""
    container_liveness_timeout_ms: int = Field(10_000, alias="container.liveness.timeout.ms", ge=0)
    """A running container whose heartbeat has not changed for this long is silent (a lost host, a network
    partition, a frozen process): the driver kills its Spark task, and Spark starts the next attempt, which fences
    the silent one. Spark's own detection takes its network and worker timeouts (one to two minutes). 0: off."""
    driver_heartbeat_interval_ms: int = Field(2_000, alias="driver.heartbeat.interval.ms", ge=1)
    """How often the driver (``millstream run``, ``InProcessRunner``) records that it is alive in the metadata
    store, from a thread of its own, while its run lasts."""
    driver_liveness_timeout_ms: int = Field(180_000, alias="driver.liveness.timeout.ms", ge=0)
    """A run whose driver's heartbeat has not changed for this long has lost its driver: its containers commit and
    stop by themselves (never run headless), ``millstream job status`` says "driver lost", and ``millstream job
    drain`` refuses the run. Keep it above ``metadata.store.lock.lease.ms``: a process paused holding the SQLite
    store's write lock holds the driver's heartbeat back too, for up to that lease. 0: off."""
    startpoint_enabled: Bool = Field(True, alias="startpoint.enabled")
    """Fan out and apply startpoints (``millstream startpoint set``) when a job model is published."""
    logged_store_base_dir: str | None = Field(None, alias="logged.store.base.dir")
    """Where stores with a backup (changelog, blob store) live; default ``<job dir>/stores/logged``. A value
    starting with an environment variable (``$LOCAL_DISK/stores``) is expanded on the host that runs the container,
    so each host of a cluster keeps its stores on a local disk of its own."""
    non_logged_store_base_dir: str | None = Field(None, alias="non-logged.store.base.dir")
    """Where stores without a backup live; default ``<job dir>/stores/non-logged``; ``$VAR`` as above."""
    commit_thread_pool_size: int = Field(2, alias="container.commit.thread.pool.size", ge=1)
    """Minimum number of commit threads (async uploads) per container."""
    commit_thread_pool_max_size: int = Field(64, alias="container.commit.thread.pool.max.size", ge=1)
    """Commit threads (async uploads) = min(max(2 x tasks, size), max size), as in Samza."""
    restore_thread_pool_size: int = Field(2, alias="container.restore.thread.pool.size", ge=1)
    """Minimum number of threads restoring stores at container start."""
    restore_thread_pool_max_size: int = Field(64, alias="container.restore.thread.pool.max.size", ge=1)
    """Threads restoring stores at container start = min(max(stores to restore, size), max size)."""
    container_cpus: int | None = Field(None, alias="container.cpus", ge=1)
    """Cores each container's Spark task takes (stage-level scheduling: a resource profile with this many task
    cpus), so a container with several busy tasks gets the cores it needs and the slot check counts them. Unset:
    ``spark.task.cpus``. Needs a cluster master; in local mode it is not applied, and the driver says so."""
    container_memory_mb: int | None = Field(None, alias="container.memory.mb", ge=1)
    """Memory a container may use beside the JVM (RocksDB, the Python interpreter, the task), in MiB: the job is
    refused at start when the stores' RocksDB budget plus ``container.python.memory.mb`` exceeds it; with dynamic
    allocation each container's executor is sized with it (``memoryOverhead`` of the resource profile)."""
    container_python_memory_mb: int = Field(256, alias="container.python.memory.mb", ge=0)
    """What the sizing check reserves beside RocksDB for the Python worker: interpreter, user code, message
    batches, serdes. Raise it for tasks that hold much in Python objects."""
    container_rocksdb_memory_mb: int | None = Field(None, alias="container.rocksdb.memory.mb", ge=1)
    """One RocksDB memory limit for all the container's stores, in MiB: a block cache of this size shared by
    every store, with their memtables charged to it (a write buffer manager), replacing the per-store
    ``container.cache.size.bytes`` and write buffer budgets. Unset: each store has its own cache and memtables."""
    coordinator_system: str | None = Field(None, alias="coordinator.system")
    """The Kafka system holding the coordinator stream (``metadata.store.factory=kafka``); default: the
    only Kafka system configured."""
    coordinator_topic: str | None = Field(None, alias="coordinator.topic")
    """Default ``__millstream-coordinator-<job.name>-<job.id>``."""
    coordinator_replication_factor: int = Field(-1, alias="coordinator.replication.factor", ge=-1)
    """-1: the broker's ``default.replication.factor``."""
    shared_filesystem: Bool = Field(False, alias="shared.filesystem")
    """Declares that every host of a cluster sees the same files at the job's paths (``job.data.dir``, the log
    system's ``path``, ``metadata.store.path``, ``blob.store.local.dir``): an NFS or similar mount. On a Spark master
    other than ``local[N]``, the embedded log system, the SQLite metadata store and the ``local`` blob store are
    refused without it, because each host would otherwise keep its own copy of what must be one."""

    @property
    def job_key(self) -> str:
        return f"{self.name}-{self.id}"

    @property
    def container_max_attempts(self) -> int:
        """Spark's ``spark.task.maxFailures``: the retry count, or unbounded when the failure rate is the limit."""
        if self.container_restart_failure_rate_max:
            return UNBOUNDED_ATTEMPTS
        return self.container_retry_count + 1

    @property
    def job_dir(self) -> Path:
        return Path(self.data_dir) / "jobs" / self.job_key


class TaskConfig(ConfigView):
    PREFIX: ClassVar[str] = "task."

    class_name: str | None = Field(None, alias="class")
    """``module:Class`` of your ``StreamTask`` (a module beside the config needs no packaging)."""
    inputs: CommaList = Field(default_factory=list)
    """Input streams, ``system.stream`` separated by commas (a bare name means the ``log`` system)."""
    broadcast_inputs: CommaList = Field(default_factory=list, alias="broadcast.inputs")
    """Partitions given to every task: ``system.stream#0`` or ``system.stream#[0-3]``."""
    window_ms: int = Field(-1, alias="window.ms")
    """Interval of ``WindowableTask.window()`` calls; -1: never."""
    commit_ms: int = Field(60_000, alias="commit.ms")
    """Checkpoint interval; 0 or less: only on request, at end-of-stream and on stop. Default 60 s, and 100 ms
    under ``processing.guarantee=exactly-once``, where output becomes visible only at a commit."""
    processing_guarantee: ProcessingGuarantee = Field("at-least-once", alias="processing.guarantee")
    """``at-least-once``: output is visible as soon as it is written; after a crash the input since the last
    checkpoint is processed again, and what it wrote may appear twice (Samza's guarantee, Kafka Streams'
    ``at_least_once``). ``exactly-once``: a container's output, changelog writes, control messages and
    checkpoints are written in one transaction per commit and become visible together or not at all,
    so a crash never duplicates output or double-counts (Kafka Streams' ``exactly_once_v2``, Quix Streams'
    ``exactly-once``); it needs every output, changelog and the checkpoints on one system: one Kafka cluster
    (``task.checkpoint.factory=kafka``) or one embedded log (``task.checkpoint.factory=log``)."""
    poll_interval_ms: int = Field(50, alias="poll.interval.ms", ge=0)
    """Longest time a container's run loop waits in one poll for new messages."""
    shutdown_ms: int = Field(30_000, alias="shutdown.ms", ge=0)
    """Accepted for Samza configs (``task.shutdown.ms``); the stop is bounded by ``job.coordinator.stop.timeout.ms``."""
    drop_deserialization_errors: Bool = Field(False, alias="drop.deserialization.errors")
    """Skip (and count) messages whose key or value cannot be decoded, instead of failing naming stream, partition
    and offset."""
    drop_serialization_errors: Bool = Field(False, alias="drop.serialization.errors")
    """Skip (and count) output that cannot be serialized, instead of failing."""
    dead_letter_stream: str | None = Field(None, alias="dead.letter.stream")
    """``system.stream`` where skipped messages go, as their original bytes with ``millstream.error.*`` headers."""
    process_errors: ProcessErrorMode = Field("fail", alias="process.errors")
    """What an exception from ``process()``, ``process_async()``, ``window()`` or a high-level operator's function
    does: ``fail`` the container
    naming the message, ``skip`` it (counted), or send it to ``dead.letter.stream`` (``dead-letter``)."""
    max_concurrency: int = Field(1, alias="max.concurrency", ge=1)
    """Messages an ``AsyncStreamTask`` has in flight at once (``process_async`` coroutines started and not
    completed), per task; 1 processes one message at a time, as ``process()``. A checkpoint covers only the
    completed prefix of each partition, never a message still in flight (see the Async I/O guide)."""
    callback_timeout_ms: int = Field(60_000, alias="callback.timeout.ms", ge=1)
    """How long one ``process_async`` may run; past it the coroutine is cancelled and the message fails under
    ``task.process.errors`` (a ``CallbackTimeoutError`` naming task, partition and offset). It also bounds
    how long ``window()``, end-of-stream, drain or stop waits for the messages in flight (a periodic commit
    does not wait: it covers the completed prefix)."""
    async_ordering: AsyncOrdering = Field("partition", alias="async.ordering")
    """The order an ``AsyncStreamTask``'s messages keep. ``partition``: processed concurrently, their output
    sent in offset order per partition (a message's output waits for the messages before it). ``key``:
    messages of one key are processed one after another, different keys concurrently, and each message's
    output is sent as it completes, so order holds per key only. ``unordered``: processed concurrently, output
    sent as each completes (``map_async(ordered=False)``)."""
    checkpoint_factory: str = Field("metadata", alias="checkpoint.factory")
    """Where task checkpoints live: ``metadata`` (the job's metadata store), ``kafka`` (a checkpoint topic) or
    ``log`` (the transaction coordinator of an embedded log, where exactly-once on the log commits them with the
    appends they cover)."""
    checkpoint_system: str | None = Field(None, alias="checkpoint.system")
    """The Kafka system of the checkpoint topic (``task.checkpoint.factory=kafka``); default:
    ``job.coordinator.system``, else the only Kafka system configured. With ``task.checkpoint.factory=log``, the
    log system that keeps them; default ``log``."""
    checkpoint_topic: str | None = Field(None, alias="checkpoint.topic")
    """Default ``__millstream-checkpoint-<job.name>-<job.id>``."""
    checkpoint_owner_takeover: Bool = Field(False, alias="checkpoint.owner.takeover")
    """Hand the Kafka checkpoint topic over to this job on purpose: the topic is owned by the job that first
    used it (recorded on the cluster), and another job naming it (``task.checkpoint.topic``) is refused at start.
    Set it for one start after the old owner stopped for good, then remove it."""
    checkpoint_replication_factor: int = Field(-1, alias="checkpoint.replication.factor", ge=-1)
    """-1: the broker's ``default.replication.factor``."""
    checkpoint_validation_enabled: Bool = Field(True, alias="checkpoint.validation.enabled")
    """A checkpoint record that cannot be read fails the job (true) or is skipped with a warning (false)."""
    max_buffered_per_partition: int = Field(10_000, alias="consumer.buffer.size", ge=1)
    """Messages buffered per input partition before its consumer pauses it."""
    commit_max_delay_ms: int = Field(60_000, alias="commit.max.delay.ms", ge=0)
    """A commit due while the previous one still uploads is skipped while the previous one started less
    than this long ago; past it, processing blocks until the upload ends."""
    commit_timeout_ms: int = Field(1_800_000, alias="commit.timeout.ms", ge=1)
    """How long a blocked commit waits for the previous upload before the container fails."""
    commit_snapshot_beside_processing: Bool = Field(True, alias="commit.snapshot.beside.processing.enabled")
    """Run a commit's flush, snapshot and checkpoint write on the commit thread while the task processes on, so a
    commit pauses processing only for its cut (the offsets, the object caches' dirty entries taken: under a
    millisecond) instead of for the stores' write-back, flush and snapshot (tens to hundreds of milliseconds with
    a large store). Applies to tasks without stores and tasks whose every store has an object cache; not under
    exactly-once. A commit thread that fails or is stuck (an unreachable broker) fails the container as an
    on-thread commit does: at the next commit, or past ``task.commit.timeout.ms`` once a commit waits for it. On by
    default, as Samza's and Kafka Streams' users expect commits not to stall processing; false restores the
    commits made wholly on the task's thread."""
    commit_skip_during_failures: Bool = Field(False, alias="commit.skip.commit.during.failures.enabled")
    """Tolerate failed uploads and commit timeouts up to the limits below (the commit is skipped, processing
    goes on, the next commit covers it) instead of failing the container at the first one."""
    commit_skip_exception_max_limit: int = Field(5, alias="commit.skip.commit.exception.max.limit", ge=0)
    """Failed commits a container attempt tolerates when skipping is enabled; the next one fails it."""
    commit_skip_timeout_max_limit: int = Field(2, alias="commit.skip.commit.timeout.max.limit", ge=0)
    """Commit timeouts a container attempt tolerates when skipping is enabled; the next one fails it."""
    checkpoint_write_versions: CheckpointVersions = Field(
        "1,2", alias="checkpoint.write.versions", validate_default=True, min_length=1
    )
    """Checkpoint versions written at every commit (V2 names the state snapshots; a blob store needs it)."""
    checkpoint_read_versions: CheckpointVersions = Field(
        "1", alias="checkpoint.read.versions", validate_default=True, min_length=1
    )
    """Checkpoint versions read at start, in priority order."""
    live_checkpoint_max_age_ms: int = Field(600_000, alias="live.checkpoint.max.age.ms", ge=0)
    """A preferred-version checkpoint older than a later one of another read version by more than this
    loses to it (a stale V2 left behind by a rollback to V1 must not win)."""
    transactional_state_restore_enabled: Bool = Field(True, alias="transactional.state.restore.enabled")
    """Restore changelog stores to exactly the checkpoint, reverting the changelog records after it."""
    transactional_state_retain_existing_state: Bool = Field(True, alias="transactional.state.retain.existing.state")
    """With no checkpointed changelog offset: keep the changelog's state (true) or revert all of it."""
    commit_testing_pause_at: str | None = Field(None, alias="commit.testing.pause.at")
    """Testing only: a commit point (``before-snapshot``, ``after-snapshot``, ``mid-upload``,
    ``after-upload``, ``after-checkpoint``) where the first commit of a job pauses, so a test can kill the
    container there."""
    commit_testing_pause_ms: int = Field(0, alias="commit.testing.pause.ms", ge=0)
    """Testing only: how long the pause at ``commit.testing.pause.at`` lasts."""
    commit_testing_marker_dir: str | None = Field(None, alias="commit.testing.marker.dir")
    """Testing only: the pause writes ``<point>`` with the process id here, and pauses once per job."""
    watermark_idle_timeout_ms: int = Field(-1, alias="watermark.idle.timeout.ms", ge=-1)
    """An intermediate partition whose producers are not all heard from within this time takes its
    watermark from a quorum of them (Samza's key); -1 waits for every producer."""
    watermark_quorum_percentage: float = Field(0.5, alias="watermark.quorum.size.percentage", gt=0, le=1)
    """The quorum of producers an idle timeout needs (Samza spells it ``quorum.size,percentage``)."""

    def input_streams(self) -> list[SystemStream]:
        return [parse_stream(name, "task.inputs") for name in self.inputs]

    def broadcast_ssps(self) -> set[SystemStreamPartition]:
        return parse_broadcast_inputs(self.broadcast_inputs)

    def dead_letter(self) -> SystemStream | None:
        return parse_stream(self.dead_letter_stream, "task.dead.letter.stream") if self.dead_letter_stream else None

    @model_validator(mode="before")
    @classmethod
    def _exactly_once_commits_often(cls, values: Any) -> Any:
        exactly_once = isinstance(values, dict) and values.get("processing.guarantee") == "exactly-once"
        if exactly_once and "commit.ms" not in values and "commit_ms" not in values:
            return {**values, "commit.ms": EXACTLY_ONCE_COMMIT_MS}
        return values

    @property
    def exactly_once(self) -> bool:
        return self.processing_guarantee == "exactly-once"


class SystemSamzaConfig(ConfigView):
    """``systems.<s>.samza.*``"""

    @classmethod
    def prefix_for(cls, name: object) -> str:
        """The keys of the system ``name``."""
        if name is None:
            raise TypeError(f"{cls.__name__} reads named sections: give the name")
        return f"systems.{name}.samza."

    factory: str | None = None
    """``log``, ``kafka``, ``kinesis`` (or Samza's factory class names), or ``module:Class`` of a ``SystemFactory``;
    the system named ``log`` defaults to ``log``."""
    key_serde: str | None = Field(None, alias="key.serde")
    """Serde name of the keys of the system's streams; default: bytes."""
    msg_serde: str | None = Field(None, alias="msg.serde")
    """Serde name of the values of the system's streams; default: bytes."""
    offset_default: OffsetDefault = Field("upcoming", alias="offset.default")
    """Where a partition without a checkpoint starts: its ``oldest`` record or the ``upcoming`` one."""
    trimmed_offset_policy: TrimmedOffsetPolicy = Field("fail", alias="trimmed.offset.policy")
    """What a task does when the position it would resume from was already deleted (retention, a purge):
    ``fail`` naming the stream, partition and the lost offsets; or accept the loss and start at the
    ``oldest`` remaining record or the ``upcoming`` one, with a warning."""


class StreamSamzaConfig(ConfigView):
    """``systems.<s>.streams.<stream>.samza.*``: overrides of the system-level settings."""

    @classmethod
    def prefix_for(cls, name: object) -> str:
        """The keys of the stream ``name`` (a ``SystemStream``)."""
        if not isinstance(name, SystemStream):
            raise TypeError(f"{cls.__name__} reads the section of a SystemStream, not {name!r}")
        return f"systems.{name.system}.streams.{name.stream}.samza."

    key_serde: str | None = Field(None, alias="key.serde")
    """Serde name of this stream's keys; overrides the system's."""
    msg_serde: str | None = Field(None, alias="msg.serde")
    """Serde name of this stream's values; overrides the system's."""
    offset_default: OffsetDefault | None = Field(None, alias="offset.default")
    """Where a partition of this stream without a checkpoint starts; overrides the system's."""
    reset_offset: Bool = Field(False, alias="reset.offset")
    """Ignore this stream's checkpoints at start and begin at ``offset.default``."""
    bootstrap: Bool = False
    """An adjunct store fed by this stream is caught up with the stream's newest offset at startup before
    any main-input message is processed."""
    trimmed_offset_policy: TrimmedOffsetPolicy | None = Field(None, alias="trimmed.offset.policy")
    """This stream's ``trimmed.offset.policy``; overrides the system's."""
    intermediate: Bool = False
    """Set by the planner on a high-level application's intermediate streams: a task that reads one
    without a checkpoint must find it complete from its first record."""
    delete_committed_messages: Bool = Field(False, alias="delete.committed.messages")
    """Delete records once the task reading them has checkpointed past them (Samza's key); the planner
    turns it on for intermediate streams unless it is set."""


SubjectNameStrategy = Literal["TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy"]


class SerdeConfig(ConfigView):
    """``serializers.registry.<name>.*``: a named serde, and for the schema serdes (``avro``, ``protobuf``)
    their schema and the schema registry they use. Keys other than ``class`` are refused for serdes that
    take no settings."""

    @classmethod
    def prefix_for(cls, name: object) -> str:
        """The keys of the serde ``name``."""
        if name is None:
            raise TypeError(f"{cls.__name__} reads named sections: give the name")
        return f"serializers.registry.{name}."

    class_name: str = Field(alias="class")
    """A built-in serde (``string``, ``bytes``, ``json``, ``long``, ``msgpack``, ``avro``, ``protobuf``), a Samza
    serde factory class name, or ``module:Class``."""
    avro_schema: str | None = Field(None, alias="schema")
    """``avro``: the Avro schema as JSON text. Without a registry it is both the writer's and the reader's
    schema; with one it is what producers register or look up, and the reader's schema consumers decode to
    (a newer compatible schema reads older records)."""
    schema_path: str | None = Field(None, alias="schema.path")
    """``avro``: a file holding the Avro schema (``.avsc``), instead of ``schema``; relative to the config file."""
    message_class: str | None = Field(None, alias="message.class")
    """``protobuf``: the generated message class (``module:Class``) values are encoded from and decoded to."""
    registry_url: str | None = Field(None, alias="schema.registry.url")
    """The Confluent-compatible schema registry (comma-separated URLs). Set, values use the Confluent wire format
    (magic byte 0, the 4-byte schema id, for Protobuf the message indexes, then the payload); unset, plain Avro
    or Protobuf bytes with the schema from this config. Credentials go in
    ``sensitive.serializers.registry.<name>.schema.registry.basic.auth.user.info`` (``user:password``)."""
    subject_name_strategy: SubjectNameStrategy = Field("TopicNameStrategy", alias="subject.name.strategy")
    """The registry subject of a stream's schemas: ``TopicNameStrategy`` (``<topic>-value`` / ``<topic>-key``),
    ``RecordNameStrategy`` (the record's full name) or ``TopicRecordNameStrategy`` (``<topic>-<record name>``),
    as Confluent's serializers name them."""
    auto_register_schemas: Bool = Field(False, alias="auto.register.schemas")
    """Producing registers the schema under its subject when it is not there yet. Off by default, unlike
    Confluent's serializers: a job then only writes schemas someone registered (and the registry checked for
    compatibility) on purpose, and a job started with a wrong schema fails at its first message naming the
    subject instead of evolving the subject behind the consumers' backs."""
    use_latest_version: Bool = Field(False, alias="use.latest.version")
    """Producing writes with the subject's latest registered version instead of looking up this config's
    schema (which then may be omitted for Avro)."""
    registry_latest_ttl_s: int = Field(300, alias="schema.registry.latest.ttl.s", ge=0)
    """How long a subject's latest version (``use.latest.version``) is kept before the registry is asked again;
    0 keeps it for the life of the container. Ids and schemas never change in a registry, so they are kept
    for the life of the container."""


class AppConfig(ConfigView):
    """``app.*``: a high-level application (``millstream.api.application``) and how it is planned."""

    PREFIX: ClassVar[str] = "app."

    class_name: str | None = Field(None, alias="class")
    """``module:Class`` of the ``StreamApplication``; replaces ``task.class`` and ``task.inputs``."""
    name: str | None = None
    """Names the intermediate streams (``<app.name>-<app.id>-<partition_by name>``); default ``job.name``.
    Stays the same when the application runs as one job per stage."""
    id: str | None = None
    """Default ``job.id``."""
    stage: int | None = Field(None, ge=0)
    """Run only this stage (``millstream run --stage N``) as a job of its own, ``<app.name>-stage-<N>``."""
    intermediate_partitions: int = Field(-1, alias="intermediate.partitions", ge=-1)
    """Partitions of the intermediate streams it creates; -1: as many as the largest input."""
    intermediate_system: str = Field(DEFAULT_SYSTEM, alias="intermediate.system")
    """The system the intermediate streams are created on."""
    intermediate_owner_takeover: Bool = Field(False, alias="intermediate.owner.takeover")
    """Set for one start to hand the intermediate streams over from the job that owns them (another
    ``job.name`` with the same ``app.name``) to this one: the old owner must not run again with them."""
    control_aggregation: Bool = Field(False, alias="control.aggregation")
    """Send control messages through one partition per intermediate stream (Samza's two-phase
    aggregation) instead of to every partition."""
    control_watermark_interval_ms: int = Field(200, alias="control.watermark.interval.ms", ge=0)
    """The least time between two watermarks a task sends to one intermediate stream (Flink's auto-watermark
    interval; a tenth of it is allowed for the timer's jitter): a watermark goes out only when it advanced,
    and one that advances again within the interval is held back and sent, newest only, by the task's timer
    once the interval passed. Each one costs a record per partition of the stream (per producing task,
    broadcast; ``app.control.aggregation``: one per producer plus one per partition), so this bounds control
    traffic by time, not by how often watermarks move — raise it for streams with many producers and
    partitions. 0 sends every advance. End-of-stream and drain are not paced: each producer sends them once."""
    control_watermark_combine: Bool = Field(True, alias="control.watermark.combine")
    """Broadcast mode: a container sends one watermark record per partition of an intermediate stream for all
    of its tasks producing to it — the minimum of their watermarks, naming them — instead of one per task and
    partition: C x Q records per interval for C containers, not P x Q. Consumers of an older version skip these
    records (type byte 4) and would wait for end-of-stream, so when stages run as separate jobs upgrade the
    consuming stage first, or set this to false until it is. Not used with ``app.control.aggregation`` or an idle
    timeout (``task.watermark.idle.timeout.ms``), where each task sends its own: a container's minimum would let
    one idle task hold back the watermarks of all the others, which the consumer's idle rule could not tell apart."""
    watermark_interval_ms: int = Field(200, alias="watermark.interval.ms", ge=1)
    """How often sources emit watermarks and timers run (the default ``task.window.ms``)."""
    watermark_window_boundaries: Bool = Field(True, alias="watermark.window.boundaries")
    """Send a watermark that passes the end of a tumbling or sliding window of the application at once — from
    a source before its next timer tick, to an intermediate stream within ``app.control.watermark.interval.ms``
    (on the send of a later ordinary advance) — so a window fires milliseconds after the watermark passed it,
    at no more control traffic over time. ``false``: every advance waits for its interval (session windows
    and stream joins always do: they have no fixed ends)."""
    watermark_max_out_of_orderness_ms: int = Field(0, alias="watermark.max.out.of.orderness.ms", ge=0)
    """Default bounded out-of-orderness of the inputs' event times."""
    run_id: str | None = Field(None, alias="run.id", min_length=1)
    """The run a drain (``millstream job drain``) targets and its in-band drain messages carry; default
    ``generation-<N>``, new for every ``millstream run``. Stages run as separate jobs drain together only
    when they share it: give every stage of one deployment the same value, and the next deployment a new one."""


class StartpointConfig(ConfigView):
    PREFIX: ClassVar[str] = "startpoint."

    max_age_ms: int = Field(12 * 60 * 60 * 1000, alias="max.age.ms", ge=1)
    """A startpoint older than this is ignored (and listed as stale), not deleted."""


MetricsReporterName = Literal["log", "snapshot"]


class MetricsConfig(ConfigView):
    """``metrics.*``: what a running job measures and where it shows it (see README, "Metrics")."""

    PREFIX: ClassVar[str] = "metrics."

    enabled: Bool | None = None
    """Measure at all; by default on exactly when the Prometheus port or a reporter is configured."""
    prometheus_port: int = Field(0, alias="prometheus.port", ge=0, le=65535)
    """The driver serves ``/metrics``, ``/status.json`` and ``/`` on this port; 0 = off."""
    prometheus_host: str = Field("0.0.0.0", alias="prometheus.host")
    """The address the driver's metrics server listens on."""
    snapshot_interval_ms: int = Field(5000, alias="snapshot.interval.ms", ge=10)
    """How often each container ships its metrics to the driver (and refreshes its lag)."""
    reporters: Annotated[list[MetricsReporterName], BeforeValidator(_split_list)] = Field(default_factory=list)
    """``log``: a one-line summary per container every interval; ``snapshot``: a JSON snapshot per
    container every interval to ``metrics.reporter.snapshot.stream`` (Samza's MetricsSnapshotReporter).
    Snapshots for the driver are always shipped while metrics are on."""
    reporter_snapshot_stream: str | None = Field(None, alias="reporter.snapshot.stream")
    """The ``system.stream`` the ``snapshot`` reporter sends to, e.g. ``kafka.metrics``; each message is
    one container's snapshot as JSON, keyed by its container id."""

    @property
    def active(self) -> bool:
        if self.enabled is not None:
            return self.enabled
        return self.prometheus_port > 0 or bool(self.reporters)

    def snapshot_stream(self) -> SystemStream | None:
        """Where the ``snapshot`` reporter sends; None when it is not configured."""
        if "snapshot" not in self.reporters:
            return None
        if self.reporter_snapshot_stream is None:
            raise ConfigError(
                "config key 'metrics.reporters' includes 'snapshot': set metrics.reporter.snapshot.stream too "
                "(the system.stream it sends to, e.g. kafka.metrics)"
            )
        return parse_stream(self.reporter_snapshot_stream, "metrics.reporter.snapshot.stream")


class MetadataConfig(ConfigView):
    PREFIX: ClassVar[str] = "metadata."

    store_factory: str = Field("sqlite", alias="store.factory")
    """The job's metadata store (job model, epochs, stop and drain signals, startpoints): ``sqlite`` or ``kafka``."""
    store_path: str | None = Field(None, alias="store.path")
    """The SQLite metadata store's file; default ``<job.data.dir>/jobs/<job.name>-<job.id>/metadata.db``."""
    store_lock_lease_ms: int = Field(120_000, alias="store.lock.lease.ms", gt=0)
    """SQLite store: how long a writer that finds the write lock taken waits for the same holder, measured on its own
    clock from when it first finds that holder in its way, naming it in a warning every ``metadata.store.lock.wait.ms``.
    Within it no writer fails for the lock; past it the job's newest driver ends a holder that is a process on its
    own host (a stopped process keeps SQLite's lock until it dies), and any other writer fails, naming the holder."""
    store_lock_wait_ms: int = Field(5_000, alias="store.lock.wait.ms", gt=0)
    """SQLite store: one round of waiting for the write lock (SQLite's busy timeout); after each, the waiter logs
    who holds the lock (container, attempt, pid, host, since)."""
    store_testing_stop_in_write: str | None = Field(None, alias="store.testing.stop.in.write")
    """Testing only, SQLite store: the first write to this namespace (e.g. ``checkpoint-v1``) stops its process
    (``SIGSTOP``) with the write lock held, once per ``metadata.store.testing.marker.dir``, for the paused-holder
    tests."""
    store_testing_marker_dir: str | None = Field(None, alias="store.testing.marker.dir")
    """Testing only: where ``metadata.store.testing.stop.in.write`` claims its one stop (a file holding the stopped
    pid)."""


JOB_LEVEL_STORE_KEYS = ("backup.factories", "restore.factories", "adstore.manager.factory")
"""Keys directly under ``stores.`` that are job-level defaults, not settings of a store."""


class StoresConfig(ConfigView):
    """``stores.backup.factories`` / ``stores.restore.factories``: defaults for every store."""

    backup_factories: CommaList | None = Field(None, alias="backup.factories")
    """State backends every store backs up to (``changelog``, ``blobstore``, ``module:Class``) unless it sets its
    own."""
    restore_factories: CommaList | None = Field(None, alias="restore.factories")
    """State backends every store restores from, in order, unless it sets its own."""
    adstore_manager_factory: str | None = Field(None, alias="adstore.manager.factory")
    """``module:Class`` of an ``AdjunctDataStoreManagerFactory``; default: the built-in manager."""

    @classmethod
    def of(cls, config: Config) -> StoresConfig:
        return cls.read(config)

    @classmethod
    def read(cls, config: Config, name: object = None) -> StoresConfig:
        values = {key: config[f"stores.{key}"] for key in JOB_LEVEL_STORE_KEYS if f"stores.{key}" in config}
        return cls.parse(values, "stores.")


class StoreConfig(ConfigView):
    """``stores.<s>.*``: one key-value store of every task."""

    @classmethod
    def prefix_for(cls, name: object) -> str:
        """The keys of the store ``name``."""
        if name is None:
            raise TypeError(f"{cls.__name__} reads named sections: give the name")
        return f"stores.{name}."

    factory: str = "rocksdb"
    """``rocksdb``, ``inmemory`` (or Samza's factory class names), or ``module:Class``."""
    key_serde: str | None = Field(None, alias="key.serde")
    """Serde name of the store's keys; default: bytes."""
    msg_serde: str | None = Field(None, alias="msg.serde")
    """Serde name of the store's values; default: bytes."""
    changelog: str | None = None
    """``system.stream`` the changelog backend writes every change to (a bare name: the log system). Unset on a
    store whose backup factories list ``changelog``: ``<job.name>-<job.id>-<store>-changelog`` on the system of
    the job's inputs (``storage.backends.changelog.names``)."""
    changelog_owner_takeover: Bool = Field(False, alias="changelog.owner.takeover")
    """Hand the changelog over to this store on purpose: a changelog is owned by the one job and store that
    first used it (recorded with the stream), and another claimant is refused at start. Set it for one start
    after the old owner stopped for good (a renamed job, a store moved), then remove it."""
    backup_factories: CommaList | None = Field(None, alias="backup.factories")
    """State backends this store backs up to (``changelog``, ``blobstore``, ``module:Class``); default: ``changelog``
    if a changelog is set."""
    restore_factories: CommaList | None = Field(None, alias="restore.factories")
    """State backends this store restores from, in order; default: its backup factories."""
    clean_on_container_start: Bool = Field(False, alias="clean.on.container.start")
    """Ignore local state at start: restore from the backup only."""
    container_write_buffer_size_bytes: int = Field(
        32 * 1024 * 1024, alias="container.write.buffer.size.bytes", ge=64 * 1024
    )
    """RocksDB memtable memory per container, split between its tasks (Samza's key). A commit's snapshot
    flushes what the memtable holds, so this also bounds the time a snapshot takes."""
    rocksdb_num_write_buffers: int = Field(3, alias="rocksdb.num.write.buffers", ge=1)
    """RocksDB memtables per store (``max_write_buffer_number``)."""
    container_cache_size_bytes: int = Field(100 * 1024 * 1024, alias="container.cache.size.bytes", ge=0)
    """RocksDB block cache per container for this store, split between its tasks (Samza's key); 0: no block
    cache. With ``container.write.buffer.size.bytes`` x ``rocksdb.num.write.buffers`` it is the store's share of
    the container's memory budget (``job.container.memory.mb``). Ignored under ``job.container.rocksdb.memory.mb``."""
    object_cache_size: int = Field(10_000, alias="object.cache.size", ge=0)
    """Entries of the store's write-back object cache, per task (Samza's key): recently used keys are read from
    the objects the task put, and writes reach RocksDB and the changelog once per key per commit (or when
    ``write.batch.size`` keys are dirty, or a dirty key is evicted), not once per ``put``. 0: no cache, every
    ``put`` writes through. A value mutated after ``put`` without a new ``put`` is undefined."""
    write_batch_size: int | None = Field(None, alias="write.batch.size", ge=1)
    """Dirty entries the object cache holds before it writes them back as one batch (Samza's key); at most
    ``object.cache.size``; default: ``object.cache.size``, so a hot key is written once per commit."""
    changelog_min_compaction_lag_ms: int = Field(4 * 60 * 60 * 1000, alias="changelog.min.compaction.lag.ms", ge=0)
    """A checkpoint older than 0.9 x this is restored to the changelog's end, not reverted: compaction may
    already have removed the committed values of later-overwritten keys."""
    changelog_checkpoint_mismatch: ChangelogMismatchPolicy = Field("fail", alias="changelog.checkpoint.mismatch")
    """What a restore does when the checkpoint's changelog marker contradicts the changelog: it says "empty"
    while the changelog holds records written before the checkpoint, or names an offset while the changelog
    is empty. ``fail`` (default): the container fails naming the store and the checkpoint; ``reset``: the
    store starts empty (what the changelog holds is reverted); ``replay``: the store gets everything the
    changelog holds, nothing reverted. Set it to recover on purpose, then remove it."""
    adstore_input: str | None = Field(None, alias="adstore.input")
    """``system.stream`` that feeds this adjunct data store (at most one): its messages are stored, never
    given to ``process``."""
    adstore_extractor_factory: str | None = Field(None, alias="adstore.key.value.extractor.factory")
    """``module:Class`` of a ``KeyValueExtractorFactory``; default: the envelope's key and value."""
    adstore_versioned: Bool = Field(False, alias="adstore.versioned")
    """The input carries a bounded dataset in versions: each version ends with an end-of-version marker,
    readers see the last sealed version only (and bulk-built versions, ``millstream adstore build``)."""
    adstore_max_age_ms: int = Field(24 * 60 * 60 * 1000, alias="adstore.max.age.ms", ge=-1)
    """A persisted adjunct store last committed longer ago than this is invalid at start and rebuilt
    (Samza's side inputs: one day); -1: no age limit."""
    adstore_version_poll_ms: int = Field(5_000, alias="adstore.version.poll.ms", ge=100)
    """How often a running job looks for a newly published bulk-built version of a versioned store."""
    adstore_version_retire_ms: int = Field(5_000, alias="adstore.version.retire.ms", ge=0)
    """How long a replaced version stays open for reads already under way before it is closed and deleted."""

    @property
    def is_adjunct(self) -> bool:
        return self.adstore_input is not None

    def object_cache(self, store: str) -> tuple[int, int]:
        """``(object.cache.size, write.batch.size)`` of ``store``, the batch defaulted; ``(0, 0)``: no cache."""
        size = self.object_cache_size
        batch = size if self.write_batch_size is None else self.write_batch_size
        if size and batch > size:
            raise ConfigError(
                f"config key 'stores.{store}.write.batch.size' is {batch}, more than "
                f"'stores.{store}.object.cache.size' ({size}): dirty entries live in the cache"
            )
        return (size, batch) if size else (0, 0)

    def adjunct_input(self, store: str) -> SystemStream:
        if self.adstore_input is None:
            raise ConfigError(f"store '{store}' is not an adjunct data store (no 'stores.{store}.adstore.input')")
        return parse_stream(self.adstore_input, f"stores.{store}.adstore.input")


def store_names(config: Config) -> list[str]:
    """Every store named by a ``stores.<s>.<key>`` key."""
    names = set()
    for key in config.subset("stores."):
        if key in JOB_LEVEL_STORE_KEYS:
            continue
        name, sep, _ = key.partition(".")
        if not sep or not name:
            raise ConfigError(f"unknown config key 'stores.{key}' (expected stores.<store>.<setting>)")
        names.add(name)
    return sorted(names)


def store_config(config: Config, store: str) -> StoreConfig:
    prefix = f"stores.{store}."
    return StoreConfig.parse(config.subset(prefix), prefix)


class TableConfig(ConfigView):
    """``tables.<id>.*``: a remote table (see the Async I/O guide). A table defined in the application
    (``RemoteTable(...)``) takes its settings from its arguments; these keys override them."""

    @classmethod
    def prefix_for(cls, name: object) -> str:
        """The keys of the table ``name``."""
        if name is None:
            raise TypeError(f"{cls.__name__} reads named sections: give the name")
        return f"tables.{name}."

    definition: str | None = None
    """``module:name`` of the table's definition: a ``RemoteTable`` or a function of the config returning one.
    Needed by a table a task reaches by id only (``context.get_table("<id>")``)."""
    rate_limit_credits_per_second: float = Field(0.0, alias="rate.limit.credits.per.second", ge=0)
    """Credits per second the table's calls may use, shared by every task of a container (a read or write of
    one key costs 1, a batch read one per key); calls past it wait their turn. 0: no limit."""
    rate_limit_burst: float | None = Field(None, alias="rate.limit.burst", gt=0)
    """Credits that may be saved up while the table is idle and spent at once; default: one second's worth."""
    retry_max_attempts: int = Field(3, alias="retry.max.attempts", ge=1)
    """Attempts per call (1: no retry). Only retriable failures are retried: ``RetriableError``,
    ``TimeoutError``, ``ConnectionError``, or what the table's ``retriable`` predicate accepts."""
    retry_backoff_ms: int = Field(100, alias="retry.backoff.ms", ge=0)
    """Wait before the first retry; each next one waits twice as long as the one before."""
    retry_backoff_max_ms: int = Field(5_000, alias="retry.backoff.max.ms", ge=0)
    """Longest wait between two attempts."""
    retry_budget_ms: int = Field(30_000, alias="retry.budget.ms", ge=0)
    """Longest time a call may spend from its first attempt to the start of its last one: no retry starts
    later. Past it (or past ``retry.max.attempts``) the call fails with a ``RemoteTableError`` naming the table
    and key, and its message goes to ``task.process.errors``."""
    cache_ttl_ms: int = Field(0, alias="cache.ttl.ms", ge=0)
    """How long a record read stays in the table's cache (one per container); 0: no cache."""
    cache_max_size: int = Field(10_000, alias="cache.max.size", ge=1)
    """Records the cache holds at most; the least recently used go first."""
    batch_max_size: int = Field(100, alias="batch.max.size", ge=1)
    """Keys per batch, for a table with a ``read_all`` (or ``write_all``) function: the reads (puts) asked for
    while the event loop runs (every message in flight of the container's tasks) go out together; 1: no
    batching."""
    batch_linger_ms: int = Field(0, alias="batch.linger.ms", ge=0)
    """How long a batch waits for more keys before it goes out; 0: only the reads asked in the same turn of
    the event loop."""


def table_ids(config: Config) -> list[str]:
    """Every table named by a ``tables.<id>.<key>`` key."""
    ids = set()
    for key in config.subset("tables."):
        table_id, sep, _ = key.partition(".")
        if not sep or not table_id:
            raise ConfigError(f"unknown config key 'tables.{key}' (expected tables.<id>.<setting>)")
        ids.add(table_id)
    return sorted(ids)


def table_config(config: Config, table_id: str) -> TableConfig:
    prefix = f"tables.{table_id}."
    return TableConfig.parse(config.subset(prefix), prefix)


def adjunct_store_names(config: Config) -> list[str]:
    """Stores fed by a stream (``stores.<s>.adstore.input``): built by the adjunct data store manager,
    not restored by state backends."""
    return [name for name in store_names(config) if f"stores.{name}.adstore.input" in config]


def adjunct_streams(config: Config) -> list[SystemStream]:
    """The streams adjunct stores read: stored, never given to ``process``."""
    return sorted({store_config(config, name).adjunct_input(name) for name in adjunct_store_names(config)})


def task_store_names(config: Config) -> list[str]:
    """Stores a task writes itself, restored and backed up by the state backends."""
    adjunct = set(adjunct_store_names(config))
    return [name for name in store_names(config) if name not in adjunct]


class BlobStoreConfig(ConfigView):
    """``blob.store.*``: where the blob-store state backend keeps snapshots."""

    PREFIX: ClassVar[str] = "blob.store."

    manager_factory: str = Field("local", alias="manager.factory")
    """``local``, ``s3``, ``azure``, or ``module:Class`` of a ``BlobStoreFactory``."""
    prefix: str = ""
    """Prefix of every blob name (a folder in the bucket or container)."""
    local_dir: str | None = Field(None, alias="local.dir")
    """The ``local`` blob store's directory; default ``<job.data.dir>/blobs``."""
    s3_bucket: str | None = Field(None, alias="s3.bucket")
    """The ``s3`` blob store's bucket."""
    s3_endpoint_url: str | None = Field(None, alias="s3.endpoint.url")
    """An S3-compatible endpoint URL (an emulator, MinIO); default: AWS's for the region."""
    s3_region: str | None = Field(None, alias="s3.region")
    """The bucket's region; default: boto3's default chain."""
    s3_request_timeout_ms: int = Field(60_000, alias="s3.request.timeout.ms", ge=1)
    """Connect and read timeout of each S3 request (boto3's ``connect_timeout`` and ``read_timeout``): how long a
    request that gets no answer (an unreachable endpoint, a network partition) waits before it is retried."""
    azure_container: str | None = Field(None, alias="azure.container")
    """The ``azure`` blob store's container."""
    azure_account_url: str | None = Field(None, alias="azure.account.url")
    """The storage account URL, ``https://<account>.blob.core.windows.net``."""
    transfer_threads: int = Field(8, alias="transfer.threads", ge=1)
    """Files uploaded or downloaded at once per container."""
    retry_max_retries: int = Field(-1, alias="retry.policy.max.retries", ge=-1)
    """Retries of a failed blob operation; -1: bounded only by the maximum duration."""
    retry_max_duration_ms: int = Field(900_000, alias="retry.policy.max.retry.duration.millis", ge=0)
    """How long a blob operation is retried before it fails."""
    retry_backoff_delay_ms: int = Field(100, alias="retry.policy.backoff.delay.millis", ge=0)
    """First delay between retries of a blob operation."""
    retry_backoff_max_delay_ms: int = Field(5_000, alias="retry.policy.backoff.max.delay.millis", ge=0)
    """Longest delay between retries of a blob operation. It bounds how long after the store comes back an
    operation retried through an outage resumes (Samza's 312500 let a 60 s outage cost minutes more)."""
    retry_backoff_factor: float = Field(5.0, alias="retry.policy.backoff.delay.factor", ge=1)
    """Factor by which the delay between retries grows."""
    retry_jitter_factor: float = Field(0.1, alias="retry.policy.jitter.factor", ge=0, le=1)
    """Random share of each delay, so that containers do not retry in step."""
    compare_file_owners_on_restore: Bool = Field(True, alias="compare.file.owners.on.restore")
    """A restored file must have the owner and group it had when uploaded (as Samza checks)."""
    restore_recover_missing_blobs: Bool = Field(True, alias="restore.recover.missing.blobs.enabled")
    """A start whose checkpoint names blobs that are gone (a snapshot index, store files) goes on with what
    remains — the local checkpoint directory, else an empty store — and checkpoints a complete snapshot
    at once, as Samza does; off, it fails naming the blobs."""


def system_names(config: Config) -> list[str]:
    """Every system the config names, plus the embedded default."""
    names = {key.split(".", 2)[1] for key in config if key.startswith("systems.") and key.count(".") >= 2}
    names.add(DEFAULT_SYSTEM)
    return sorted(names)


def system_samza(config: Config, system: str) -> SystemSamzaConfig:
    prefix = f"systems.{system}.samza."
    return SystemSamzaConfig.parse(config.subset(prefix), prefix)


def serde_config(config: Config, name: str) -> SerdeConfig:
    prefix = f"serializers.registry.{name}."
    return SerdeConfig.parse(config.subset(prefix), prefix)


def stream_samza(config: Config, stream: SystemStream) -> StreamSamzaConfig:
    prefix = f"systems.{stream.system}.streams.{stream.stream}.samza."
    return StreamSamzaConfig.parse(config.subset(prefix), prefix)


def offset_default(config: Config, stream: SystemStream) -> OffsetDefault:
    """Stream-level ``offset.default``, else system-level, else ``upcoming`` (as in Samza)."""
    return stream_samza(config, stream).offset_default or system_samza(config, stream.system).offset_default


def trimmed_offset_policy(config: Config, stream: SystemStream) -> TrimmedOffsetPolicy:
    """Stream-level ``trimmed.offset.policy``, else system-level (default ``fail``)."""
    own = stream_samza(config, stream).trimmed_offset_policy
    return own or system_samza(config, stream.system).trimmed_offset_policy


def parse_stream(text: str, key: str) -> SystemStream:
    """A ``system.stream`` name from config; a bare stream name means the default ``log`` system."""
    text = text.strip()
    if not text:
        raise ConfigError(f"config key '{key}' names an empty stream")
    if "." not in text:
        return SystemStream(DEFAULT_SYSTEM, text)
    try:
        return SystemStream.parse(text)
    except MillstreamError as error:
        raise ConfigError(f"config key '{key}': {error}") from None


_BROADCAST_PARTITION = re.compile(r"[0-9]+|\[(?P<low>[0-9]+)-(?P<high>[0-9]+)\]")


def parse_broadcast_inputs(entries: list[str]) -> set[SystemStreamPartition]:
    """Samza's syntax: ``system.stream#0`` or ``system.stream#[0-3]``."""
    result: set[SystemStreamPartition] = set()
    for entry in entries:
        name, sep, partitions = entry.partition("#")
        if not sep:
            raise ConfigError(
                f"config key 'task.broadcast.inputs' entry '{entry}' needs a partition: "
                "'system.stream#N' or 'system.stream#[N-M]'"
            )
        stream = parse_stream(name, "task.broadcast.inputs")
        spec = partitions.strip()
        match = _BROADCAST_PARTITION.fullmatch(spec)
        if match is None:
            raise ConfigError(f"config key 'task.broadcast.inputs' entry '{entry}': '{spec}' is not N or [N-M]")
        if match["low"] is None:
            first = last = int(spec)
        else:
            first, last = int(match["low"]), int(match["high"])
        if last < first:
            raise ConfigError(f"config key 'task.broadcast.inputs' entry '{entry}': empty partition range")
        result.update(stream.partition(p) for p in range(first, last + 1))
    return result


def resolve_paths(config: Config) -> Config:
    """Make every path in a closed namespace absolute, relative to the config file's directory.

    Path keys are those ending in ``.dir`` or ``.path``. Executors run in other working
    directories, so only absolute paths may travel to them.
    """
    base = Path(config.source).parent if config.source else Path.cwd()
    updates: dict[str, str] = {}
    if "job.data.dir" not in config:
        updates["job.data.dir"] = str((base / ".millstream").resolve())
    for key, value in config.items():
        if value.startswith("$"):
            continue  # a path on the host that runs the container, expanded there (job.logged.store.base.dir)
        if key.startswith(CLOSED_NAMESPACES) and key.endswith((".dir", ".path")) and value:
            path = Path(value).expanduser()
            updates[key] = str((path if path.is_absolute() else base / path).resolve())
    return config.with_overrides(updates) if updates else config
