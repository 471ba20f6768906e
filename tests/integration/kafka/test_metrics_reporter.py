"""The snapshot stream reporter on a real broker: a job reading the embedded log ships its containers'
metrics to a Kafka topic, one JSON message per container and interval, keyed by container."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from millstream.testing import InProcessRunner
from tests.helpers import create_stream, fill, job_config, seal
from tests.integration.kafka.helpers import create_topic, read_all

pytestmark = pytest.mark.integration


def test_containers_send_json_snapshots_to_a_kafka_topic(tmp_path, bootstrap: str, topic_name) -> None:
    topic = topic_name("metrics")
    create_topic(bootstrap, topic, 2)
    config = job_config(
        tmp_path,
        job__container__count=2,
        systems__kafka__samza__factory="kafka",
        systems__kafka__bootstrap__servers=bootstrap,
        metrics__reporters="snapshot",
        metrics__reporter__snapshot__stream=f"kafka.{topic}",
        metrics__snapshot__interval__ms=100,
    )
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    fill(config, "in", 2, 50)
    seal(config, "in")

    result = InProcessRunner(config).run(timeout=120)

    assert result.outcome == "finished", result.error
    last: dict[bytes, dict[str, Any]] = {}
    for message in read_all(bootstrap, topic, 2):
        last[message.key()] = orjson.loads(message.value())
    assert set(last) == {b"0", b"1"}
    assert {(d["header"]["container-name"], d["header"]["state"]) for d in last.values()} == {
        ("0", "finished"),
        ("1", "finished"),
    }
    processed = [m["value"] for d in last.values() for m in d["metrics"] if m["name"] == "processed"]
    assert len(processed) == 2 and sum(processed) == 100
