"""Remote tables through the Spark runner: in Spark's workers an async lookup join (``stream.join`` with a
``RemoteTable``) joins every message once in order with batched, retried reads, and an ``AsyncStreamTask``
reads a table defined in ``tables.enrich.*`` by id, with its cache shared by the container's tasks."""

from __future__ import annotations

from typing import Any

import pytest

from millstream.spark.run.runner import SparkJobRunner
from tests.api.test_map_async import map_async_job
from tests.api.test_remote_join import APP, MISSING, check_joined
from tests.http_service import ServiceSettings, enrich_service
from tests.runtime.test_async_tasks import async_job, outputs, per_partition
from tests.table.test_task_tables import TABLE

pytestmark = pytest.mark.spark


def test_through_spark_a_remote_join_joins_every_message_once_in_order(tmp_path, spark_local):
    with enrich_service(ServiceSettings(latency=(0.0, 0.01), flaky=1, missing=MISSING)) as service:
        config, data = map_async_job(tmp_path, service, app__class=APP, job__container__count=2)
        result = SparkJobRunner(config, spark=spark_local).run()
        assert result.outcome == "finished", result.error
        assert max(service.counts.batches) > 1
    check_joined(config, data, "inner")


def test_through_spark_a_task_reads_a_remote_table_by_id_with_a_cache_per_container(tmp_path, spark_local):
    settings: dict[str, Any] = {
        **TABLE,
        "tables__enrich__cache__ttl__ms": "60000",
        "task__max__concurrency": "20",
        "job__container__count": "2",
    }
    with enrich_service(ServiceSettings(latency=0.002)) as service:
        config, written = async_job(tmp_path, service, per_partition=200, partitions=4, **settings)
        result = SparkJobRunner(config, spark=spark_local).run()
        assert result.outcome == "finished", result.error
    results = outputs(config)
    assert per_partition(results) == written
    assert all(result["e"] == result["v"] % 50 * 10 for result in results)
    assert set(service.counts.requests) == set(range(50))
    assert max(service.counts.requests.values()) <= 2, "each key read once per container (2 containers)"
