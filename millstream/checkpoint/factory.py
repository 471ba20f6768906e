"""Choose the checkpoint manager from ``task.checkpoint.factory`` (``metadata`` unless configured)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from millstream.checkpoint.base import CheckpointManager, WriterFence
from millstream.config.settings import Settings
from millstream.contracts.metadata import MetadataStore
from millstream.errors import ConfigError
from millstream.plugins import load_object

CHECKPOINT_MANAGER_FACTORIES = {
    "metadata": "millstream.checkpoint.metadata_store:MetadataStoreCheckpointManagerFactory",
    "kafka": "millstream.connectors.kafka.checkpoint:KafkaCheckpointManagerFactory",
    "log": "millstream.embedded.log.checkpoint:LogCheckpointManagerFactory",
    "org.apache.samza.checkpoint.kafka.KafkaCheckpointManagerFactory": (
        "millstream.connectors.kafka.checkpoint:KafkaCheckpointManagerFactory"
    ),
}
FACTORY_KEY = "task.checkpoint.factory"


class CheckpointManagerFactory(ABC):
    """Builds a checkpoint manager; named in config by an alias or a ``module:Class`` path."""

    @abstractmethod
    def get_checkpoint_manager(
        self, config: Settings, store: MetadataStore, fence: WriterFence | None = None
    ) -> CheckpointManager:
        """A manager writing as ``fence`` (read-only when None), using ``store`` where it keeps state."""

    def claim_resources(self, config: Settings) -> None:  # noqa: B027 - optional hook
        """Claim what this factory's managers write for the job (``SystemAdmin.claim_stream``), at start and
        before any container runs: a checkpoint topic two jobs share would give each the other's offsets."""

    def transaction_system(self, config: Settings) -> str | None:
        """The system whose transactions this factory's managers can write checkpoints in (exactly-once:
        ``CheckpointManager.join_transaction``); None when they cannot."""
        return None


def checkpoint_factory(config: Settings) -> CheckpointManagerFactory:
    name = config.task.checkpoint_factory
    factory_class = load_object(name, FACTORY_KEY, CHECKPOINT_MANAGER_FACTORIES)
    if not (isinstance(factory_class, type) and issubclass(factory_class, CheckpointManagerFactory)):
        raise ConfigError(f"config key '{FACTORY_KEY}': '{name}' is not a CheckpointManagerFactory")
    return factory_class()


def checkpoint_manager(config: Settings, store: MetadataStore, fence: WriterFence | None = None) -> CheckpointManager:
    return checkpoint_factory(config).get_checkpoint_manager(config, store, fence)
