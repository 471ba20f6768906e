"""Async operators after other operators through the Spark runner: in Spark's workers ``filter → map →
map_async → map`` and a remote-table join after a ``map`` give exactly a synchronous graph's output, in
offset order per partition when ordered and the same messages when not, as in-process."""

from __future__ import annotations

import pytest

from millstream.spark.run.runner import SparkJobRunner
from tests.api.test_async_chains import CHAIN, JOINED, MISSING, expected_chain, in_partitions, unordered
from tests.api.test_map_async import map_async_job, read
from tests.http_service import ServiceSettings, enrich_service

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("ordered", [True, False])
def test_through_spark_filter_map_map_async_map_gives_a_synchronous_graphs_output(tmp_path, spark_local, ordered):
    with enrich_service(ServiceSettings(latency=(0.0, 0.02))) as service:
        config, data = map_async_job(
            tmp_path, service, app__class=CHAIN, test__ordered=str(ordered).lower(), job__container__count=2
        )
        result = SparkJobRunner(config, spark=spark_local).run()
        assert result.outcome == "finished", result.error
        assert service.counts.max_in_flight > 1
    out, expected = in_partitions(read(config, "out")), expected_chain(data)
    assert out == expected if ordered else unordered(out) == unordered(expected)


def test_through_spark_a_remote_join_after_a_map_joins_every_message_once_in_order(tmp_path, spark_local):
    with enrich_service(ServiceSettings(latency=(0.0, 0.01), flaky=1, missing=MISSING)) as service:
        config, data = map_async_job(tmp_path, service, app__class=JOINED, job__container__count=2)
        result = SparkJobRunner(config, spark=spark_local).run()
        assert result.outcome == "finished", result.error
    expected = {
        p: [{"n": m["n"], "user": m["user"], "e": m["n"] * 10} for _, m in pairs if m["n"] not in MISSING]
        for p, pairs in data.items()
    }
    assert in_partitions(read(config, "out")) == expected
