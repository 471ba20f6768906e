"""Startup checks of the adjunct store keys, so a misconfigured store stops the job before it starts."""

from __future__ import annotations

from millstream.adjunct.extractor import key_value_extractor
from millstream.config.settings import Settings
from millstream.config.views import StoreConfig, adjunct_store_names
from millstream.errors import ConfigError
from millstream.plugins import load_object


def validate_adjunct_config(config: Settings) -> None:
    manager = config.stores.adstore_manager_factory
    if manager:
        load_object(manager, "stores.adstore.manager.factory")
    for name in adjunct_store_names(config):
        own = config.view(StoreConfig, name)
        stream = own.adjunct_input(name)
        if "," in (own.adstore_input or ""):
            raise ConfigError(f"config key 'stores.{name}.adstore.input': a store has one input stream, not several")
        for key, value in (
            ("changelog", own.changelog),
            ("backup.factories", own.backup_factories),
            ("restore.factories", own.restore_factories),
        ):
            if value:
                raise ConfigError(
                    f"config key 'stores.{name}.{key}': adjunct store '{name}' is rebuilt from its input {stream}, "
                    "it takes no changelog or state backend"
                )
        key_value_extractor(config, name)
