"""How a message of an adjunct stream becomes a store entry (SEP-4's ``KeyValueExtractor``).

The default stores the envelope's key and value as the stream's serdes decoded them. A user extractor
may project (keep a few fields of a large record) or transform (build a composite key); returning
``None`` as the key skips the message, ``None`` as the value deletes the key.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from millstream.config.core import Config
from millstream.config.settings import Settings
from millstream.config.views import StoreConfig
from millstream.errors import ConfigError
from millstream.model import IncomingMessageEnvelope
from millstream.plugins import load_object


class KeyValueExtractor(ABC):
    @abstractmethod
    def get_key(self, envelope: IncomingMessageEnvelope) -> Any: ...

    @abstractmethod
    def get_value(self, envelope: IncomingMessageEnvelope) -> Any: ...


class KeyValueExtractorFactory(ABC):
    @abstractmethod
    def get_key_value_extractor(self, config: Config) -> KeyValueExtractor: ...


class EnvelopeKeyValueExtractor(KeyValueExtractor):
    """The envelope's own key and value (the default)."""

    def get_key(self, envelope: IncomingMessageEnvelope) -> Any:
        return envelope.key

    def get_value(self, envelope: IncomingMessageEnvelope) -> Any:
        return envelope.message


def key_value_extractor(config: Settings, store: str) -> KeyValueExtractor | None:
    """The extractor ``stores.<store>.adstore.key.value.extractor.factory`` names; None for the default."""
    name = config.view(StoreConfig, store).adstore_extractor_factory
    if not name:
        return None
    key = f"stores.{store}.adstore.key.value.extractor.factory"
    factory_class = load_object(name, key)
    if not (isinstance(factory_class, type) and issubclass(factory_class, KeyValueExtractorFactory)):
        raise ConfigError(f"config key '{key}': '{name}' is not a millstream.adjunct.KeyValueExtractorFactory")
    extractor = factory_class().get_key_value_extractor(config)
    if not isinstance(extractor, KeyValueExtractor):
        raise ConfigError(f"config key '{key}': '{name}' returned {extractor!r}, not a KeyValueExtractor")
    return extractor
