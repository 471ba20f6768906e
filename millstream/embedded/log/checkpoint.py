"""``task.checkpoint.factory=log``: task checkpoints kept by the embedded log itself, in the transaction
coordinator file of a log system (``transactions``), so that under exactly-once they are committed in the
same SQLite transaction that commits the container's appends (the commit point).

Why there and not in the metadata store: the commit point of a log transaction must be one atomic write
holding both the checkpoints and the decision to commit. Partition files are separate SQLite databases in WAL
mode, which SQLite cannot commit atomically together, and the metadata store may not be SQLite at all (nor
on the same machine); the coordinator file is the one place a single local transaction can hold both.

The system is ``task.checkpoint.system``, default ``log``. One row per job, task and version (the last
checkpoint). At-least-once writes each checkpoint directly, fenced by the coordinator's record of the job's
writers; under exactly-once ``write_checkpoint`` hands it to the container's transactional producer, which
stores it when its transaction commits.
"""

from __future__ import annotations

from collections.abc import Sequence

from millstream.checkpoint.base import CheckpointManager, WriterFence, require_fence
from millstream.checkpoint.checkpoint import (
    Checkpoint,
    CheckpointFormatError,
    deserialize_checkpoint,
    select_checkpoint,
    serialize_checkpoint,
)
from millstream.checkpoint.factory import CheckpointManagerFactory
from millstream.config.settings import Settings
from millstream.config.views import DEFAULT_SYSTEM as DEFAULT_LOG_SYSTEM
from millstream.config.views import SystemSamzaConfig
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.systems import SystemProducer, WriterToken
from millstream.embedded.log.config import LogSystemConfig
from millstream.embedded.log.factory import LogSystemFactory
from millstream.embedded.log.producer import LogSystemProducer
from millstream.embedded.log.transactions import TransactionLog
from millstream.errors import ConfigError
from millstream.model import TaskName
from millstream.plugins import load_object

DEFAULT_SYSTEM = "log"


def checkpoint_log_system(config: Settings) -> str:
    """The log system whose coordinator keeps the checkpoints: ``task.checkpoint.system``, default ``log``."""
    system = config.task.checkpoint_system or DEFAULT_SYSTEM
    if not _is_log_system(config, system):
        raise ConfigError(
            f"task.checkpoint.factory=log keeps checkpoints in a log system, but task.checkpoint.system '{system}' "
            "is not one (set task.checkpoint.system to a system whose samza.factory is the embedded log)"
        )
    return system


def _is_log_system(config: Settings, system: str) -> bool:
    """Whether ``systems.<system>.samza.factory`` names the embedded log (or a subclass of its factory), told
    from the name alone: checking a setting builds no factory (only composition roots build those)."""
    name = config.view(SystemSamzaConfig, system).factory
    if name is None:
        return system == DEFAULT_LOG_SYSTEM
    try:
        factory_class = load_object(
            name, f"systems.{system}.samza.factory", {"log": f"{__package__}.factory:LogSystemFactory"}
        )
    except ConfigError:  # another system's alias (kafka, kinesis, Samza's class names)
        return False
    return isinstance(factory_class, type) and issubclass(factory_class, LogSystemFactory)


class LogCheckpointManager(CheckpointManager):
    """Checkpoints of one job in a log system's coordinator file; read-only without a ``WriterFence``."""

    def __init__(self, config: Settings, fence: WriterFence | None = None) -> None:
        self.system = checkpoint_log_system(config)
        settings = config.view(LogSystemConfig, self.system)
        self.root = settings.root(config)
        self.fsync = settings.fsync
        self.job = config.job.job_key
        task = config.task
        self.read_versions = tuple(task.checkpoint_read_versions)
        self.max_age_ms = task.live_checkpoint_max_age_ms
        self.fence = fence
        self._log: TransactionLog | None = None
        self._in_transaction: LogSystemProducer | None = None

    def _coordinator(self) -> TransactionLog:
        if self._log is None:
            self._log = TransactionLog(self.root, self.system, fsync=self.fsync)
        return self._log

    def stop(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def read_last_checkpoint(self, task_name: TaskName) -> Checkpoint | None:
        candidates = [
            (self._decode(task, version, value), written)
            for task, version, value, written in self._coordinator().checkpoints(self.job, task_name)
            if version in self.read_versions
        ]
        return select_checkpoint(candidates, self.read_versions, self.max_age_ms)

    def _decode(self, task: str, version: int, value: bytes) -> Checkpoint:
        where = f"checkpoint (version {version}) of task '{task}' in '{self._coordinator().path}'"
        try:
            return deserialize_checkpoint(version, value, where)
        except CheckpointFormatError:
            raise
        except Exception as error:
            raise CheckpointFormatError(f"{where}: {error}") from None

    def read_all(self) -> dict[TaskName, Checkpoint]:
        tasks = {task for task, *_ in self._coordinator().checkpoints(self.job)}
        chosen = {TaskName(task): self.read_last_checkpoint(TaskName(task)) for task in tasks}
        return {task: checkpoint for task, checkpoint in chosen.items() if checkpoint is not None}

    def join_transaction(self, producer: SystemProducer) -> None:
        """Exactly-once: checkpoints go to the container's transactional producer of this log system, which
        stores them in the coordinator when (and only if) its transaction commits."""
        if not isinstance(producer, LogSystemProducer) or not producer.transactional:
            raise ConfigError(
                f"task.checkpoint.factory=log: checkpoints of system '{self.system}' can only join the transaction "
                "of that log system's transactional producer"
            )
        self._in_transaction = producer

    def write_checkpoint(self, task_name: TaskName, checkpoint: Checkpoint) -> None:
        failures = self.write_batch([(task_name, checkpoint)])
        if task_name in failures:
            raise failures[task_name]

    def write_batch(self, checkpoints: Sequence[tuple[TaskName, Checkpoint]]) -> dict[TaskName, BaseException]:
        """A commit round's checkpoints in one fenced SQLite transaction of the coordinator (all or none); under
        exactly-once, staged in the container's transaction, which stores them when it commits."""
        if not checkpoints:
            return {}
        fence = require_fence(self.fence, f"write the checkpoint of task '{checkpoints[0][0]}'")
        values: dict[tuple[str, int], bytes] = {
            (task_name, checkpoint.version): serialize_checkpoint(checkpoint) for task_name, checkpoint in checkpoints
        }
        if self._in_transaction is not None:
            for (task_name, version), value in values.items():
                self._in_transaction.stage_checkpoint(task_name, version, value)
            return {}
        writer = WriterToken(self.job, fence.container_id, fence.generation, fence.epoch)
        self._coordinator().put_checkpoints(writer, values)
        return {}

    def clear_checkpoints(self) -> None:
        self._coordinator().clear_checkpoints(self.job)


class LogCheckpointManagerFactory(CheckpointManagerFactory):
    """``task.checkpoint.factory=log``."""

    def get_checkpoint_manager(
        self, config: Settings, store: MetadataStore, fence: WriterFence | None = None
    ) -> CheckpointManager:
        return LogCheckpointManager(config, fence)

    def transaction_system(self, config: Settings) -> str | None:
        return checkpoint_log_system(config)
