"""The exposition: names, suffixes and labels as Prometheus expects them."""

from __future__ import annotations

from millstream.contracts.metrics import Registry
from millstream.contracts.metrics_snapshot import ContainerSnapshot
from millstream.metrics.prometheus import exposition
from tests.metrics.scrape import parse


def _snapshot(container: str) -> ContainerSnapshot:
    registry = Registry({"container": container})
    labels = {"task": f"Partition {container}", "system": "log", "stream": "in", "partition": container}
    registry.counter("processed", **labels).inc(10)
    registry.gauge("lag", **labels).set(2)
    registry.timer("commit", task=labels["task"]).update(0.5)
    registry.gauge("container_attempt").set(1)
    registry.counter("user_enriched", task=labels["task"]).inc(3)
    return ContainerSnapshot(container, 1, 1, 0, "running", registry.snapshot())


def test_counters_timers_and_gauges_get_prefix_suffixes_and_the_job_label() -> None:
    text = exposition([_snapshot("0"), _snapshot("1")], "pageviews").decode()
    series = parse(text)

    labels = {"job": "pageviews", "container": "1", "task": "Partition 1", "system": "log", "stream": "in"}
    assert series[("millstream_processed_total", frozenset({**labels, "partition": "1"}.items()))] == 10
    assert series[("millstream_lag", frozenset({**labels, "partition": "1"}.items()))] == 2
    commit = frozenset({"job": "pageviews", "container": "0", "task": "Partition 0"}.items())
    assert series[("millstream_commit_seconds_count", commit)] == 1
    assert series[("millstream_commit_seconds_sum", commit)] == 0.5
    assert series[("millstream_commit_seconds_max", commit)] == 0.5
    assert series[("millstream_user_enriched_total", commit)] == 3
    assert series[("millstream_container_attempt", frozenset({"job": "pageviews", "container": "0"}.items()))] == 1
    assert "# TYPE millstream_processed_total counter" in text
    assert "# TYPE millstream_commit_seconds summary" in text


def test_series_of_one_family_with_different_labels_share_the_union() -> None:
    first = Registry({"container": "0"})
    first.gauge("user_depth", queue="a").set(1)
    second = Registry({"container": "1"})
    second.gauge("user_depth").set(2)
    snapshots = [ContainerSnapshot(c, 1, 1, 0, "running", r.snapshot()) for c, r in (("0", first), ("1", second))]

    series = parse(exposition(snapshots, "j").decode())

    assert series[("millstream_user_depth", frozenset({"job": "j", "container": "1", "queue": ""}.items()))] == 2
