"""Find state backends by the names config uses, and decide which ones serve each store.

Backup factories of a store: ``stores.<s>.backup.factories``, else ``stores.backup.factories``, else
the changelog backend when ``stores.<s>.changelog`` is set, else none. Restore factories:
``stores.<s>.restore.factories``, else ``stores.restore.factories``, else the backup factories (Samza
falls back to the changelog only; restoring from what backs the store up is what users expect).
"""

from __future__ import annotations

from collections.abc import Mapping

from millstream.checkpoint.checkpoint import Checkpoint, CheckpointV1, CheckpointV2
from millstream.config.settings import Settings
from millstream.config.views import StoreConfig
from millstream.errors import ConfigError
from millstream.plugins import load_object
from millstream.storage.backends.base import StateBackendFactory

CHANGELOG = "changelog"
BLOBSTORE = "blobstore"
STATE_BACKEND_FACTORIES = {
    CHANGELOG: "millstream.storage.backends.changelog.factory:ChangelogStateBackendFactory",
    "org.apache.samza.storage.KafkaChangelogStateBackendFactory": (
        "millstream.storage.backends.changelog.factory:ChangelogStateBackendFactory"
    ),
    BLOBSTORE: "millstream.storage.backends.blobstore.factory:BlobStoreStateBackendFactory",
    "org.apache.samza.storage.blobstore.BlobStoreStateBackendFactory": (
        "millstream.storage.backends.blobstore.factory:BlobStoreStateBackendFactory"
    ),
}


def state_backend_factory_class(name: str, key: str) -> type[StateBackendFactory]:
    factory_class = load_object(name, key, STATE_BACKEND_FACTORIES)
    if not (isinstance(factory_class, type) and issubclass(factory_class, StateBackendFactory)):
        raise ConfigError(f"config key '{key}': '{name}' is not a StateBackendFactory")
    return factory_class


def backup_factory_names(config: Settings, store: str) -> list[tuple[str, str]]:
    """``(factory name, config key it came from)`` of every backup backend of ``store``, in order."""
    own = config.view(StoreConfig, store)
    if own.backup_factories is not None:
        return [(name, f"stores.{store}.backup.factories") for name in own.backup_factories]
    job = config.stores.backup_factories
    if job is not None:
        return [(name, "stores.backup.factories") for name in job]
    if own.changelog:
        return [(CHANGELOG, f"stores.{store}.changelog")]
    return []


def restore_factory_names(config: Settings, store: str) -> list[tuple[str, str]]:
    """``(factory name, config key)`` of the backends that may restore ``store``, in precedence order."""
    own = config.view(StoreConfig, store)
    if own.restore_factories is not None:
        return [(name, f"stores.{store}.restore.factories") for name in own.restore_factories]
    job = config.stores.restore_factories
    if job is not None:
        return [(name, "stores.restore.factories") for name in job]
    return backup_factory_names(config, store)


def _unique(classes: list[type[StateBackendFactory]]) -> list[type[StateBackendFactory]]:
    seen: dict[str, type[StateBackendFactory]] = {}
    for factory_class in classes:
        seen.setdefault(factory_class.marker_key(), factory_class)
    return list(seen.values())


def backup_factories(config: Settings, store: str) -> list[type[StateBackendFactory]]:
    return _unique([state_backend_factory_class(name, key) for name, key in backup_factory_names(config, store)])


def restore_factories(config: Settings, store: str) -> list[type[StateBackendFactory]]:
    return _unique([state_backend_factory_class(name, key) for name, key in restore_factory_names(config, store)])


def restore_factory_for(
    config: Settings, store: str, checkpoint: Checkpoint | None, has_changelog: bool
) -> type[StateBackendFactory] | None:
    """The backend that restores ``store`` from ``checkpoint`` (Samza's rule).

    A V1 checkpoint carries only changelog offsets: a store with a changelog restores from it, the
    others are not restored. Otherwise the first restore backend (in precedence order) that has a
    marker for the store in the checkpoint, else the first one configured.
    """
    candidates = restore_factories(config, store)
    if isinstance(checkpoint, CheckpointV1):
        if not has_changelog:
            return None
        changelog = state_backend_factory_class(CHANGELOG, f"stores.{store}.changelog")
        return next((c for c in candidates if c.marker_key() == changelog.marker_key()), changelog)
    if isinstance(checkpoint, CheckpointV2):
        markers: Mapping[str, Mapping[str, str]] = checkpoint.state_checkpoint_markers
        for candidate in candidates:
            if store in markers.get(candidate.marker_key(), {}):
                return candidate
    return candidates[0] if candidates else None


def builtin_factory_for_marker(marker_key: str) -> type[StateBackendFactory] | None:
    """The built-in backend whose markers a V2 checkpoint keeps under ``marker_key`` (None: another one),
    for a checkpoint written when the config still used it."""
    for name in (CHANGELOG, BLOBSTORE):
        factory_class = state_backend_factory_class(name, "stores.backup.factories")
        if factory_class.marker_key() == marker_key:
            return factory_class
    return None
