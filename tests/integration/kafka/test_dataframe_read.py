"""Formats ``millstream`` and ``millstream-checkpoints`` over a real Kafka broker on Spark local mode: records,
headers and ranges of a topic; checkpoints kept in Kafka."""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson
import pytest
import yaml
from pyspark.sql import SparkSession

from millstream.checkpoint.base import WriterFence
from millstream.checkpoint.checkpoint import CheckpointV1
from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.model import SystemStream, SystemStreamPartition, TaskName
from millstream.spark.run.session import build_session
from millstream.testing import write_stream
from tests.integration.kafka.helpers import create_topic, kafka_config, produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    """Local mode with 4 slots (local[4,4]); shared with tests/spark if it exists."""
    return build_session(Settings({"job.container.retry.count": "3"}), master="local[4]")


def test_a_kafka_topic_reads_as_rows_per_partition_with_headers_and_ranges(
    spark, bootstrap, topic_name, tmp_path: Path
):
    topic = topic_name("views")
    create_topic(bootstrap, topic, 2)
    config = kafka_config(
        bootstrap, systems__kafka__samza__key__serde="string", systems__kafka__samza__msg__serde="json"
    )
    for partition in range(2):
        write_stream(
            config, SystemStream("kafka", topic), [(f"u{partition}", {"n": i}) for i in range(4)], partition=partition
        )
    produce(bootstrap, topic, [(b"h", b'{"n": 4}')], partition=1, headers=[("trace", b"t-1")])
    config_file = tmp_path / "job.yaml"
    config_file.write_text(yaml.safe_dump(dict(config.items())), encoding="utf-8")

    def read(**options: str) -> list[tuple[int, str, str, object, dict | None]]:
        reader = spark.read.format("millstream").option("config", str(config_file)).option("stream", f"kafka.{topic}")
        for name, value in options.items():
            reader = reader.option(name, value)
        df = reader.load()
        assert df.rdd.getNumPartitions() == 2
        return sorted(
            (r.partition, r.offset, orjson.loads(r.key), orjson.loads(r.value)["n"], r.headers) for r in df.collect()
        )

    everything = read()
    expected = [(p, f"u{p}", n) for p in range(2) for n in range(4)] + [(1, "h", 4)]
    assert [(p, key, n) for p, _, key, n, _ in everything] == expected
    assert everything[-1][4] == {"trace": b"t-1"}
    offsets_of_1 = [offset for p, offset, *_ in everything if p == 1]
    ranged = read(startingOffsets=f'{{"1": "{offsets_of_1[1]}"}}', endingOffsets=f'{{"0": "{everything[2][1]}"}}')
    assert [(p, n) for p, _, _, n, _ in ranged] == [(0, 0), (0, 1), (1, 1), (1, 2), (1, 3), (1, 4)]


def test_checkpoints_kept_in_kafka_read_as_rows_per_task_partition(spark, bootstrap, tmp_path: Path):
    config = kafka_config(
        bootstrap,
        job__name=f"ckpt-{uuid.uuid4().hex[:8]}",
        task__checkpoint__factory="kafka",
        metadata__store__factory="kafka",
    )
    with metadata_store(config) as store:
        coordination.publish_generation(store, 1)
        fence = WriterFence(1, "0", coordination.start_container_attempt(store, "0"))
        manager = checkpoint_manager(config, store, fence)
        manager.start()
        manager.write_checkpoint(TaskName("Partition 0"), CheckpointV1({SystemStreamPartition("kafka", "in", 0): "41"}))
        manager.write_checkpoint(TaskName("Partition 0"), CheckpointV1({SystemStreamPartition("kafka", "in", 0): "42"}))
        manager.write_checkpoint(TaskName("Partition 1"), CheckpointV1({SystemStreamPartition("kafka", "in", 1): None}))
        manager.stop()
    config_file = tmp_path / "job.yaml"
    config_file.write_text(yaml.safe_dump(dict(config.items())), encoding="utf-8")

    df = spark.read.format("millstream-checkpoints").option("config", str(config_file)).load()

    assert sorted((r.task, r.stream, r.partition, r.version, r.offset) for r in df.collect()) == [
        ("Partition 0", "in", 0, 1, "42"),
        ("Partition 1", "in", 1, 1, None),
    ]
