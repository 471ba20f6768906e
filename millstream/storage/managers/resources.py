"""What the job coordinator does for state before containers start: assign changelog partitions and
let every backup backend create (and check) its job-level resources (changelog streams, buckets)."""

from __future__ import annotations

from collections.abc import Mapping

from millstream.config.settings import Settings
from millstream.config.views import StoreConfig, task_store_names
from millstream.contracts.metadata import MetadataStore
from millstream.job_model import JobModel
from millstream.storage.backends.base import AdminSource, StateBackendFactory
from millstream.storage.backends.registry import backup_factories
from millstream.storage.changelog_partitions import assign_changelog_partitions


def prepare_state_resources(
    config: Settings, metadata_store: MetadataStore, job_model: JobModel, admins: AdminSource
) -> None:
    """``admins``: the driver's started admins (it owns them)."""
    stores = task_store_names(config)
    if not stores:
        return
    assign_changelog_partitions(metadata_store, job_model.tasks)
    by_backend: dict[str, tuple[type[StateBackendFactory], dict[str, StoreConfig]]] = {}
    for store in stores:
        for factory_class in backup_factories(config, store):
            entry = by_backend.setdefault(factory_class.marker_key(), (factory_class, {}))
            entry[1][store] = config.view(StoreConfig, store)
    for factory_class, backend_stores in by_backend.values():
        factory = factory_class()
        try:
            admin = factory.get_admin(config, job_model, metadata_store, _frozen(backend_stores), admins)
            admin.create_resources()
            admin.validate_resources()
        finally:
            factory.close()


def _frozen(stores: dict[str, StoreConfig]) -> Mapping[str, StoreConfig]:
    return dict(sorted(stores.items()))
