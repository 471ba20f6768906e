"""A changelog-backed store that names no changelog gets ``<job.name>-<job.id>-<store>-changelog`` on the
system of the job's inputs, as Kafka Streams derives ``<application.id>-<store>-changelog``; an explicit
name wins, and two jobs never share a derived one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from millstream.config.settings import Settings
from millstream.coordinator.prepare import prepare
from millstream.model import SystemStream
from millstream.testing import read_stream
from tests.helpers import fill, seal
from tests.storage.test_stateful_jobs import final_stores, reference, run_to_end, run_until_read
from tests.storage.test_stateful_jobs import prepare as prepare_input

BASE = {"task.class": "tests.storage.jobs:CountPerKeyReportingAtEnd", "task.inputs": "log.in", "job.name": "counts"}
COUNTS = {"stores.counts.key.serde": "string", "stores.counts.msg.serde": "json", "task.commit.ms": "50"}
LOG = {"systems.log.samza.offset.default": "oldest", "systems.log.samza.key.serde": "string"}
LOG_MESSAGES = {"systems.log.samza.msg.serde": "json"}


def prepared(tmp_path: Path, **values: Any) -> Settings:
    return prepare(Settings({**BASE, **COUNTS, **LOG, **LOG_MESSAGES, "job.data.dir": str(tmp_path), **values}))


def test_a_changelog_store_without_a_name_gets_one_derived_from_job_and_store(tmp_path: Path) -> None:
    config = prepared(tmp_path, **{"stores.counts.backup.factories": "changelog"})
    assert config["stores.counts.changelog"] == "log.counts-1-counts-changelog"


def test_job_level_backup_factories_derive_a_name_per_store(tmp_path: Path) -> None:
    config = prepared(tmp_path, **{"stores.backup.factories": "changelog", "stores.totals.factory": "rocksdb"})
    assert config["stores.counts.changelog"] == "log.counts-1-counts-changelog"
    assert config["stores.totals.changelog"] == "log.counts-1-totals-changelog"


def test_an_explicit_changelog_wins_and_stores_without_the_backend_get_none(tmp_path: Path) -> None:
    config = prepared(
        tmp_path,
        **{"stores.counts.backup.factories": "changelog", "stores.counts.changelog": "log.mine"},
        **{"stores.cache.factory": "inmemory"},
    )
    assert config["stores.counts.changelog"] == "log.mine"
    assert "stores.cache.changelog" not in config


def test_characters_a_topic_cannot_hold_are_replaced(tmp_path: Path) -> None:
    config = prepared(tmp_path, **{"job.name": "page views/eu", "stores.counts.backup.factories": "changelog"})
    assert config["stores.counts.changelog"] == "log.page_views_eu-1-counts-changelog"


def test_two_jobs_derive_changelogs_of_their_own(tmp_path: Path) -> None:
    derived = {
        prepared(tmp_path, **{"job.name": name, "stores.counts.backup.factories": "changelog"})[
            "stores.counts.changelog"
        ]
        for name in ("counts", "counts-copy")
    }
    assert derived == {"log.counts-1-counts-changelog", "log.counts-copy-1-counts-changelog"}


def test_a_store_restores_from_its_derived_changelog_after_a_restart(tmp_path: Path) -> None:
    """Local state is ignored at each start, so the second run's counts can only come from the changelog."""
    local_state_ignored = {"stores.counts.clean.on.container.start": "true", "job.container.count": "2"}
    config = prepared(tmp_path, **{"stores.counts.backup.factories": "changelog"}, **local_state_ignored)
    written = prepare_input(config)
    run_until_read(config, 120)
    written |= fill(config, "in", 2, 40, start=60)
    seal(config, "in")
    run_to_end(config)
    assert final_stores(config) == reference(written) == {"k0": 100, "k1": 100}
    derived = read_stream(config, SystemStream("log", "counts-1-counts-changelog"))
    assert sum(len(records) for records in derived.values()) > 0
