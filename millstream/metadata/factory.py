"""The metadata-store factory contract (``metadata.store.factory``: ``sqlite`` unless configured).

Opening a store is :func:`millstream.metadata.opening.metadata_store`'s job, a composition root's; the name
``metadata_store`` still resolves here for one release, so callers not yet moved keep working.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from millstream.config.settings import Settings
from millstream.metadata.base import MetadataStore
from millstream.metadata.settings import MetadataConfig

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
    def get_metadata_store(self, config: Settings) -> MetadataStore: ...


def metadata_store_path(config: Settings) -> Path:
    """``metadata.store.path``, else ``metadata.db`` in the job's directory under ``job.data.dir``."""
    configured = config.view(MetadataConfig).store_path
    if configured:
        return Path(configured).expanduser()
    return config.job.job_dir / DEFAULT_FILE_NAME
