"""``AsyncStreamTask`` through the Spark runner: in Spark's workers, every message is enriched from the
loopback HTTP service once and in partition order with calls in flight together, and a call past
``task.callback.timeout.ms`` fails the job naming the task, partition and offset, as in-process."""

from __future__ import annotations

import re

import pytest

from millstream.spark.run.runner import SparkJobRunner
from tests.http_service import ServiceSettings, enrich_service
from tests.runtime.test_async_tasks import (
    IN_FLIGHT_AT_THE_FAILURE,
    async_job,
    checkpointed,
    failing_with_ten_in_flight,
    outputs,
    per_partition,
)

pytestmark = pytest.mark.spark


def test_through_spark_an_async_task_enriches_every_message_once_in_order_and_a_timeout_is_named(tmp_path, spark_local):
    with enrich_service(ServiceSettings(latency=(0.0, 0.02))) as service:
        config, written = async_job(
            tmp_path / "enrich", service, per_partition=500, task__max__concurrency="40", job__container__count=2
        )
        result = SparkJobRunner(config, spark=spark_local).run()
        assert result.outcome == "finished", result.error
        assert service.counts.max_in_flight > 2, "calls were in flight together"
        results = outputs(config)
        assert per_partition(results) == written
        assert all(r["e"] == r["v"] * 10 for r in results)
        assert checkpointed(config) == {0: "499", 1: "499"}

        service.settings.hanging = frozenset({100_003})
        config, _ = async_job(
            tmp_path / "timeout",
            service,
            per_partition=10,
            task__callback__timeout__ms="500",
            job__container__retry__count=0,
        )
        failed = SparkJobRunner(config, spark=spark_local).run()
    assert failed.outcome == "failed"
    assert re.search(
        r"task 'Partition 1' failed processing offset 3 of stream 'log\.in' partition 1: CallbackTimeoutError",
        failed.error or "",
    ), failed.error


def test_through_spark_a_container_that_fails_with_messages_in_flight_cancels_them_in_its_worker(tmp_path, spark_local):
    markers = tmp_path / "markers"
    markers.mkdir()
    config = failing_with_ten_in_flight(tmp_path / "job", job__container__retry__count=0, test__marker__dir=markers)
    failed = SparkJobRunner(config, spark=spark_local).run()
    assert failed.outcome == "failed" and "offset 3 fails" in (failed.error or ""), failed.error
    cancelled = sorted((path.name.removeprefix("cancelled-") for path in markers.iterdir()), key=int)
    assert cancelled == IN_FLIGHT_AT_THE_FAILURE
