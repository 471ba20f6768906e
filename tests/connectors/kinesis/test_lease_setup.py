"""Lease set-up before the first lease is taken: initial positions at the job's first start, startpoints once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from millstream.connectors.kinesis.errors import KinesisSystemError
from millstream.connectors.kinesis.lease_setup import LeaseSetup
from millstream.connectors.kinesis.leases import LeaseTable
from millstream.connectors.kinesis.offsets import PositionType, ShardPosition, StartpointMarker
from millstream.connectors.kinesis.shards import Shard, ShardLineage
from millstream.embedded.sqlite import SqliteMetadataStore

from .conftest import STREAM, SYSTEM

CLOSED = Shard("shardId-0", None, None, 0, 9, "100", ending_sequence_number="199")
OPEN = Shard("shardId-1", "shardId-0", None, 0, 9, "200")
LINEAGE = ShardLineage([CLOSED, OPEN])


@pytest.fixture
def table(tmp_path: Path) -> Iterator[LeaseTable]:
    store = SqliteMetadataStore(tmp_path / "metadata.db")
    store.init()
    yield LeaseTable(store, "app", SYSTEM, STREAM)
    store.close()


def positions(table: LeaseTable) -> dict[str, tuple[PositionType, int]]:
    leases, _ = table.scan()
    return {shard_id: (item.lease.position.type, item.lease.token) for shard_id, item in leases.items()}


def test_the_first_start_gives_every_shard_a_lease_and_latest_counts_closed_shards_as_finished(
    table: LeaseTable,
) -> None:
    LeaseSetup(SYSTEM, "app", "worker-1").prepare(table, LINEAGE, ShardPosition.latest(), [])
    assert positions(table) == {"shardId-0": (PositionType.SHARD_END, 0), "shardId-1": (PositionType.LATEST, 0)}


def test_a_later_start_keeps_the_leases_the_first_one_set_up(table: LeaseTable) -> None:
    LeaseSetup(SYSTEM, "app", "worker-1").prepare(table, LINEAGE, ShardPosition.trim_horizon(), [])
    LeaseSetup(SYSTEM, "app", "worker-2").prepare(table, LINEAGE, ShardPosition.latest(), [])
    assert positions(table) == {
        "shardId-0": (PositionType.TRIM_HORIZON, 0),
        "shardId-1": (PositionType.TRIM_HORIZON, 0),
    }


def test_a_startpoint_resets_every_shard_once_and_moves_the_lease_tokens(table: LeaseTable) -> None:
    oldest = StartpointMarker("oldest", created_ms=1)
    LeaseSetup(SYSTEM, "app", "worker-1").prepare(table, LINEAGE, ShardPosition.latest(), [oldest])
    LeaseSetup(SYSTEM, "app", "worker-2").prepare(table, LINEAGE, ShardPosition.latest(), [oldest])
    assert positions(table) == {
        "shardId-0": (PositionType.TRIM_HORIZON, 1),
        "shardId-1": (PositionType.TRIM_HORIZON, 1),
    }


def test_startpoints_apply_oldest_first_whatever_order_they_were_registered_in(table: LeaseTable) -> None:
    specific = StartpointMarker("specific", created_ms=2, positions={"shardId-1": "250"})
    oldest = StartpointMarker("oldest", created_ms=1)
    LeaseSetup(SYSTEM, "app", "worker-1").prepare(table, LINEAGE, ShardPosition.latest(), [specific, oldest])
    assert positions(table) == {
        "shardId-0": (PositionType.TRIM_HORIZON, 1),
        "shardId-1": (PositionType.AT_SEQUENCE_NUMBER, 2),
    }


def test_a_specific_startpoint_naming_an_unlisted_shard_is_refused_before_any_lease_changes(
    table: LeaseTable,
) -> None:
    setup = LeaseSetup(SYSTEM, "app", "worker-1")
    setup.initialize(table, LINEAGE, ShardPosition.trim_horizon())
    marker = StartpointMarker("specific", created_ms=1, positions={"shardId-1": "250", "shardId-9": "1"})
    with pytest.raises(KinesisSystemError, match="shardId-9"):
        setup.apply_startpoint(table, LINEAGE, marker)
    assert positions(table)["shardId-1"] == (PositionType.TRIM_HORIZON, 0)
