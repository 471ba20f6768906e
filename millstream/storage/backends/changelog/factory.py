"""``changelog`` (or Samza's ``org.apache.samza.storage.KafkaChangelogStateBackendFactory``): works on
any system (the embedded log, Kafka)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from millstream.config.core import Config
from millstream.config.settings import Settings
from millstream.config.views import StoreConfig, parse_stream
from millstream.contracts.metadata import MetadataStore
from millstream.errors import ConfigError
from millstream.job_model import JobModel
from millstream.storage.backends.base import (
    AdminSource,
    StateBackendAdmin,
    StateBackendFactory,
    TaskBackendContext,
    TaskBackupManager,
    TaskRestoreManager,
)
from millstream.storage.backends.changelog.admin import ChangelogStateBackendAdmin
from millstream.storage.backends.changelog.backup import ChangelogTaskBackupManager
from millstream.storage.backends.changelog.restore import ChangelogTaskRestoreManager


class ChangelogStateBackendFactory(StateBackendFactory):
    checkpoint_name: ClassVar[str] = "org.apache.samza.storage.KafkaChangelogStateBackendFactory"
    reads_local_checkpoint: ClassVar[bool] = False

    def validate_store(self, config: Config, store: str, store_config: StoreConfig, persistent: bool) -> None:
        if not store_config.changelog:
            raise ConfigError(
                f"store '{store}' uses the changelog backend but 'stores.{store}.changelog' is not set "
                f"(system.stream), and no default is derived: the job's inputs are not all on one system"
            )
        parse_stream(store_config.changelog, f"stores.{store}.changelog")

    def get_backup_manager(self, context: TaskBackendContext) -> TaskBackupManager:
        return ChangelogTaskBackupManager(context)

    def get_restore_manager(self, context: TaskBackendContext) -> TaskRestoreManager:
        return ChangelogTaskRestoreManager(context, self.marker_key())

    def get_admin(
        self,
        config: Settings,
        job_model: JobModel,
        metadata_store: MetadataStore,
        stores: Mapping[str, StoreConfig],
        admins: AdminSource,
    ) -> StateBackendAdmin:
        return ChangelogStateBackendAdmin(config, job_model, metadata_store, stores, admins)
