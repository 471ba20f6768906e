"""Writing a DataFrame to a Kinesis stream with format ``millstream`` on Spark local mode, kinesalite:
every row once, in the shard its partition key hashes to, and read back as a DataFrame."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import yaml
from pyspark.sql.types import StringType, StructField, StructType

from millstream.connectors.kinesis.shards import ShardLineage
from tests.integration.kinesis.helpers import create_stream, kinesis_config, started_admin

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_rows_land_once_each_in_the_shard_their_key_hashes_to(
    spark_local, kinesis_endpoint, stream_name, tmp_path: Path
):
    stream = stream_name("orders")
    create_stream(kinesis_endpoint, stream, 2)
    config = kinesis_config(
        kinesis_endpoint,
        tmp_path,
        systems__kinesis__samza__key__serde="string",
        systems__kinesis__samza__msg__serde="json",
    )
    config_file = tmp_path / "job.yaml"
    config_file.write_text(yaml.safe_dump(dict(config.items())), encoding="utf-8")
    schema = StructType([StructField("key", StringType()), StructField("value", StringType())])
    rows = [(orjson.dumps(f"order-{i % 7}").decode(), orjson.dumps({"n": i}).decode()) for i in range(60)]
    options = {"config": str(config_file), "stream": f"kinesis.{stream}"}
    spark_local.createDataFrame(rows, schema).repartition(3).write.format("millstream").options(**options).mode(
        "append"
    ).save()
    back = spark_local.read.format("millstream").options(**options).load().collect()
    assert sorted(orjson.loads(r.value)["n"] for r in back) == list(range(60))
    lineage = ShardLineage(started_admin(config).list_shards(stream))
    for row in back:
        shard = lineage.shard_for_key(orjson.loads(row.key))
        assert shard is not None and bytes(row.headers["kinesis.shard.id"]).decode() == shard.shard_id
