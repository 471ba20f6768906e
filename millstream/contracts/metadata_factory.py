"""The metadata-store factory contract (``metadata.store.factory``: ``sqlite`` unless configured).

Opening a store is :func:`millstream.composition.metadata.metadata_store`'s job, a composition root's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from millstream.config.settings import Settings
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.metadata_settings import MetadataConfig

METADATA_STORE_FACTORIES = {
    "sqlite": "millstream.embedded.sqlite:SqliteMetadataStoreFactory",
    "kafka": "millstream.connectors.kafka.metadata:KafkaMetadataStoreFactory",
}
FACTORY_KEY = "metadata.store.factory"
DEFAULT_FILE_NAME = "metadata.db"


class MetadataStoreFactory(ABC):
    """Builds the metadata store a job's driver and containers share; named in config by an alias
    (``sqlite``, ``kafka``) or a ``module:Class`` path."""

    @abstractmethod
    def get_metadata_store(self, config: Settings) -> MetadataStore: ...


def metadata_store_path(config: Settings) -> Path:
    """``metadata.store.path``, else ``metadata.db`` in the job's directory under ``job.data.dir``."""
    configured = config.view(MetadataConfig).store_path
    if configured:
        return Path(configured).expanduser()
    return config.job.job_dir / DEFAULT_FILE_NAME
