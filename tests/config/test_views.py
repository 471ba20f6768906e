"""Typed views and startup validation: closed namespaces reject unknown keys naming the key and the
accepted ones, ill-typed values name the key, and stream names and broadcast inputs parse as in Samza."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from millstream.config.core import Config
from millstream.config.settings import Settings
from millstream.config.views import (
    JobConfig,
    StoreConfig,
    StreamSamzaConfig,
    SystemSamzaConfig,
    TaskConfig,
    parse_broadcast_inputs,
    parse_stream,
    system_names,
)
from millstream.contracts.metadata_settings import MetadataConfig
from millstream.contracts.systems import SystemFactory
from millstream.coordinator.prepare import prepare
from millstream.errors import ConfigError
from millstream.model import SystemStream, SystemStreamPartition

SECRET = "hunter2-do-not-print"


class StubSystemFactory(SystemFactory):
    """Stands in for a real system so validation can be tested without one."""

    config_keys: ClassVar[frozenset[str] | None] = frozenset({"url", "path"})
    open_prefixes: ClassVar[tuple[str, ...]] = ("consumer.",)

    def get_admin(self, system_name: str, config: Config) -> Any:
        raise NotImplementedError

    def get_consumer(self, system_name: str, config: Config) -> Any:
        raise NotImplementedError

    def get_producer(self, system_name: str, config: Config) -> Any:
        raise NotImplementedError


class OpenSystemFactory(StubSystemFactory):
    config_keys: ClassVar[frozenset[str] | None] = None


STUB = f"{__name__}:StubSystemFactory"


def stubbed(values: dict[str, Any]) -> Config:
    """A config whose default ``log`` system is the stub, so prepare() needs no real system."""
    return Settings({"systems.log.samza.factory": STUB, **values})


# -- JobConfig / TaskConfig / MetadataConfig -----------------------------------------------------------


def test_job_defaults() -> None:
    job = Settings({}).job
    assert (job.name, job.id, job.container_count, job.container_retry_count) == ("millstream-job", "1", 1, 3)
    assert job.job_key == "millstream-job-1"
    assert job.job_dir == Path(".millstream") / "jobs" / "millstream-job-1"


def test_job_view_reads_flat_keys() -> None:
    job = Settings({"job.name": "wc", "job.id": "7", "job.container.count": "4", "job.data.dir": "/d"}).job
    assert job.container_count == 4
    assert job.job_dir == Path("/d/jobs/wc-7")


def test_task_defaults_and_lists() -> None:
    task = Settings({"task.inputs": "log.a, b", "task.drop.deserialization.errors": "yes"}).task
    assert task.commit_ms == 60_000
    assert task.checkpoint_factory == "metadata"
    assert task.inputs == ["log.a", "b"]
    assert task.input_streams() == [SystemStream("log", "a"), SystemStream("log", "b")]
    assert task.drop_deserialization_errors is True
    assert task.dead_letter() is None


def test_metadata_view_defaults_to_sqlite() -> None:
    assert Settings({}).view(MetadataConfig).store_factory == "sqlite"
    assert Settings({}).view(MetadataConfig).store_path is None


@pytest.mark.parametrize(
    ("key", "view"),
    [
        ("task.comit.ms", TaskConfig),
        ("job.foo", JobConfig),
        ("metadata.store.bogus", MetadataConfig),
    ],
)
def test_unknown_key_in_a_closed_namespace_names_the_key_and_the_accepted_ones(key: str, view: Any) -> None:
    with pytest.raises(ConfigError) as raised:
        Settings({key: "1"}).view(view)
    message = str(raised.value)
    assert f"unknown config key '{key}'" in message
    assert "accepted under" in message


def test_unknown_task_key_lists_the_accepted_task_keys() -> None:
    with pytest.raises(ConfigError, match=r"'task\.comit\.ms'.*commit\.ms.*inputs"):
        _ = Settings({"task.comit.ms": "5"}).task


def test_python_field_names_are_not_accepted_as_keys() -> None:
    with pytest.raises(ConfigError, match=r"unknown config key 'task\.commit_ms'"):
        _ = Settings({"task.commit_ms": "5"}).task
    with pytest.raises(ConfigError, match=r"unknown config key 'job\.container_count'"):
        _ = Settings({"job.container_count": "2"}).job


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"task.commit.ms": "abc"}, "task.commit.ms"),
        ({"job.container.count": "0"}, "job.container.count"),
        ({"job.container.retry.count": "-1"}, "job.container.retry.count"),
        ({"task.drop.serialization.errors": "maybe"}, "task.drop.serialization.errors"),
        ({"task.poll.interval.ms": "-5"}, "task.poll.interval.ms"),
    ],
)
def test_ill_typed_value_names_the_key_and_the_value(values: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        prepare(stubbed(values))
    assert f"config key '{key}' has invalid value {next(iter(values.values()))!r}" in str(raised.value)


# -- streams and broadcast inputs ----------------------------------------------------------------------


def test_bare_stream_names_belong_to_the_log_system() -> None:
    assert parse_stream(" pages ", "task.inputs") == SystemStream("log", "pages")


def test_stream_names_may_contain_dots_after_the_system() -> None:
    assert parse_stream("kafka.my.topic", "task.inputs") == SystemStream("kafka", "my.topic")


@pytest.mark.parametrize("text", ["", "  ", ".pages", "kafka."])
def test_malformed_stream_names_are_config_errors_naming_the_key(text: str) -> None:
    with pytest.raises(ConfigError, match=r"task\.inputs"):
        parse_stream(text, "task.inputs")


def test_broadcast_single_partition() -> None:
    assert parse_broadcast_inputs(["s.st#0"]) == {SystemStreamPartition("s", "st", 0)}


def test_broadcast_partition_range_is_inclusive() -> None:
    assert parse_broadcast_inputs(["s.st#[0-3]", "other#5"]) == {
        *(SystemStreamPartition("s", "st", p) for p in range(4)),
        SystemStreamPartition("log", "other", 5),
    }


def test_broadcast_inputs_come_from_task_config() -> None:
    task = Settings({"task.broadcast.inputs": "s.st#[1-2], s.st#7"}).task
    assert task.broadcast_ssps() == {SystemStreamPartition("s", "st", p) for p in (1, 2, 7)}


@pytest.mark.parametrize(
    "entry",
    [
        "s.st",
        "s.st#",
        "s.st#x",
        "s.st#-1",
        "s.st#[3-1]",
        "s.st#[0-]",
        "s.st#[0]",
        "s.st#[-2]",
        "s.st#1_0",
        "s.st#+1",
        "s.st#[0-1-2]",
        "s.st#\u0663",
        "#0",
        ".st#0",
    ],
)
def test_malformed_broadcast_entries_are_rejected_naming_the_key(entry: str) -> None:
    with pytest.raises(ConfigError, match=r"task\.broadcast\.inputs"):
        parse_broadcast_inputs([entry])


def test_malformed_broadcast_input_stops_validation() -> None:
    with pytest.raises(ConfigError, match=r"task\.broadcast\.inputs.*s\.st#x"):
        prepare(stubbed({"task.broadcast.inputs": "s.st#x"}))


# -- systems -------------------------------------------------------------------------------------------


def test_system_names_always_include_log() -> None:
    assert system_names(Settings({"systems.kafka.samza.factory": "kafka", "systems.k2.url": "x"})) == [
        "k2",
        "kafka",
        "log",
    ]


def test_stream_offset_default_overrides_the_system_one() -> None:
    config = Settings(
        {
            "systems.kafka.samza.offset.default": "oldest",
            "systems.kafka.streams.b.samza.offset.default": "upcoming",
        }
    )
    assert config.offset_default(SystemStream("kafka", "a")) == "oldest"
    assert config.offset_default(SystemStream("kafka", "b")) == "upcoming"
    assert Settings({}).offset_default(SystemStream("log", "a")) == "upcoming"


def test_stream_samza_view_parses_reset_offset() -> None:
    config = Settings({"systems.log.streams.in.samza.reset.offset": "true"})
    assert config.view(StreamSamzaConfig, SystemStream("log", "in")).reset_offset is True


def test_bad_offset_default_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"systems\.log\.samza\.offset\.default"):
        Settings({"systems.log.samza.offset.default": "newest"}).view(SystemSamzaConfig, "log")


def test_validate_accepts_a_well_formed_config() -> None:
    prepare(
        stubbed(
            {
                "job.name": "wc",
                "task.inputs": "log.in",
                "task.commit.ms": "1000",
                "systems.log.url": "x",
                "systems.log.consumer.anything": "passes through",
                "systems.log.samza.msg.serde": "json",
                "systems.log.streams.in.samza.key.serde": "string",
                "serializers.registry.mine.class": "org.apache.samza.serializers.StringSerdeFactory",
                "sensitive.password": SECRET,
                "spark.executor.memory": "1g",
                "user.anything": "open namespace",
            }
        )
    )


def test_unknown_system_key_names_the_key_and_what_the_factory_accepts() -> None:
    with pytest.raises(ConfigError) as raised:
        prepare(stubbed({"systems.log.bogus": "1"}))
    message = str(raised.value)
    assert "unknown config key 'systems.log.bogus'" in message
    assert "path" in message and "url" in message and "consumer.*" in message


def test_system_with_an_open_namespace_accepts_any_key() -> None:
    prepare(Settings({"systems.log.samza.factory": f"{__name__}:OpenSystemFactory", "systems.log.whatever": "1"}))


def test_unknown_system_samza_key_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"unknown config key 'systems\.log\.samza\.msg\.serdes'"):
        prepare(stubbed({"systems.log.samza.msg.serdes": "json"}))


def test_stream_settings_outside_samza_are_rejected() -> None:
    with pytest.raises(ConfigError, match=r"unknown config key 'systems\.log\.streams\.in\.bogus'"):
        prepare(stubbed({"systems.log.streams.in.bogus": "1"}))


def test_unknown_stream_samza_key_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"unknown config key 'systems\.log\.streams\.in\.samza\.bogus'"):
        prepare(stubbed({"systems.log.streams.in.samza.bogus": "1"}))


def test_a_system_without_a_factory_is_rejected_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"systems\.kafka2\.samza\.factory"):
        prepare(stubbed({"systems.kafka2.url": "x"}))


def test_a_key_directly_under_systems_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"unknown config key 'systems\.log'"):
        prepare(stubbed({"systems.log": "x"}))


def test_unknown_system_level_serde_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"unknown serde 'nosuch'.*systems\.log\.samza\.msg\.serde"):
        prepare(stubbed({"systems.log.samza.msg.serde": "nosuch"}))


def test_unknown_stream_level_serde_is_rejected_at_startup_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"unknown serde 'nosuch'.*systems\.log\.streams\.in\.samza\.key\.serde"):
        prepare(stubbed({"systems.log.streams.in.samza.key.serde": "nosuch"}))


@pytest.mark.parametrize(
    "key", ["serializers.registry.x.klass", "serializers.registry.x", "serializers.other", "serializers.foo.bar.class"]
)
def test_malformed_serializer_keys_are_rejected_naming_the_key(key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        prepare(stubbed({key: "string"}))
    assert f"'{key}'" in str(raised.value)
    assert "serializers.registry.<name>.class" in str(raised.value)


def test_store_keys_are_rejected() -> None:
    with pytest.raises(ConfigError, match=r"stores\.s\.factory"):
        prepare(stubbed({"stores.s.factory": "x"}))


def test_samzas_changelog_kafka_keys_become_the_stores_changelog_topic_configs() -> None:
    store = StoreConfig.parse(
        {"changelog.kafka.segment.bytes": "1048576", "changelog.kafka.max.message.bytes": "2097152"}, "stores.s."
    )
    assert store.changelog_kafka == {"segment.bytes": "1048576", "max.message.bytes": "2097152"}
    kept = {"changelog.kafka.cleanup.policy": "compact,delete", "changelog.kafka.retention.ms": "-1"}
    assert StoreConfig.parse(kept, "stores.s.").changelog_kafka == {
        "cleanup.policy": "compact,delete",
        "retention.ms": "-1",
    }
    assert StoreConfig.parse({}, "stores.s.").changelog_kafka == {}


@pytest.mark.parametrize(
    ("entries", "refused"),
    [
        ({"changelog.kafka.cleanup.policy": "delete"}, r"'stores\.s\.changelog\.kafka\.cleanup\.policy' is 'delete'"),
        (
            {"changelog.kafka.cleanup.policy": "compact,delete"},
            r"'stores\.s\.changelog\.kafka\.cleanup\.policy' is 'compact,delete'.*"
            r"'stores\.s\.changelog\.kafka\.retention\.ms' -1",
        ),
        (
            {"changelog.kafka.min.compaction.lag.ms": "0"},
            r"'stores\.s\.changelog\.kafka\.min\.compaction\.lag\.ms' is 0, below "
            r"'stores\.s\.changelog\.min\.compaction\.lag\.ms' \(14400000\)",
        ),
        (
            {"changelog.kafka.delete.retention.ms": "60000"},
            r"'stores\.s\.changelog\.kafka\.delete\.retention\.ms' is 60000, below "
            r"'stores\.s\.changelog\.delete\.retention\.ms' \(86400000\)",
        ),
        ({"changelog.kafka.delete.retention.ms": "1d"}, r"is '1d', not a number of milliseconds"),
        ({"changelog.kafka.replication.factor": "3"}, r"set 'stores\.s\.changelog\.replication\.factor'"),
    ],
)
def test_changelog_kafka_keys_that_would_weaken_what_a_restore_relies_on_are_refused_naming_the_key(
    entries: dict[str, str], refused: str
) -> None:
    with pytest.raises(ConfigError, match=refused):
        StoreConfig.parse(entries, "stores.s.")


def test_a_changelog_kafka_floor_lowered_with_the_stores_own_key_is_accepted() -> None:
    store = StoreConfig.parse(
        {"changelog.kafka.min.compaction.lag.ms": "0", "changelog.min.compaction.lag.ms": "0"}, "stores.s."
    )
    assert store.changelog_kafka == {"min.compaction.lag.ms": "0"}


def test_sensitive_values_never_appear_in_validation_errors() -> None:
    config = stubbed({"sensitive.password": SECRET, "task.comit.ms": "1"})
    with pytest.raises(ConfigError) as raised:
        prepare(config)
    assert SECRET not in str(raised.value)
    assert SECRET not in repr(config)


# -- the real log system (needs millstream.embedded.log) ------------------------------------------------


def test_validate_accepts_a_config_that_names_no_system() -> None:
    prepare(Settings({"job.name": "j", "task.inputs": "in"}))


def test_unknown_key_of_the_log_system_is_rejected_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"unknown config key 'systems\.log\.bogus'"):
        prepare(Settings({"systems.log.bogus": "1"}))
