"""The job's metrics in Prometheus text format, built from the containers' latest snapshots at scrape time.

Names get the ``millstream_`` prefix; counters are exposed with ``_total``, timers as summaries in
``_seconds`` (``_count``, ``_sum``, plus ``_seconds_max``). Every series carries ``job`` and the labels
its container gave it (``container``, ``task``, ``system``, ``stream``, ``partition``); a family whose
series disagree on label names gets the union, empty where a series has none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from millstream.contracts.metrics import Sample
from millstream.contracts.metrics_snapshot import ContainerSnapshot

PREFIX = "millstream_"
CONTENT_TYPE = CONTENT_TYPE_LATEST

HELP = {
    "processed": "Messages processed, per input partition",
    "bytes_read": "Bytes of the messages processed, per input partition",
    "lag": "Messages not processed yet: upcoming offset minus the next offset to process",
    "process": "Time spent processing batches, per task",
    "commit": "Commit duration from its start to its checkpoint (asynchronous upload included), per task",
    "commits": "Commits written, per task",
    "commits_skipped": "Commits skipped because the previous one was still uploading",
    "commits_blocked": "Commits that blocked processing until the previous one finished uploading",
    "commits_timed_out": "Blocked commits that gave up waiting (task.commit.skip.commit.*)",
    "commit_failures_skipped": "Failed commits tolerated (task.commit.skip.commit.*)",
    "dead_lettered": "Undecodable messages skipped (task.drop.deserialization.errors), per container",
    "process_errors_skipped": "Messages and window calls whose exception task.process.errors skipped or dead-lettered",
    "polls": "Polls of the container's consumers (processed / polls is the mean poll size)",
    "batches": "Batches handed to tasks, one per polled partition with messages (processed / batches: mean batch)",
    "store_restore": "Time the container's stores took to restore at start",
    "commit_phase": "Commit phases, per task: flush, snapshot (stores), upload, checkpoint (write), cleanup",
    "input_end_of_stream": "1 once the input partition reached end-of-stream (or drained), else 0",
    "store_restored_records": "Records a store's restore applied so far (changelog replay), per task and store",
    "store_restore_expected_records": "Records a changelog replay reads at most (its offset range)",
    "store_restored_bulk_records": "Records of a changelog replay its system handed over in bulk (not by polling)",
    "store_restored_vector_memtable_records": "Records of a changelog replay into an empty store via a vector memtable",
    "store_restored_bytes": "Bytes a store's restore replayed or downloaded so far, per task and store",
    "store_restore_expected_bytes": "Bytes a blob-store restore downloads (the snapshot's files)",
    "store_restore_rate_bytes_per_second": "A store restore's average rate since it started",
    "store_restore_duration": "How long each store's restore took, per task and store",
    "input_watermark_timestamp_seconds": "Watermark of each input partition (high-level jobs), seconds since the epoch",
    "operator_watermark_timestamp_seconds": "Input watermark of each operator (high-level jobs), seconds since epoch",
    "kinesis_lag_seconds": "How far a Kinesis shard's reader trails the shard's tip (MillisBehindLatest)",
    "kinesis_shard_leases": "Kinesis shard leases the container holds, per stream",
    "kinesis_throttled_calls": "Kinesis calls throttled (ProvisionedThroughputExceeded ...), per operation",
    "adjunct_bootstrapping": "1 while the container bootstraps its adjunct stores, else 0",
    "adjunct_bootstrap_remaining_messages": "Messages a bootstrap partition still has to read to catch up",
    "adjunct_bootstrap_duration_seconds": "How long the adjunct stores' bootstrap took",
    "adjunct_stored_messages": "Messages stored into the container's adjunct stores",
    "adjunct_serving_version": "1 for the version an adjunct store serves, 0 for the one it replaced",
    "table_requests": "Calls a remote table made to its service (retries included), per table",
    "table_cache_hits": "Reads a remote table's cache answered, per table",
    "table_cache_misses": "Reads a remote table's cache did not answer, per table",
    "table_retries": "Calls of a remote table retried after a retriable failure, per table",
    "table_errors": "Calls of a remote table that failed (retried or not), per table",
    "table_batches": "Batch reads (read_all) of a remote table, per table",
    "table_throttled_seconds": "Time calls of a remote table waited for its rate limiter, per table",
    "table_call": "Duration of each call of a remote table to its service (a batch is one call), per table",
    "container_attempt": "The container's attempt (epoch): grows with every restart of the container",
    "container_generation": "The job model generation the container runs",
}


class SnapshotCollector(Collector):
    """A Prometheus collector over whatever ``snapshots`` returns when scraped."""

    def __init__(self, snapshots: Callable[[], Sequence[ContainerSnapshot]], job: str) -> None:
        self.snapshots = snapshots
        self.job = job

    def collect(self) -> Iterator[Metric]:
        by_name: dict[str, list[Sample]] = {}
        for snapshot in self.snapshots():
            for sample in snapshot.samples:
                by_name.setdefault(sample.name, []).append(sample)
        for name in sorted(by_name):
            yield from self._families(name, by_name[name])

    def _families(self, name: str, samples: list[Sample]) -> Iterator[Metric]:
        kind = samples[0].kind
        samples = [sample for sample in samples if sample.kind == kind]
        names = ["job", *sorted({label for sample in samples for label, _ in sample.labels} - {"job"})]
        documentation = HELP.get(name) or (f"User metric {name[5:]}" if name.startswith("user_") else name)
        family: Metric
        if kind == "timer":
            family = SummaryMetricFamily(f"{PREFIX}{name}_seconds", documentation, labels=names)
            longest = GaugeMetricFamily(f"{PREFIX}{name}_seconds_max", f"{documentation} (longest)", labels=names)
            for sample in samples:
                values = self._values(names, sample)
                family.add_metric(values, count_value=sample.count, sum_value=sample.value)
                longest.add_metric(values, sample.max)
            yield family
            yield longest
            return
        if kind == "counter":
            family = CounterMetricFamily(f"{PREFIX}{name}", documentation, labels=names)
        else:
            family = GaugeMetricFamily(f"{PREFIX}{name}", documentation, labels=names)
        for sample in samples:
            family.add_metric(self._values(names, sample), sample.value)
        yield family

    def _values(self, names: list[str], sample: Sample) -> list[str]:
        labels = dict(sample.labels)
        labels["job"] = self.job
        return [labels.get(label, "") for label in names]


def exposition(snapshots: Sequence[ContainerSnapshot], job: str) -> bytes:
    """The Prometheus text of ``snapshots``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snapshots, job))
    return generate_latest(registry)
