"""The operator store is declared from the application, with the job's state backends."""

from __future__ import annotations

from millstream.config import Config
from millstream.config.settings import Settings
from millstream.config.views import StoreConfig, store_names
from millstream.operators.stores import OPERATOR_STORE
from millstream.storage.backends.registry import backup_factory_names
from tests.api.apps import app_config


def operator_store(config: Config) -> StoreConfig:
    """The operator store's view, read from the prepared job's settings."""
    return Settings.of(config).view(StoreConfig, OPERATOR_STORE)


def test_a_windowed_application_gets_a_rocksdb_operator_store_with_a_changelog_by_default(tmp_path):
    config = app_config(tmp_path, "tests.api.apps:WindowedCount")
    assert OPERATOR_STORE in store_names(config)
    own = operator_store(config)
    assert own.factory == "rocksdb"
    assert own.changelog == "log.test-1-operator-state-changelog"
    assert backup_factory_names(config, OPERATOR_STORE) == [("changelog", f"stores.{OPERATOR_STORE}.changelog")]


def test_the_operator_store_has_no_object_cache_of_its_own_since_its_operators_cache_their_entries(tmp_path):
    assert operator_store(app_config(tmp_path, "tests.api.apps:WindowedCount")).object_cache(OPERATOR_STORE) == (0, 0)
    config = app_config(tmp_path, "tests.api.apps:WindowedCount", **{"stores__operator-state__object__cache__size": 50})
    assert operator_store(config).object_cache(OPERATOR_STORE) == (50, 50)


def test_a_stateless_application_declares_no_store(tmp_path):
    config = app_config(tmp_path, "tests.api.apps:RepartitionPassThrough")
    assert store_names(config) == []


def test_the_operator_store_takes_the_jobs_blob_backup_without_a_changelog(tmp_path):
    config = app_config(
        tmp_path,
        "tests.api.apps:WindowedCount",
        stores__backup__factories="blobstore",
        task__checkpoint__read__versions="2,1",
    )
    assert operator_store(config).changelog is None
    assert backup_factory_names(config, OPERATOR_STORE) == [("blobstore", "stores.backup.factories")]


def test_the_users_own_operator_store_settings_win(tmp_path):
    config = app_config(
        tmp_path,
        "tests.api.apps:WindowedCount",
        **{"stores__operator-state__factory": "inmemory", "stores__operator-state__changelog": "log.mine"},
    )
    own = operator_store(config)
    assert (own.factory, own.changelog) == ("inmemory", "log.mine")


def test_each_stage_job_gets_its_own_changelog(tmp_path):
    changelogs = {
        operator_store(app_config(tmp_path, "tests.api.apps:WindowedCount", app__stage=stage)).changelog
        for stage in (1,)
    }
    assert changelogs == {"log.test-stage-1-1-operator-state-changelog"}
    assert store_names(app_config(tmp_path, "tests.api.apps:WindowedCount", app__stage=0)) == []
