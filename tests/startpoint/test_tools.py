import pytest

from millstream.config import Config
from millstream.contracts.startpoints import StartpointOldest, StartpointTimestamp
from millstream.errors import StreamNotFoundError
from millstream.startpoint.errors import StartpointError
from millstream.startpoint.tools import delete_startpoints, list_startpoints, parse_timestamp, set_startpoints
from tests.helpers import create_stream, job_config


@pytest.fixture
def config(tmp_path):
    config = job_config(tmp_path)
    create_stream(config, "in", 4)
    return config


def test_timestamps_parse_from_epoch_ms_and_iso_8601():
    assert parse_timestamp("1700000000000") == 1_700_000_000_000
    assert parse_timestamp("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert parse_timestamp("2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    assert parse_timestamp("2023-11-14T22:13:20") == 1_700_000_000_000  # no offset: UTC


def test_unparsable_timestamp_is_refused():
    with pytest.raises(StartpointError, match="not a timestamp"):
        parse_timestamp("yesterday")


def test_set_on_all_partitions_writes_one_startpoint_per_partition(config):
    ssps = set_startpoints(config, "log.in", StartpointOldest())
    assert [ssp.partition for ssp in ssps] == [0, 1, 2, 3]
    assert len(list_startpoints(config).pending) == 4


def test_unknown_stream_is_refused_and_nothing_is_written(config):
    with pytest.raises(StreamNotFoundError, match=r"log\.nope"):
        set_startpoints(config, "log.nope", StartpointOldest())
    assert list_startpoints(config).pending == []


def test_partition_out_of_range_is_refused_and_nothing_is_written(config):
    with pytest.raises(StartpointError, match=r"partition 7 of 'log\.in' does not exist"):
        set_startpoints(config, "log.in", StartpointTimestamp(1), partitions=[1, 7])
    assert list_startpoints(config).pending == []


def test_delete_removes_only_the_chosen_stream_partitions(config):
    set_startpoints(config, "log.in", StartpointOldest())
    assert delete_startpoints(config, "log.in", partitions=[0, 1]) == 2
    assert sorted(e.ssp.partition for e in list_startpoints(config).pending) == [2, 3]


def test_the_config_only_functions_take_a_plain_config_as_users_loaded_it_not_only_settings(config):
    plain = Config(config.to_dict(), config.source)  # what load_config gives: no parsed views
    assert len(set_startpoints(plain, "log.in", StartpointOldest(), partitions=[2])) == 1
    assert [entry.ssp.partition for entry in list_startpoints(plain).pending] == [2]
    assert delete_startpoints(plain, "log.in") == 1
