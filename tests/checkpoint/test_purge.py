"""Purging what a task checkpointed: only the partitions that ask, only forward, and never fatally."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from millstream.checkpoint.purge import CommittedMessagePurger
from millstream.config.settings import Settings
from millstream.contracts.systems import StreamSpec, SystemAdmin
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.factory import LogSystemFactory
from millstream.model import OutgoingMessageEnvelope, SystemStream, SystemStreamPartition

PURGED, KEPT = SystemStreamPartition("log", "by-user", 0), SystemStreamPartition("log", "input", 0)


@pytest.fixture
def config(tmp_path: Path) -> Settings:
    return Settings(
        {
            "systems.log.path": str(tmp_path / "log"),
            "systems.log.streams.by-user.samza.delete.committed.messages": "true",
        }
    )


@pytest.fixture
def admin(config: Settings) -> Iterator[LogSystemAdmin]:
    factory = LogSystemFactory()
    admin = factory.get_admin("log", config)
    producer = factory.get_producer("log", config)
    for stream in ("by-user", "input"):
        admin.create_stream(StreamSpec("log", stream, 1))
        for value in range(10):
            producer.send("test", OutgoingMessageEnvelope(SystemStream("log", stream), b"%d" % value, partition=0))
    producer.flush("test")
    producer.stop()
    with admin:
        yield admin


def oldest(admin: SystemAdmin, ssp: SystemStreamPartition) -> str | None:
    return admin.get_ssp_metadata([ssp])[ssp].oldest_offset


def test_a_checkpoint_deletes_the_records_up_to_and_including_its_offset_only_where_asked(config, admin):
    purger = CommittedMessagePurger.of("task 0", {PURGED, KEPT}, config, {"log": admin})
    assert purger is not None
    purger.after_checkpoint({PURGED: "4", KEPT: "4"})
    assert (oldest(admin, PURGED), oldest(admin, KEPT)) == ("5", "0")
    purger.after_checkpoint({PURGED: "6", KEPT: "6"})
    assert oldest(admin, PURGED) == "7"


def test_a_task_with_nothing_to_purge_gets_no_purger(config, admin):
    assert CommittedMessagePurger.of("task 0", {KEPT}, config, {"log": admin}) is None


class Unsupported(LogSystemAdmin):
    def delete_messages(self, before: Mapping[SystemStreamPartition, str]) -> bool:
        self.asked = getattr(self, "asked", 0) + 1
        return False


class Failing(LogSystemAdmin):
    def delete_messages(self, before: Mapping[SystemStreamPartition, str]) -> bool:
        raise OSError("disk gone")


def test_a_system_that_cannot_delete_is_reported_once_and_not_asked_again(config, admin, caplog):
    unsupported = Unsupported("log", admin.layout)
    purger = CommittedMessagePurger("task 0", {PURGED}, config, {"log": unsupported})
    with caplog.at_level(logging.WARNING):
        purger.after_checkpoint({PURGED: "4"})
        purger.after_checkpoint({PURGED: "5"})
    assert unsupported.asked == 1
    assert ["system 'log' cannot delete records" in r.getMessage() for r in caplog.records] == [True]


def test_a_failed_purge_is_logged_and_does_not_fail_the_commit(config, admin, caplog):
    purger = CommittedMessagePurger("task 0", {PURGED}, config, {"log": Failing("log", admin.layout)})
    with caplog.at_level(logging.WARNING):
        purger.after_checkpoint({PURGED: "4"})
    assert "could not delete checkpointed records of ['log.by-user.0']" in caplog.text
    assert "OSError: disk gone" in caplog.text
    assert purger.purged == {}
