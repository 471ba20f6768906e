"""Which backends back up and restore each store, and which one restores it from a given checkpoint."""

from __future__ import annotations

from millstream.checkpoint.checkpoint import CheckpointId, CheckpointV1, CheckpointV2
from millstream.config.settings import Settings
from millstream.storage.backends.blobstore.factory import BlobStoreStateBackendFactory
from millstream.storage.backends.changelog.factory import ChangelogStateBackendFactory
from millstream.storage.backends.registry import (
    backup_factories,
    restore_factories,
    restore_factory_for,
)

CHANGELOG_KEY = ChangelogStateBackendFactory.marker_key()
BLOB_KEY = BlobStoreStateBackendFactory.marker_key()


def test_a_changelog_alone_means_the_changelog_backend() -> None:
    config = Settings({"stores.s.changelog": "log.c"})
    assert backup_factories(config, "s") == [ChangelogStateBackendFactory]
    assert restore_factories(config, "s") == [ChangelogStateBackendFactory]


def test_store_level_factories_override_job_level_ones() -> None:
    config = Settings(
        {
            "stores.backup.factories": "changelog",
            "stores.s.backup.factories": "blobstore",
            "stores.t.changelog": "log.c",
        }
    )
    assert backup_factories(config, "s") == [BlobStoreStateBackendFactory]
    assert backup_factories(config, "t") == [ChangelogStateBackendFactory]


def test_restore_factories_default_to_the_backup_ones() -> None:
    config = Settings({"stores.s.backup.factories": "changelog,blobstore", "stores.s.changelog": "log.c"})
    assert restore_factories(config, "s") == [ChangelogStateBackendFactory, BlobStoreStateBackendFactory]
    config = config.with_overrides({"stores.restore.factories": "blobstore"})
    assert restore_factories(config, "s") == [BlobStoreStateBackendFactory]


def test_samzas_class_names_and_aliases_are_the_same_backend() -> None:
    config = Settings(
        {"stores.s.backup.factories": "blobstore,org.apache.samza.storage.blobstore.BlobStoreStateBackendFactory"}
    )
    assert backup_factories(config, "s") == [BlobStoreStateBackendFactory]
    assert CHANGELOG_KEY == "org.apache.samza.storage.KafkaChangelogStateBackendFactory"


def test_a_v1_checkpoint_restores_changelog_stores_from_the_changelog_and_no_others() -> None:
    config = Settings({"stores.s.backup.factories": "changelog,blobstore", "stores.s.changelog": "log.c"})
    v1 = CheckpointV1({})
    assert restore_factory_for(config, "s", v1, has_changelog=True) is ChangelogStateBackendFactory
    assert restore_factory_for(config, "s", v1, has_changelog=False) is None


def test_a_v2_checkpoint_picks_the_first_restore_backend_with_a_marker_for_the_store() -> None:
    config = Settings({"stores.s.backup.factories": "changelog,blobstore", "stores.s.changelog": "log.c"})
    only_blob = CheckpointV2(CheckpointId(1, 1), {}, {BLOB_KEY: {"s": "index"}})
    both = CheckpointV2(CheckpointId(1, 1), {}, {BLOB_KEY: {"s": "index"}, CHANGELOG_KEY: {"s": "{}"}})
    assert restore_factory_for(config, "s", only_blob, True) is BlobStoreStateBackendFactory
    assert restore_factory_for(config, "s", both, True) is ChangelogStateBackendFactory
    preferring_blob = config.with_overrides({"stores.s.restore.factories": "blobstore,changelog"})
    assert restore_factory_for(preferring_blob, "s", both, True) is BlobStoreStateBackendFactory


def test_without_a_marker_or_checkpoint_the_first_restore_backend_is_used() -> None:
    config = Settings({"stores.s.backup.factories": "blobstore"})
    assert restore_factory_for(config, "s", None, False) is BlobStoreStateBackendFactory
    assert restore_factory_for(Settings({}), "s", None, False) is None
