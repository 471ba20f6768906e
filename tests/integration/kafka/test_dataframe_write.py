"""Writing a DataFrame to a Kafka topic with format ``millstream`` on Spark local mode, real broker: every
row once, keyed as millstream's own Kafka producer partitions (murmur2, as Java clients)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import yaml
from pyspark.sql.types import StringType, StructField, StructType

from millstream.model import SystemStream
from millstream.testing import read_stream, write_stream
from tests.integration.kafka.helpers import create_topic, kafka_config

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_rows_land_once_each_in_the_partition_the_system_s_producer_gives_the_key(
    spark_local, bootstrap, topic_name, tmp_path: Path
):
    by_spark, by_producer = topic_name("by-spark"), topic_name("by-producer")
    for topic in (by_spark, by_producer):
        create_topic(bootstrap, topic, 3)
    config = kafka_config(
        bootstrap, systems__kafka__samza__key__serde="string", systems__kafka__samza__msg__serde="json"
    )
    config_file = tmp_path / "job.yaml"
    config_file.write_text(yaml.safe_dump(dict(config.items())), encoding="utf-8")
    pairs = [(f"user-{i % 11}", {"n": i}) for i in range(300)]
    schema = StructType([StructField("key", StringType()), StructField("value", StringType())])
    df = spark_local.createDataFrame([(orjson.dumps(k).decode(), orjson.dumps(v).decode()) for k, v in pairs], schema)
    df.repartition(4).write.format("millstream").mode("append").option("config", str(config_file)).option(
        "stream", f"kafka.{by_spark}"
    ).save()
    write_stream(config, SystemStream("kafka", by_producer), pairs)
    landed = read_stream(config, SystemStream("kafka", by_spark))
    assert sorted(v["n"] for records in landed.values() for _, v in records) == list(range(300))
    expected = read_stream(config, SystemStream("kafka", by_producer))
    assert {p: {k for k, _ in r} for p, r in landed.items()} == {p: {k for k, _ in r} for p, r in expected.items()}
