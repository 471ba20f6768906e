"""``spark.readStream.format("millstream")`` over a real Kafka broker on Spark local mode: availableNow runs read
a topic exactly once across runs, and a startpoint kept in the query job's Kafka metadata store moves the next
run, once."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml
from pyspark.sql import SparkSession

from millstream.config.settings import Settings
from millstream.contracts.startpoints import StartpointSpecific
from millstream.model import SystemStream
from millstream.spark.run.session import build_session
from millstream.startpoint.tools import list_startpoints, set_startpoints
from millstream.testing import write_stream
from tests.integration.kafka.helpers import create_topic, kafka_config
from tests.spark.streaming import run_available_now

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    """Local mode with 4 slots (local[4,4]); shared with tests/spark if it exists."""
    return build_session(Settings({"job.container.retry.count": "3"}), master="local[4]")


def test_available_now_runs_read_a_topic_once_and_a_startpoint_moves_the_next_run(
    spark, bootstrap, topic_name, tmp_path: Path
):
    topic = topic_name("views")
    create_topic(bootstrap, topic, 2)
    query_job = f"audit-{uuid.uuid4().hex[:8]}"
    config = kafka_config(
        bootstrap,
        job__name=query_job,
        job__data__dir=tmp_path,
        metadata__store__factory="kafka",
        systems__kafka__samza__key__serde="string",
        systems__kafka__samza__msg__serde="json",
    )
    config_file = tmp_path / "job.yaml"
    config_file.write_text(yaml.safe_dump(dict(config.items())), encoding="utf-8")
    checkpoint = tmp_path / "query-checkpoint"

    def append(partition: int, values: range) -> None:
        write_stream(config, SystemStream("kafka", topic), [(f"u{partition}", v) for v in values], partition=partition)

    def run() -> list[tuple[int, int]]:
        return run_available_now(spark, config_file, f"kafka.{topic}", checkpoint, query_job)

    for partition in range(2):
        append(partition, range(0, 3))
    assert run() == [(p, v) for p in range(2) for v in range(0, 3)]
    for partition in range(2):
        append(partition, range(3, 5))
    assert run() == [(p, v) for p in range(2) for v in range(3, 5)]

    append(1, range(5, 6))
    set_startpoints(config, f"kafka.{topic}", StartpointSpecific("1"), partitions=[1])
    assert run() == [(1, v) for v in range(1, 6)]
    assert list_startpoints(config).pending == []
    assert run() == []
