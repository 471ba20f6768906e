from __future__ import annotations

import pytest

from millstream.config.settings import Settings
from millstream.config.views import JobConfig, StoreConfig, StreamSamzaConfig, SystemSamzaConfig
from millstream.errors import ConfigError
from millstream.model import SystemStream
from millstream.table.settings import TableConfig


def test_a_view_is_parsed_once_and_the_same_object_is_handed_out_after():
    settings = Settings({"job.name": "j", "stores.counts.factory": "rocksdb"})
    assert settings.job is settings.job
    assert settings.view(StoreConfig, "counts") is settings.view(StoreConfig, "counts")
    assert settings.job.name == "j"


def test_named_sections_are_parsed_apart_and_each_error_names_its_own_key():
    settings = Settings({"stores.a.factory": "rocksdb", "stores.b.object.cache.size": "-1"})
    assert settings.view(StoreConfig, "a").factory == "rocksdb"
    with pytest.raises(ConfigError, match=r"stores\.b\.object\.cache\.size"):
        settings.view(StoreConfig, "b")


def test_a_bad_value_fails_every_time_it_is_asked_for_not_only_the_first():
    settings = Settings({"task.commit.ms": "soon"})
    for _ in range(2):
        with pytest.raises(ConfigError, match=r"task\.commit\.ms"):
            _ = settings.task


def test_a_named_schema_refuses_to_be_read_without_a_name_and_a_plain_one_with_one():
    settings = Settings({})
    with pytest.raises(TypeError, match="give the name"):
        settings.view(TableConfig)
    with pytest.raises(TypeError, match="SystemStream"):
        settings.view(StreamSamzaConfig, "log.words")
    with pytest.raises(TypeError, match=r"'job\.'"):
        settings.view(JobConfig, "x")


def test_the_stream_level_offset_default_and_trim_policy_override_the_system_level():
    settings = Settings(
        {
            "systems.log.samza.offset.default": "oldest",
            "systems.log.streams.late.samza.offset.default": "upcoming",
            "systems.log.streams.late.samza.trimmed.offset.policy": "oldest",
        }
    )
    assert settings.offset_default(SystemStream("log", "words")) == "oldest"
    assert settings.offset_default(SystemStream("log", "late")) == "upcoming"
    assert settings.trimmed_offset_policy(SystemStream("log", "words")) == "fail"
    assert settings.trimmed_offset_policy(SystemStream("log", "late")) == "oldest"
    assert settings.view(SystemSamzaConfig, "log").offset_default == "oldest"


def test_settings_of_a_config_keeps_its_keys_and_source_and_of_settings_is_the_same_object():
    config = Settings({"job.name": "j", "my.own.key": "x"}, source="/tmp/job.yaml")
    settings = Settings.of(config)
    assert dict(settings) == dict(config) and settings.source == config.source
    assert Settings.of(settings) is settings


def test_overrides_give_new_settings_whose_views_see_the_new_keys():
    settings = Settings({"job.name": "j"})
    assert settings.job.name == "j"
    changed = settings.with_overrides({"job.name": "k"})
    assert isinstance(changed, Settings) and changed.job.name == "k"
    assert settings.job.name == "j"
    assert isinstance(settings.without("job.name"), Settings)


def test_the_job_level_store_keys_are_read_apart_from_the_stores():
    settings = Settings({"stores.restore.factories": "changelog", "stores.counts.factory": "rocksdb"})
    assert settings.stores.restore_factories == ["changelog"]
    assert settings.adjunct_streams() == []
