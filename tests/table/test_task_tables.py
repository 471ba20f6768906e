"""Remote tables from an ``AsyncStreamTask`` in-process (``context.get_table`` by id, defined in
``tables.enrich.*``): every message enriched once and in order while the service fails each key's first call,
reads are cached, shared and batched across the container's tasks, and measured in the container's metrics;
a call that fails for good fails the job naming the task, partition, offset, table and key, or under
``skip`` skips only its message."""

from __future__ import annotations

import re
from typing import Any

from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts.metrics_snapshot import read_snapshots
from millstream.metrics.reporters import total
from millstream.testing import InProcessRunner
from tests.http_service import ServiceSettings, enrich_service
from tests.runtime.test_async_tasks import async_job, outputs, per_partition
from tests.table.enrich_table import EnrichClient

TABLE: dict[str, Any] = {
    "task__class": "tests.jobs:TableEnrich",
    "tables__enrich__definition": "tests.table.enrich_table:from_config",
    "tables__enrich__retry__backoff__ms": "5",
}


def test_a_task_reads_a_remote_table_with_retries_a_shared_cache_and_batches_and_enriches_each_message_once(
    tmp_path,
):
    settings: dict[str, Any] = {
        **TABLE,
        "tables__enrich__cache__ttl__ms": "60000",
        "test__batched": "true",
        "task__max__concurrency": "50",
        "metrics__enabled": "true",
    }
    closed = EnrichClient.closed
    with enrich_service(ServiceSettings(latency=0.005, flaky=1)) as service:
        config, written = async_job(tmp_path, service, per_partition=300, **settings)
        config = Settings.of(config)
        result = InProcessRunner(config).run(timeout=120)
        assert result.outcome == "finished", result.error
    assert EnrichClient.closed == closed + 1, "the container closed its one instance of the table"
    results = outputs(config)
    assert per_partition(results) == written, "each message once, in offset order per partition"
    assert all(result["e"] == result["v"] % 50 * 10 for result in results)
    assert service.counts.requests == {key: 2 for key in range(50)}, "each key: one failed call, one retry"
    assert max(service.counts.batches) > 1, "reads went out in batches"
    with metadata_store(config) as store:
        (snapshot,) = read_snapshots(store).values()
    samples = snapshot.samples
    assert total(samples, "table_cache_hits") + total(samples, "table_cache_misses") == 600, "one get per message"
    assert total(samples, "table_cache_misses") >= 50
    requests, errors = total(samples, "table_requests"), total(samples, "table_errors")
    assert total(samples, "table_batches") >= 1 and total(samples, "table_retries") == errors > 0
    (call,) = [sample for sample in samples if sample.name == "table_call"]
    assert call.count == requests - errors, "a call that succeeded is timed"


def test_a_remote_call_that_fails_for_good_fails_the_job_naming_task_partition_offset_table_and_key(tmp_path):
    with enrich_service(ServiceSettings(failing=frozenset({7}))) as service:
        config, _ = async_job(tmp_path, service, per_partition=20, partitions=1, **TABLE)
        result = InProcessRunner(config).run(timeout=120)
    assert result.outcome == "failed"
    assert re.search(
        r"task 'Partition 0' failed processing offset 7 of stream 'log\.in' partition 0: RemoteTableError: "
        r"remote table 'enrich': read of key 7 failed after 1 attempt \(not retriable\): ServiceError: "
        r"GET /enrich\?v=7 answered 500",
        result.error or "",
    ), result.error


def test_under_skip_a_remote_call_that_fails_for_good_skips_its_message_and_every_other_is_enriched(tmp_path):
    with enrich_service(ServiceSettings(failing=frozenset({7}))) as service:
        config, written = async_job(
            tmp_path, service, per_partition=20, partitions=1, task__process__errors="skip", **TABLE
        )
        result = InProcessRunner(config).run(timeout=120)
        assert result.outcome == "finished", result.error
    assert per_partition(outputs(config)) == {0: [v for v in written[0] if v != 7]}


def test_the_rate_limit_is_shared_by_the_containers_tasks_so_together_they_stay_under_the_services_limit(tmp_path):
    settings: dict[str, Any] = {
        **TABLE,
        # 30/s shared stays 15 under the service's 50 in any one second, so calls bunched by a starved host (the
        # service answers on a thread of this process) still pass; two tasks at 30/s each would exceed it
        "tables__enrich__rate__limit__credits__per__second": "30",
        "tables__enrich__rate__limit__burst": "5",
        "tables__enrich__retry__max__attempts": "1",  # a 429 would fail the job
        "task__max__concurrency": "50",
        "test__keys": "1000000",  # every message its own key: a call each
    }
    with enrich_service(ServiceSettings(rate_limit=50)) as service:
        config, written = async_job(tmp_path, service, per_partition=80, partitions=2, **settings)
        result = InProcessRunner(config).run(timeout=120)
        assert result.outcome == "finished", result.error
    assert service.counts.throttled == 0 and service.counts.served == 160
    assert per_partition(outputs(config)) == written
