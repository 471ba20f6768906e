"""The factory: its accepted keys, where the log lives, and settings reaching admin, consumer and producer."""

from __future__ import annotations

from pathlib import Path

import pytest

from millstream.composition.systems import system_factory
from millstream.config.settings import Settings
from millstream.coordinator.prepare import load_job_config, prepare
from millstream.embedded.log.factory import LogSystemFactory
from millstream.errors import ConfigError


def test_the_registry_loads_the_log_factory_without_configuration() -> None:
    assert isinstance(system_factory(Settings({}), "log"), LogSystemFactory)


def test_config_keys_are_the_documented_settings() -> None:
    assert LogSystemFactory.config_keys == {
        "path",
        "fsync",
        "poll.batch.size",
        "producer.batch.size",
        "producer.linger.ms",
        "producer.linger.when.drained",
        "auto.create.streams",
        "default.partitions",
        "retention.ms",
        "transaction.timeout.ms",
        "admin.open.partitions.max",
        "consumer.open.partitions.max",
        "producer.open.partitions.max",
    }


def test_startup_validation_accepts_log_settings_and_rejects_unknown_keys(tmp_path: Path) -> None:
    prepare(Settings({"systems.log.poll.batch.size": "10", "systems.log.fsync": "true"}))
    with pytest.raises(ConfigError, match=r"unknown config key 'systems.log.poll.size'.*poll.batch.size"):
        prepare(Settings({"systems.log.poll.size": "10"}))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("poll.batch.size", "0"),
        ("default.partitions", "x"),
        ("fsync", "maybe"),
        ("retention.ms", "-5"),
        ("consumer.open.partitions.max", "0"),
    ],
)
def test_an_invalid_setting_fails_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"'systems.log.{key}'"):
        LogSystemFactory().get_consumer("log", Settings({f"systems.log.{key}": value}))


def test_the_root_is_the_path_setting_when_given(tmp_path: Path) -> None:
    admin = LogSystemFactory().get_admin("log", Settings({"systems.log.path": str(tmp_path / "here")}))
    assert admin.layout.root == tmp_path / "here"


def test_the_root_defaults_to_log_under_the_job_data_dir(tmp_path: Path) -> None:
    admin = LogSystemFactory().get_admin("log", Settings({"job.data.dir": str(tmp_path)}))
    assert admin.layout.root == tmp_path / "log"


def test_without_a_data_dir_the_root_is_dot_millstream_log_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    admin = LogSystemFactory().get_admin("log", Settings({}))
    assert admin.layout.root == tmp_path.resolve() / ".millstream" / "log"


def test_a_loaded_config_resolves_a_relative_path_against_the_config_file(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("systems:\n  log:\n    path: data/streams\n")
    admin = LogSystemFactory().get_admin("log", load_job_config(job))
    assert admin.layout.root == tmp_path.resolve() / "data" / "streams"


def test_each_system_reads_its_own_settings(tmp_path: Path) -> None:
    config = Settings(
        {
            "systems.fast.samza.factory": "log",
            "systems.fast.path": str(tmp_path / "fast"),
            "systems.fast.poll.batch.size": "7",
            "systems.log.path": str(tmp_path / "default"),
        }
    )
    fast = LogSystemFactory().get_consumer("fast", config)
    default = LogSystemFactory().get_consumer("log", config)
    assert (fast.system, fast.batch_size, fast.layout.root) == ("fast", 7, tmp_path / "fast")
    assert (default.batch_size, default.layout.root) == (5000, tmp_path / "default")
