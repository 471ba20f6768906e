"""Startup checks of everything about state: ``stores.*``, ``blob.*`` and the checkpoint versions, so
a misconfigured store stops the job before it starts, with the key at fault."""

from __future__ import annotations

from typing import TYPE_CHECKING

from millstream.config.settings import Settings
from millstream.config.views import StoreConfig, adjunct_store_names, parse_stream, store_names
from millstream.contracts.blobstore_settings import BlobStoreConfig
from millstream.errors import ConfigError
from millstream.storage.backends.registry import backup_factories, restore_factories, state_backend_factory_class
from millstream.storage.factory import storage_engine_factory

if TYPE_CHECKING:
    from millstream.serde.registry import SerdeRegistry


def validate_state_config(config: Settings, serdes: SerdeRegistry) -> None:
    for key in config:
        if key.startswith("blob.") and not key.startswith(BlobStoreConfig.PREFIX):
            raise ConfigError(f"unknown config key '{key}' (expected blob.store.<setting>)")
    config.view(BlobStoreConfig)
    job_level = config.stores
    for key, names in (
        ("stores.backup.factories", job_level.backup_factories),
        ("stores.restore.factories", job_level.restore_factories),
    ):
        for name in names or ():
            state_backend_factory_class(name, key)
    task = config.task
    for versions, key in ((task.checkpoint_write_versions, "write"), (task.checkpoint_read_versions, "read")):
        if len(set(versions)) != len(versions):
            raise ConfigError(f"config key 'task.checkpoint.{key}.versions' repeats a version: {versions}")
    adjunct = set(adjunct_store_names(config))
    _refuse_shared_changelogs(config)
    for store in store_names(config):
        own = config.view(StoreConfig, store)
        for kind, serde_name in (("key", own.key_serde), ("msg", own.msg_serde)):
            if serde_name:
                serdes.get(serde_name, f"stores.{store}.{kind}.serde")
        own.object_cache(store)
        if own.changelog:
            parse_stream(own.changelog, f"stores.{store}.changelog")
        persistent = storage_engine_factory(config, store).persistent
        if store in adjunct:
            continue
        factories = {f.marker_key(): f for f in (*backup_factories(config, store), *restore_factories(config, store))}
        for factory_class in factories.values():
            factory_class().validate_store(config, store, own, persistent)


def _refuse_shared_changelogs(config: Settings) -> None:
    """Two stores of one job writing one changelog would restore each other's keys: refuse the config."""
    owners: dict[tuple[str, str], str] = {}
    for store in store_names(config):
        changelog = config.view(StoreConfig, store).changelog
        if not changelog:
            continue
        stream = parse_stream(changelog, f"stores.{store}.changelog")
        other = owners.setdefault((stream.system, stream.stream), store)
        if other != store:
            raise ConfigError(
                f"stores '{other}' and '{store}' both name changelog '{stream.system}.{stream.stream}' "
                f"(stores.{other}.changelog, stores.{store}.changelog): each store needs a changelog of its own"
            )
