"""The recovery table of SEP-4 and the validity of a store found on disk."""

from __future__ import annotations

import pytest

from millstream.adjunct.recovery import (
    OFFSETS_FILE,
    Decision,
    Found,
    RecordedOffsets,
    check_validity,
    decide,
    read_recorded_offsets,
    write_recorded_offsets,
)
from millstream.config.settings import Settings
from millstream.contracts.systems import SystemStreamPartitionMetadata
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.model import SystemStreamPartition

P0 = SystemStreamPartition("log", "rates", 0)
P1 = SystemStreamPartition("log", "rates", 1)


@pytest.mark.parametrize(
    ("persistent", "bootstrap", "found", "expected"),
    [
        (True, True, Found.ABSENT, Decision(False, "oldest")),
        (True, True, Found.INVALID, Decision(True, "oldest")),
        (True, True, Found.VALID, Decision(False, "recorded")),
        (True, False, Found.ABSENT, Decision(False, "last")),
        (True, False, Found.INVALID, Decision(True, "last")),
        (True, False, Found.VALID, Decision(False, "recorded")),
        (False, True, Found.ABSENT, Decision(True, "oldest")),
        (False, False, Found.ABSENT, Decision(True, "last")),
    ],
)
def test_the_recovery_table_of_the_proposal(persistent, bootstrap, found, expected):
    assert decide(persistent, bootstrap, found) == expected


def metadata(oldest: str | None, newest: str | None, upcoming: str) -> SystemStreamPartitionMetadata:
    return SystemStreamPartitionMetadata(oldest, newest, upcoming)


@pytest.fixture
def admins(tmp_path):
    from millstream.embedded.log.layout import LogLayout

    return {"log": LogSystemAdmin("log", LogLayout(tmp_path))}


def test_a_store_with_offsets_for_exactly_its_partitions_still_in_the_stream_and_recent_is_valid(admins):
    record = RecordedOffsets({P0: ("last", "4"), P1: ("next", "0")}, 1_000)
    found, _ = check_validity(
        record, {P0: "5", P1: "0"}, frozenset({P0, P1}),
        {P0: metadata("0", "9", "10"), P1: metadata(None, None, "0")}, admins, 60_000, now_ms=2_000,
    )  # fmt: skip
    assert found is Found.VALID


def test_a_store_whose_partitions_changed_is_invalid(admins):
    record = RecordedOffsets({P0: ("last", "4")}, 1_000)
    found, reason = check_validity(
        record, {P0: "5"}, frozenset({P0, P1}), {P0: metadata("0", "9", "10"), P1: metadata("0", "0", "1")},
        admins, -1,
    )  # fmt: skip
    assert found is Found.INVALID and "log.rates.1" in reason


def test_a_store_whose_next_offset_was_trimmed_away_is_invalid(admins):
    record = RecordedOffsets({P0: ("last", "4")}, 1_000)
    found, reason = check_validity(record, {P0: "5"}, frozenset({P0}), {P0: metadata("6", "9", "10")}, admins, -1)
    assert found is Found.INVALID and "no longer holds offset 5" in reason


def test_a_store_that_read_past_the_end_of_a_recreated_stream_is_invalid(admins):
    record = RecordedOffsets({P0: ("last", "40")}, 1_000)
    found, reason = check_validity(record, {P0: "41"}, frozenset({P0}), {P0: metadata("0", "9", "10")}, admins, -1)
    assert found is Found.INVALID and "re-created" in reason


def test_a_store_older_than_the_max_age_is_invalid_and_minus_one_means_no_limit(admins):
    record = RecordedOffsets({P0: ("last", "4")}, 1_000)
    args = (record, {P0: "5"}, frozenset({P0}), {P0: metadata("0", "9", "10")}, admins)
    assert check_validity(*args, 5_000, now_ms=10_000)[0] is Found.INVALID
    assert check_validity(*args, -1, now_ms=10_000_000)[0] is Found.VALID


def test_recorded_offsets_round_trip_and_a_torn_file_reads_as_absent(tmp_path):
    write_recorded_offsets(tmp_path, {P0: ("last", "4"), P1: ("next", "0")})
    back = read_recorded_offsets(tmp_path)
    assert back is not None and back.positions == {P0: ("last", "4"), P1: ("next", "0")}
    data = (tmp_path / OFFSETS_FILE).read_bytes()
    (tmp_path / OFFSETS_FILE).write_bytes(data[:-3])
    assert read_recorded_offsets(tmp_path) is None
    assert read_recorded_offsets(tmp_path / "missing") is None


def test_adjunct_store_misconfigurations_stop_the_job_naming_the_key(tmp_path):
    from millstream.coordinator.prepare import prepare
    from millstream.errors import ConfigError

    base = {"job.data.dir": str(tmp_path), "task.inputs": "log.in", "stores.rates.adstore.input": "log.rates"}
    with pytest.raises(ConfigError, match=r"'stores.rates.changelog'.*no changelog"):
        prepare(Settings({**base, "stores.rates.changelog": "log.rates-changelog"}))
    with pytest.raises(ConfigError, match=r"'stores.rates.adstore.key.value.extractor.factory'"):
        prepare(Settings({**base, "stores.rates.adstore.key.value.extractor.factory": "json:loads"}))
    with pytest.raises(ConfigError, match=r"unknown config key 'stores.rates.adstore.bogus'"):
        prepare(Settings({**base, "stores.rates.adstore.bogus": "1"}))
    prepare(
        Settings(
            {**base, "stores.adstore.manager.factory": "millstream.adjunct.manager:AdjunctDataStoreManagerFactory"}
        )
    )
