"""An adjunct store fed by a Kafka topic, through the Spark runner with checkpoints and metadata in
Kafka: bootstrap before the first main message, updates flowing in while the job runs, a versioned
store switching at end-of-version markers carried as Kafka headers, and a restart that continues the
stores from their own offsets."""

from __future__ import annotations

import time
from typing import Any

import pytest

from millstream.adjunct.markers import write_end_of_version
from millstream.model import SystemStream
from tests.integration.kafka.helpers import TopicTail, create_topic, job_config, produce
from tests.integration.kafka.test_spark_local import RunningJob, no_sqlite_files, spark  # noqa: F401 - fixture

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PARTITIONS = 4


def wait_for_rates(tail: TopicTail, expected: dict[str, Any], timeout: float = 120) -> dict[str, Any]:
    """The last rate the output shows per key, once every key of ``expected`` shows its value."""
    deadline = time.monotonic() + timeout
    latest: dict[str, Any] = {}
    while time.monotonic() < deadline:
        latest = {value["key"]: value["rate"] for value in tail.poll()}
        if all(key in latest and latest[key] == rate for key, rate in expected.items()):
            return latest
    raise AssertionError(f"output never showed {expected}; last seen {dict(sorted(latest.items())[:10])}")


def test_a_kafka_fed_adjunct_store_bootstraps_updates_and_continues_after_a_restart(
    spark,  # noqa: F811 - the module fixture
    bootstrap,
    topic_name,
    tmp_path,
):
    source, sink, rates = topic_name("in"), topic_name("out"), topic_name("rates")
    for topic in (source, sink, rates):
        create_topic(bootstrap, topic, PARTITIONS)
    config = job_config(
        bootstrap, tmp_path, source, sink,
        task__class="tests.integration.kafka.jobs:KafkaEnrich",
        job__container__count=2,
        stores__rates__adstore__input=f"kafka.{rates}",
        stores__rates__key__serde="string",
        stores__rates__msg__serde="json",
        **{f"systems__kafka__streams__{rates}__samza__bootstrap": "true"},
    )  # fmt: skip
    currencies = [f"c{i}" for i in range(200)]
    produce(bootstrap, rates, [(c.encode(), b"%d" % i) for i, c in enumerate(currencies)])
    produce(bootstrap, source, [(c.encode(), b"1") for c in currencies])  # same partitioner: co-partitioned
    tail = TopicTail(bootstrap, sink, PARTITIONS)
    job = RunningJob(config, spark)
    try:
        first = wait_for_rates(tail, {c: i for i, c in enumerate(currencies)})
        assert first == {c: i for i, c in enumerate(currencies)}, "bootstrap came before every main message"
        produce(bootstrap, rates, [(b"c1", b'"updated"'), (b"c2", None)])  # an update and a deletion
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            produce(bootstrap, source, [(b"c1", b"2"), (b"c2", b"2")])
            latest = {value["key"]: value["rate"] for value in tail.poll(0.5)}
            if latest.get("c1") == "updated" and latest.get("c2") is None:
                break
        assert latest["c1"] == "updated" and latest["c2"] is None
    finally:
        result = job.stop()
    assert result.outcome == "stopped", result.error
    assert sum(c.adjunct_stored for c in result.containers) == 202

    produce(bootstrap, rates, [(b"c3", b'"after restart"')])
    job = RunningJob(config, spark)
    try:
        produce(bootstrap, source, [(b"c3", b"3"), (b"c4", b"3")])
        wait_for_rates(tail, {"c3": "after restart", "c4": 4})
    finally:
        second = job.stop()
    assert second.outcome == "stopped", second.error
    assert sum(c.adjunct_stored for c in second.containers) == 1, "valid stores continue from their own offsets"
    no_sqlite_files(tmp_path)
    tail.close()


def test_a_versioned_kafka_fed_store_switches_at_end_of_version_markers(
    spark,  # noqa: F811 - the module fixture
    bootstrap,
    topic_name,
    tmp_path,
):
    source, sink, rates = topic_name("in"), topic_name("out"), topic_name("rates")
    for topic in (source, sink, rates):
        create_topic(bootstrap, topic, PARTITIONS)
    config = job_config(
        bootstrap, tmp_path, source, sink,
        task__class="tests.integration.kafka.jobs:KafkaEnrich",
        job__container__count=2,
        stores__rates__adstore__input=f"kafka.{rates}",
        stores__rates__adstore__versioned="true",
        stores__rates__key__serde="string",
        stores__rates__msg__serde="json",
        task__broadcast__inputs=f"kafka.{rates}#[0-{PARTITIONS - 1}]",
    )  # fmt: skip
    produce(bootstrap, rates, [(b"eur", b'"v1"'), (b"gbp", b'"v1"')])
    write_end_of_version(config, SystemStream("kafka", rates), "v1")
    produce(bootstrap, rates, [(b"eur", b'"v2"')])  # v2 is being built
    tail = TopicTail(bootstrap, sink, PARTITIONS)
    job = RunningJob(config, spark)
    try:
        deadline = time.monotonic() + 90
        latest: dict[str, Any] = {}
        while time.monotonic() < deadline and latest != {"eur": "v1", "gbp": "v1"}:
            produce(bootstrap, source, [(b"eur", b"1"), (b"gbp", b"1")])
            latest = {value["key"]: value["rate"] for value in tail.poll(0.5)}
        assert latest == {"eur": "v1", "gbp": "v1"}, "v1 serves while v2 is partial"
        write_end_of_version(config, SystemStream("kafka", rates), "v2")
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and latest != {"eur": "v2", "gbp": None}:
            produce(bootstrap, source, [(b"eur", b"1"), (b"gbp", b"1")])
            latest = {value["key"]: value["rate"] for value in tail.poll(0.5)}
        assert latest == {"eur": "v2", "gbp": None}, "v2 replaced v1 whole"
    finally:
        result = job.stop()
    assert result.outcome == "stopped", result.error
    tail.close()
