"""``map_async`` through the Spark runner: in Spark's workers every message is enriched from the loopback
HTTP service once, in offset order per partition, and a window downstream counts each once, as in-process."""

from __future__ import annotations

from collections import Counter

import pytest

from millstream.spark.run.runner import SparkJobRunner
from tests.api.apps import reference_counts
from tests.api.test_map_async import by_partition, map_async_job, read, written
from tests.http_service import ServiceSettings, enrich_service

pytestmark = pytest.mark.spark


def test_through_spark_map_async_enriches_every_message_once_in_order(tmp_path, spark_local):
    with enrich_service(ServiceSettings(latency=(0.0, 0.02))) as service:
        config, data = map_async_job(tmp_path, service, job__container__count=2)
        result = SparkJobRunner(config, spark=spark_local).run()
        assert result.outcome == "finished", result.error
        assert service.counts.max_in_flight > 1
    out = read(config, "out")
    assert by_partition(out) == written(data)
    assert all(m["e"] == m["n"] * 10 for m in out)
    counts: Counter[tuple[str, int]] = Counter()
    for pane in read(config, "counts"):
        counts[(pane["user"], pane["start"])] += pane["count"]
    assert dict(counts) == reference_counts(data)
