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

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

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


def split_list(value: Any) -> Any:
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
    parts = split_list(value)
    if isinstance(parts, list):
        return [int(part) if isinstance(part, str) and part.isdigit() else part for part in parts]
    return parts


CommaList = Annotated[list[str], BeforeValidator(split_list)]
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

    SECTION: ClassVar[str] = ""
    """A schema of named sections (a store, a table, a system, ...): its keys' prefix, ``{name}`` standing for the
    section's name (``"tables.{name}."``); empty for a schema of one namespace, ``PREFIX``."""

    @classmethod
    def prefix_for(cls, name: object) -> str:
        """The keys' prefix of the section ``name`` of a schema of named sections; the namespace's own ``PREFIX``
        for the others, which take no name."""
        if cls.SECTION:
            if name is None:
                raise TypeError(f"{cls.__name__} reads named sections ('{cls.SECTION}'): give the name")
            return cls.SECTION.format(name=name)
        if name is not None:
            raise TypeError(f"{cls.__name__} reads one namespace, '{cls.PREFIX}', not named sections")
        return cls.PREFIX

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
    gc_freeze: bool = Field(True, alias="container.gc.freeze.enabled")
    """Freeze the container's start-up heap out of Python's cyclic garbage collector while its tasks run
    (``gc.freeze``), so a full collection traverses only what was allocated since: at 1,000 tasks that cut the
    longest pause from 90 ms to 17 ms of CPU. False leaves the collector alone, for a process whose other objects
    (a notebook's) should not be frozen with the container's."""
    gc_freeze_min_tasks: int = Field(256, alias="container.gc.freeze.min.tasks", ge=1)
    """The fewest tasks a container freezes its start-up heap for: the freeze's own full collection traverses the
    whole process (0.1 s in a test session's process), and a smaller container's start-up heap is too small for
    collections over it to matter (at 100 tasks no full collection fell in twenty commit rounds)."""
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

    SECTION: ClassVar[str] = "systems.{name}.samza."

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
    once the interval passed. Each one costs a record per partition of the stream (per producing container with
    ``app.control.watermark.combine``, else per producing task; ``app.control.aggregation``: one per producing
    container or task plus one per partition), so this bounds control traffic by time, not by how often
    watermarks move — raise it for streams with many producers and partitions. 0 sends every advance.
    End-of-stream and drain are not paced: each producer sends them once."""
    control_watermark_budget_share: float = Field(0.003, alias="control.watermark.budget.share", ge=0, le=1)
    """The share of the user records a container writes to an intermediate stream that its watermark records to
    that stream may cost (0.003: 0.3 %, which with the floor and end-of-stream keeps a 128 x 128 job under 1 %),
    so control traffic stays a fraction of the data at any rate, not only on a fast machine: a round of watermark
    records (one per partition, broadcast) that the interval lets out waits until this share plus
    ``app.control.watermark.budget.floor.records`` pays for it, for at most
    ``app.control.watermark.budget.max.delay.ms``. Applies to combined watermarks (``app.control.watermark.combine``)
    of streams wider than the floor; end-of-stream, drain and a restored task's watermarks are never held back.
    0 turns the budget off: one round per interval, whatever it costs."""
    control_watermark_budget_floor_records: int = Field(8, alias="control.watermark.budget.floor.records", ge=0)
    """Watermark records per ``app.control.watermark.interval.ms`` a container may send to an intermediate stream
    whatever its rate, on top of the share: a round of at most this many records — every round of a stream with at
    most this many partitions, and aggregate mode's one-record first hop unless the floor is 0 — is not budgeted and
    keeps one round per interval; a wider stream's round waits for the share plus the floor."""
    control_watermark_budget_max_delay_ms: int = Field(2000, alias="control.watermark.budget.max.delay.ms", ge=0)
    """The longest a round of watermark records due by the interval waits for the budget
    (``app.control.watermark.budget.share``); then it goes out anyway, so a wide stream carrying little data still
    advances downstream windows every this many milliseconds (plus up to two intervals). 0 turns the budget off."""
    control_watermark_combine: Bool = Field(True, alias="control.watermark.combine")
    """A container sends one watermark record for all of its tasks producing to an intermediate stream — the
    minimum of their watermarks, naming them — instead of one per task: to each partition (broadcast, C x Q records
    per interval for C containers, not P x Q) or, with ``app.control.aggregation``, to the aggregate partition
    once each task's earlier output was flushed (C + Q - 1, not P + Q - 1). Consumers of an older version skip
    these records (type byte 4) and would wait for end-of-stream, and in aggregate mode an older aggregating
    task does not forward them, so when stages run as separate jobs upgrade the consuming stage first, or set this
    to false until it is. Not used with an idle timeout (``task.watermark.idle.timeout.ms``), where each task
    sends its own: a container's minimum would let one idle task hold back the watermarks of all the others,
    which the consumer's idle rule could not tell apart."""
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


ROCKSDB_MAX_LOG_FILE_SIZE_BYTES = 64 * 1024 * 1024
"""Size at which a RocksDB store's info log is rolled by default (Samza's default)."""
ROCKSDB_KEEP_LOG_FILE_NUM = 2
"""Info log files a RocksDB store keeps by default, the current one included (Samza's default)."""

ROCKSDB_MAX_OPEN_FILES = -1
"""Files a RocksDB store keeps open by default: no bound (Samza's and RocksDB's default)."""
RocksDbCompression = Literal["none", "snappy", "bzip2", "zlib", "lz4", "lz4hc", "zstd"]
"""``stores.<s>.rocksdb.compression``'s values (Samza's names)."""
ROCKSDB_COMPRESSION: RocksDbCompression = "snappy"
"""A RocksDB store's table files' compression by default (Samza's and RocksDB's default)."""
ROCKSDB_BLOCK_SIZE_BYTES = 4096
"""A RocksDB store's table files' block size by default (Samza's and RocksDB's default)."""
ROCKSDB_MIN_OPEN_FILES = 20
"""The smallest bound of a RocksDB store's open files RocksDB keeps (it raises any lower one to this)."""
RocksDbCompactionStyle = Literal["level", "universal"]
"""``stores.<s>.rocksdb.compaction.style``'s values (Samza's names), Samza's ``fifo`` excepted (see
``_not_fifo``)."""
ROCKSDB_COMPACTION_STYLE: RocksDbCompactionStyle = "level"
"""A RocksDB store's compaction style by default: RocksDB's own default, not Samza's (``universal``). Level style
rewrites less of a large store per compaction and keeps its reads to one file per level; universal writes each
byte fewer times (less write amplification, for stores that are mostly written) and needs up to twice the store's
size free on disk while it compacts."""


def _unbounded_or_rocksdb_minimum(value: int) -> int:
    if value != -1 and value < ROCKSDB_MIN_OPEN_FILES:
        raise ValueError(f"must be -1 (no bound) or at least {ROCKSDB_MIN_OPEN_FILES}, RocksDB's minimum")
    return value


def _not_fifo(value: object) -> object:
    """Samza's ``fifo`` is refused: RocksDB then deletes a store's oldest table files once the store outgrows a
    size, keys and all, without a tombstone in its changelog, so the store silently loses keys that its changelog,
    its checkpoints and a restore still hold."""
    if isinstance(value, str) and value.strip().lower() == "fifo":
        raise ValueError(
            "'fifo' is not supported: RocksDB's FIFO compaction deletes the oldest table files, keys and all, "
            "which the store's changelog still holds (a restore would bring them back); use 'level' or 'universal'"
        )
    return value


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
    def read(cls, config: Config, name: object = None) -> StoresConfig:
        values = {key: config[f"stores.{key}"] for key in JOB_LEVEL_STORE_KEYS if f"stores.{key}" in config}
        return cls.parse(values, "stores.")


CHANGELOG_KAFKA_PREFIX = "changelog.kafka."
"""Samza's prefix of a store's changelog topic configs (``stores.<s>.changelog.kafka.<topic config>``)."""


class StoreConfig(ConfigView):
    """``stores.<s>.*``: one key-value store of every task."""

    SECTION: ClassVar[str] = "stores.{name}."

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
    changelog_replication_factor: int | None = Field(None, alias="changelog.replication.factor", ge=1)
    """Replicas of the store's changelog stream when the job creates it (Samza's key): Kafka keeps each partition
    on this many brokers, so a store's backup outlives that many minus one of them. Unset: the changelog system's
    ``default.replication.factor`` (Kafka's -1: the broker's own default; Samza's default is 2). A changelog that
    exists already keeps its replicas; the embedded log keeps one copy whatever it says."""
    changelog_kafka: dict[str, str] = Field(default_factory=dict, alias="changelog.kafka.*")
    """Topic configs of the store's changelog when the job creates it on Kafka (Samza's
    ``stores.<s>.changelog.kafka.<topic config>``: ``segment.bytes``, ``max.message.bytes``, ...), over the ones the
    job sets itself; ignored, with a warning, on a changelog of another system. A topic that already exists keeps its
    own. Refused: a ``cleanup.policy`` without ``compact``, a ``min.compaction.lag.ms`` or ``delete.retention.ms``
    below the store's keys of those names (a restore relies on them), and ``replication.factor`` (set
    ``changelog.replication.factor``)."""
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
    rocksdb_max_log_file_size_bytes: int = Field(
        ROCKSDB_MAX_LOG_FILE_SIZE_BYTES, alias="rocksdb.max.log.file.size.bytes", ge=0
    )
    """Size at which a store's RocksDB info log (``LOG`` in its directory) is rolled over to a new file (Samza's key
    and default). 0: only when the store is opened, RocksDB's own default, under which the log of a store that
    flushes at every local checkpoint grows by about 2 MB an hour for as long as the store stays open."""
    rocksdb_keep_log_file_num: int = Field(ROCKSDB_KEEP_LOG_FILE_NUM, alias="rocksdb.keep.log.file.num", ge=1)
    """Info log files a store keeps, the current one included (Samza's key and default; RocksDB's own keeps 1,000):
    with ``rocksdb.max.log.file.size.bytes`` it bounds a store's info logs on disk to about this times that size."""
    rocksdb_max_open_files: Annotated[int, AfterValidator(_unbounded_or_rocksdb_minimum)] = Field(
        ROCKSDB_MAX_OPEN_FILES, alias="rocksdb.max.open.files"
    )
    """Files one store keeps open at most, its table files and its own few included (Samza's key and default): -1,
    no bound (every table file stays open, which reads fastest), or at least 20 (RocksDB's minimum). A container
    raises its soft open-file limit (``ulimit -n``) to what its stores' bounds add up to, and fails at start naming
    this key when the hard limit is lower; with a store left unbounded it raises the soft limit to the hard one, as
    a JVM does at start for Samza's containers, since how many table files the store will open is not known."""
    rocksdb_compression: RocksDbCompression = Field(ROCKSDB_COMPRESSION, alias="rocksdb.compression")
    """Compression of the store's table files (Samza's key and default): ``none``, ``snappy``, ``bzip2``, ``zlib``,
    ``lz4``, ``lz4hc`` or ``zstd``. Files written before a change keep theirs until compacted; every one is read."""
    rocksdb_block_size_bytes: int = Field(ROCKSDB_BLOCK_SIZE_BYTES, alias="rocksdb.block.size.bytes", ge=512)
    """Size of the table files' blocks, what a read loads and the block cache holds (Samza's key and default):
    larger blocks compress better and index smaller, smaller ones read fewer bytes per key."""
    rocksdb_compaction_style: Annotated[RocksDbCompactionStyle, BeforeValidator(_not_fifo)] = Field(
        ROCKSDB_COMPACTION_STYLE, alias="rocksdb.compaction.style"
    )
    """How RocksDB compacts the store's table files (Samza's key): ``level`` (the default, RocksDB's; Samza's is
    ``universal``) or ``universal``. Samza's ``fifo`` is refused: it deletes keys the changelog still holds. A store
    whose files were written in the other style is opened as it is and compacted in the new style from then on."""
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
    changelog_delete_retention_ms: int = Field(24 * 60 * 60 * 1000, alias="changelog.delete.retention.ms", ge=0)
    """How long the changelog keeps a tombstone once compacted (Samza's key and default, Kafka's
    ``delete.retention.ms``): a restore does not start from a local checkpoint directory older than this, since a key
    deleted after it could have lost its tombstone and would come back; it replays the changelog instead."""
    local_checkpoint_interval_ms: int = Field(10_000, alias="local.checkpoint.interval.ms", ge=0)
    """How often a commit also makes the store's local checkpoint (its memtable flushed, then a RocksDB
    checkpoint directory) when every backup of the store is one that does not read that directory (the
    changelog), and at a clean stop; 0: at every commit. Commits in between record the changelog's offset only,
    so a restart after a crash copies the newest local checkpoint in and replays at most this long's changelog
    records on top of it. A store that a blob store backs up makes one at every commit, which the upload reads.
    Under exactly-once (a commit every 100 ms) this spares each store ten memtable flushes and checkpoint
    directories a second."""
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

    @classmethod
    def parse(cls, values: Mapping[str, str], prefix: str) -> StoreConfig:
        """Samza's ``changelog.kafka.<topic config>`` keys gathered into ``changelog_kafka``, then checked against
        what a restore relies on."""
        topic, rest = {}, {}
        for key, value in values.items():
            if key.startswith(CHANGELOG_KAFKA_PREFIX):
                topic[key.removeprefix(CHANGELOG_KAFKA_PREFIX)] = value
            else:
                rest[key] = value
        view = super().parse(rest, prefix)
        if topic:
            view = view.model_copy(update={"changelog_kafka": topic})
        view._check_changelog_kafka(prefix)
        return view

    def _check_changelog_kafka(self, prefix: str) -> None:
        topic = self.changelog_kafka
        key = f"{prefix}{CHANGELOG_KAFKA_PREFIX}"
        if "replication.factor" in topic:
            raise ConfigError(
                f"config key '{key}replication.factor' is not a topic config: "
                f"set '{prefix}changelog.replication.factor'"
            )
        policy = [part.strip() for part in topic.get("cleanup.policy", "compact").split(",")]
        if "compact" not in policy or ("delete" in policy and topic.get("retention.ms", "").strip() != "-1"):
            raise ConfigError(
                f"config key '{key}cleanup.policy' is {topic['cleanup.policy']!r}: a changelog must be compacted "
                f"('compact') and keep every key's newest record, or a restore would miss the keys written longest "
                f"ago ('delete' only with '{key}retention.ms' -1)"
            )
        floors = {
            "min.compaction.lag.ms": ("changelog.min.compaction.lag.ms", self.changelog_min_compaction_lag_ms),
            "delete.retention.ms": ("changelog.delete.retention.ms", self.changelog_delete_retention_ms),
        }
        for name, (store_key, floor) in floors.items():
            given = topic.get(name)
            if given is None:
                continue
            if not given.strip().lstrip("-").isdigit():
                raise ConfigError(f"config key '{key}{name}' is {given!r}, not a number of milliseconds")
            if int(given) < floor:
                raise ConfigError(
                    f"config key '{key}{name}' is {given}, below '{prefix}{store_key}' ({floor}), which a restore "
                    f"relies on: raise it, or lower '{prefix}{store_key}' to {given}"
                )

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


def adjunct_store_names(config: Config) -> list[str]:
    """Stores fed by a stream (``stores.<s>.adstore.input``): built by the adjunct data store manager,
    not restored by state backends."""
    return [name for name in store_names(config) if f"stores.{name}.adstore.input" in config]


def task_store_names(config: Config) -> list[str]:
    """Stores a task writes itself, restored and backed up by the state backends."""
    adjunct = set(adjunct_store_names(config))
    return [name for name in store_names(config) if name not in adjunct]


def system_names(config: Config) -> list[str]:
    """Every system the config names, plus the embedded default."""
    names = {key.split(".", 2)[1] for key in config if key.startswith("systems.") and key.count(".") >= 2}
    names.add(DEFAULT_SYSTEM)
    return sorted(names)


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
