"""Open the job's metadata store that ``metadata.store.factory`` names (``sqlite`` unless configured).

Kept apart from :mod:`millstream.contracts.metadata_factory` (the ``MetadataStoreFactory`` base class, which store
implementations import) because opening a store is a composition root's job: a container's services
(:mod:`millstream.runtime.services`) and the driver's open every connection, and hand them down.
"""

from __future__ import annotations

from millstream.config.settings import Settings
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.metadata_factory import FACTORY_KEY, METADATA_STORE_FACTORIES, MetadataStoreFactory
from millstream.contracts.metadata_settings import MetadataConfig
from millstream.errors import ConfigError
from millstream.plugins import load_object


def metadata_store(config: Settings) -> MetadataStore:
    """The store ``metadata.store.factory`` names, not yet opened (``init`` opens it)."""
    name = config.view(MetadataConfig).store_factory
    factory_class = load_object(name, FACTORY_KEY, METADATA_STORE_FACTORIES)
    if not (isinstance(factory_class, type) and issubclass(factory_class, MetadataStoreFactory)):
        raise ConfigError(f"config key '{FACTORY_KEY}': '{name}' is not a MetadataStoreFactory")
    return factory_class().get_metadata_store(config)
