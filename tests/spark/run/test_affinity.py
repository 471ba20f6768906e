"""Host affinity: recorded placements become each container partition's preferred Spark location."""

from __future__ import annotations

import pytest

from millstream.contracts import coordination
from millstream.embedded.sqlite import SqliteMetadataStore
from millstream.spark.run.affinity import container_rdd, preferred_locations, rdd_preferred_locations

pytestmark = pytest.mark.spark


def test_a_placement_in_the_same_application_prefers_the_executor_and_in_another_only_the_host():
    placements = {
        "0": {"host": "10.0.0.5", "executor_id": "3", "application_id": "app-1"},
        "1": {"host": "10.0.0.6", "executor_id": "3", "application_id": "app-0"},
        "2": {"host": "", "executor_id": "1", "application_id": "app-1"},
    }
    assert preferred_locations(placements, "app-1", 4) == {0: ["executor_10.0.0.5_3"], 1: ["10.0.0.6"]}


def test_the_container_rdd_holds_container_i_in_partition_i_preferring_its_recorded_location(spark_local):
    sc = spark_local.sparkContext
    rdd = container_rdd(sc, 3, {0: ["executor_127.0.0.1_7"], 2: ["worker-b"]})
    assert rdd_preferred_locations(rdd) == [["executor_127.0.0.1_7"], [], ["worker-b"]]
    assert rdd.mapPartitionsWithIndex(lambda index, rows: [(index, list(rows))]).collect() == [
        (0, [0]),
        (1, [1]),
        (2, [2]),
    ]


def test_without_placements_the_container_rdd_is_a_plain_parallelized_range(spark_local):
    rdd = container_rdd(spark_local.sparkContext, 2, {})
    assert rdd_preferred_locations(rdd) == [[], []]
    assert rdd.glom().collect() == [[0], [1]]


def test_placements_round_trip_through_the_metadata_store_and_an_unreadable_one_is_left_out(tmp_path):
    store = SqliteMetadataStore(tmp_path / "metadata.db")
    coordination.record_container_placement(store, "0", {"host": "h", "executor_id": "1", "application_id": "a"})
    store.put(coordination.CONTAINER_PLACEMENT_NAMESPACE, "1", b"not json")
    assert coordination.container_placements(store) == {"0": {"host": "h", "executor_id": "1", "application_id": "a"}}
