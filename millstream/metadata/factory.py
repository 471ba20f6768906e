"""Choose the job's metadata store from ``metadata.store.factory`` (``sqlite`` unless configured)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from millstream.config.core import Config
from millstream.config.views import JobConfig, MetadataConfig
from millstream.errors import ConfigError
from millstream.metadata.base import MetadataStore
from millstream.plugins import load_object

METADATA_STORE_FACTORIES = {
    "sqlite": "millstream.metadata.sqlite:SqliteMetadataStoreFactory",
    "kafka": "millstream.systems.kafka.metadata:KafkaMetadataStoreFactory",
}
FACTORY_KEY = "metadata.store.factory"
DEFAULT_FILE_NAME = "metadata.db"


class MetadataStoreFactory(ABC):
    """Builds the metadata store a job's driver and containers share; named in config by an alias
    (``sqlite``, ``kafka``) or a ``module:Class`` path."""

    @abstractmethod
    def get_metadata_store(self, config: Config) -> MetadataStore: ...


def metadata_store(config: Config) -> MetadataStore:
    """The store ``metadata.store.factory`` names, not yet opened (``init`` opens it)."""
    name = MetadataConfig.of(config).store_factory
    factory_class = load_object(name, FACTORY_KEY, METADATA_STORE_FACTORIES)
    if not (isinstance(factory_class, type) and issubclass(factory_class, MetadataStoreFactory)):
        raise ConfigError(f"config key '{FACTORY_KEY}': '{name}' is not a MetadataStoreFactory")
    return factory_class().get_metadata_store(config)


def metadata_store_path(config: Config) -> Path:
    """``metadata.store.path``, else ``metadata.db`` in the job's directory under ``job.data.dir``."""
    configured = MetadataConfig.of(config).store_path
    if configured:
        return Path(configured).expanduser()
    return JobConfig.of(config).job_dir / DEFAULT_FILE_NAME
