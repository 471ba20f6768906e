"""An adjunct store fed by a Kafka topic, through the Spark runner with checkpoints and metadata in
Kafka: bootstrap before the first main message, updates flowing in while the job runs, a versioned
store switching at end-of-version markers carried as Kafka headers, and a restart that continues the
stores from their own offsets."""

from __future__ import annotations

import time
from typing import Any

import pytest

from millstream.config.settings import Settings
from millstream.model import SystemStream
from tests.helpers import end_version
from tests.integration.kafka.helpers import TopicTail, create_topic, job_config, produce
from tests.integration.kafka.test_spark_local import RunningJob, no_sqlite_files

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


def probe(bootstrap: str, source: str, tail: TopicTail, keys: list[str], expected: dict[str, Any]) -> dict[str, Any]:
    """Send ``keys`` through the running job until the output's latest rates of them are ``expected``
    (or 90 s passed); returns those latest rates."""
    deadline = time.monotonic() + 90
    latest: dict[str, Any] = {}
    while time.monotonic() < deadline:
        produce(bootstrap, source, [(key.encode(), b"1") for key in keys])
        rates = {value["key"]: value["rate"] for value in tail.poll(0.5)}
        latest = {key: rates[key] for key in keys if key in rates}
        if latest == expected:
            break
    return latest


def enrich_job(bootstrap: str, topic_name: Any, data_dir: Any, **extra: Any) -> tuple[Settings, str, str, str]:
    """Topics ``in``, ``out`` and ``rates`` and a KafkaEnrich job over them (2 containers, store ``rates``);
    ``RATES`` in ``extra`` stands for the rates topic's name."""
    source, sink, rates = topic_name("in"), topic_name("out"), topic_name("rates")
    for topic in (source, sink, rates):
        create_topic(bootstrap, topic, PARTITIONS)
    config = job_config(
        bootstrap, data_dir, source, sink,
        task__class="tests.integration.kafka.jobs:KafkaEnrich",
        job__container__count=2,
        stores__rates__adstore__input=f"kafka.{rates}",
        stores__rates__key__serde="string",
        stores__rates__msg__serde="json",
        **{key.replace("RATES", rates): value.replace("RATES", rates) for key, value in extra.items()},
    )  # fmt: skip
    return config, source, sink, rates


def test_a_kafka_fed_adjunct_store_bootstraps_updates_and_continues_after_a_restart(
    spark,
    bootstrap,
    topic_name,
    tmp_path,
):
    config, source, sink, rates = enrich_job(
        bootstrap, topic_name, tmp_path, systems__kafka__streams__RATES__samza__bootstrap="true"
    )
    currencies = [f"c{i}" for i in range(200)]
    produce(bootstrap, rates, [(c.encode(), b"%d" % i) for i, c in enumerate(currencies)])
    produce(bootstrap, source, [(c.encode(), b"1") for c in currencies])  # same partitioner: co-partitioned
    tail = TopicTail(bootstrap, sink, PARTITIONS)
    job = RunningJob(config, spark)
    try:
        first = wait_for_rates(tail, {c: i for i, c in enumerate(currencies)})
        assert first == {c: i for i, c in enumerate(currencies)}, "bootstrap came before every main message"
        produce(bootstrap, rates, [(b"c1", b'"updated"'), (b"c2", None)])  # an update and a deletion
        latest = probe(bootstrap, source, tail, ["c1", "c2"], {"c1": "updated", "c2": None})
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
    spark,
    bootstrap,
    topic_name,
    tmp_path,
):
    config, source, sink, rates = enrich_job(
        bootstrap, topic_name, tmp_path,
        stores__rates__adstore__versioned="true",
        task__broadcast__inputs=f"kafka.RATES#[0-{PARTITIONS - 1}]",
    )  # fmt: skip
    produce(bootstrap, rates, [(b"eur", b'"v1"'), (b"gbp", b'"v1"')])
    end_version(config, SystemStream("kafka", rates), "v1")
    produce(bootstrap, rates, [(b"eur", b'"v2"')])  # v2 is being built
    tail = TopicTail(bootstrap, sink, PARTITIONS)
    job = RunningJob(config, spark)
    try:
        latest = probe(bootstrap, source, tail, ["eur", "gbp"], {"eur": "v1", "gbp": "v1"})
        assert latest == {"eur": "v1", "gbp": "v1"}, "v1 serves while v2 is partial"
        end_version(config, SystemStream("kafka", rates), "v2")
        latest = probe(bootstrap, source, tail, ["eur", "gbp"], {"eur": "v2", "gbp": None})
        assert latest == {"eur": "v2", "gbp": None}, "v2 replaced v1 whole"
    finally:
        result = job.stop()
    assert result.outcome == "stopped", result.error
    tail.close()
