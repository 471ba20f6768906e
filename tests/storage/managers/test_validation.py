"""Store configuration is checked at startup: every mistake stops the job naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from millstream.config.settings import Settings
from millstream.coordinator.prepare import prepare
from millstream.errors import ConfigError

BASE = {"task.class": "tests.storage.jobs:CountPerKey", "task.inputs": "log.in"}


def check(tmp_path: Path, **values: str) -> None:
    prepare(Settings({**BASE, "job.data.dir": str(tmp_path), **values}))


def test_a_rocksdb_store_with_serdes_and_a_changelog_is_valid(tmp_path: Path) -> None:
    check(
        tmp_path,
        **{
            "stores.counts.factory": "rocksdb",
            "stores.counts.key.serde": "string",
            "stores.counts.msg.serde": "json",
            "stores.counts.changelog": "log.counts-changelog",
        },
    )


def test_samzas_store_factory_class_names_are_accepted(tmp_path: Path) -> None:
    check(tmp_path, **{"stores.s.factory": "org.apache.samza.storage.kv.inmemory.InMemoryKeyValueStorageEngineFactory"})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"stores.s.colour": "red"}, r"unknown config key 'stores\.s\.colour'"),
        ({"stores.s": "x"}, r"stores\.<store>\.<setting>"),
        ({"stores.s.factory": "nosuch"}, r"stores\.s\.factory"),
        ({"stores.s.key.serde": "nope"}, r"unknown serde 'nope'.*stores\.s\.key\.serde"),
        ({"stores.s.backup.factories": "nosuch"}, r"stores\.s\.backup\.factories"),
        ({"stores.backup.factories": "bogus"}, r"stores\.backup\.factories"),
        ({"stores.s.clean.on.container.start": "maybe"}, r"stores\.s\.clean\.on\.container\.start"),
        ({"blob.colour": "x"}, r"unknown config key 'blob\.colour'"),
        ({"blob.store.nope": "x"}, r"unknown config key 'blob\.store\.nope'"),
        ({"task.checkpoint.read.versions": "3"}, r"task\.checkpoint\.read\.versions"),
        ({"task.checkpoint.write.versions": "1,1"}, r"repeats a version"),
    ],
)
def test_mistakes_name_the_key(tmp_path: Path, values: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check(tmp_path, **values)


def test_a_blob_store_backup_needs_version_2_first_in_the_read_versions(tmp_path: Path) -> None:
    blob = {"stores.s.backup.factories": "blobstore"}
    with pytest.raises(ConfigError, match=r"task\.checkpoint\.read\.versions is '1'"):
        check(tmp_path, **blob)
    with pytest.raises(ConfigError, match=r"read\.versions is '1,2': put 2 first"):
        check(tmp_path, **blob, **{"task.checkpoint.read.versions": "1,2"})
    check(tmp_path, **blob, **{"task.checkpoint.read.versions": "2,1"})


def test_a_blob_store_backup_needs_v2_writes_and_a_persistent_store(tmp_path: Path) -> None:
    blob = {"stores.s.backup.factories": "blobstore", "task.checkpoint.read.versions": "2"}
    with pytest.raises(ConfigError, match=r"write\.versions '1' does not write V2"):
        check(tmp_path, **blob, **{"task.checkpoint.write.versions": "1"})
    with pytest.raises(ConfigError, match=r"store 's'.*'inmemory' keeps no files"):
        check(tmp_path, **blob, **{"stores.s.factory": "inmemory"})


def test_job_level_backup_factories_apply_to_every_store(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"store 's' uses the blob store backend"):
        check(tmp_path, **{"stores.backup.factories": "blobstore", "stores.s.factory": "rocksdb"})


def test_a_changelog_store_without_a_changelog_is_refused_when_the_inputs_span_two_systems(tmp_path: Path) -> None:
    """No default system to derive a changelog on: the config must choose (see backends/changelog/test_names.py)."""
    two_systems = {"task.inputs": "log.in,other.in", "systems.other.samza.factory": "log"}
    with pytest.raises(ConfigError, match=r"'stores\.s\.changelog' is not set"):
        check(tmp_path, **two_systems, **{"stores.s.backup.factories": "changelog"})
