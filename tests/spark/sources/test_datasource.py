"""Format ``millstream`` on Spark local mode over the embedded log: rows, ranges, raw bytes and errors.

No test registers the format: the session millstream builds (the shared one) knows it already.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
import yaml
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from millstream.config import Config
from millstream.contracts.startpoints import now_ms
from millstream.errors import MillstreamError
from millstream.model import SystemStream
from millstream.spark.sources import datasource, store_datasource
from millstream.testing import iter_stream, write_stream
from tests.helpers import create_stream, job_config, wait_until

pytestmark = pytest.mark.spark

VIEWS = SystemStream("log", "page-views")


def job_file(config: Config, tmp_path: Path) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(dict(config.items())), encoding="utf-8")
    return str(path)


@pytest.fixture
def page_views(tmp_path: Path) -> tuple[Config, str]:
    """Three partitions of 5, 3 and 0 records: keys ``u<p>``, values ``{"p": partition, "n": i}``."""
    config = job_config(tmp_path)
    create_stream(config, VIEWS.stream, 3)
    for partition, count in ((0, 5), (1, 3)):
        write_stream(
            config, VIEWS, [(f"u{partition}", {"p": partition, "n": i}) for i in range(count)], partition=partition
        )
    return config, job_file(config, tmp_path)


def load(spark: SparkSession, config_file: str, stream: str = str(VIEWS), **options: str) -> DataFrame:
    reader = spark.read.format("millstream").option("config", config_file).option("stream", stream)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_every_record_is_a_row_with_key_and_value_decoded_as_json(spark_local, page_views):
    df = load(spark_local, page_views[1])
    assert df.columns == ["partition", "offset", "timestamp", "key", "value", "headers"]
    assert df.rdd.getNumPartitions() == 3
    rows = df.collect()
    assert sorted((r.partition, r.offset, orjson.loads(r.key), orjson.loads(r.value)) for r in rows) == sorted(
        [(0, str(i), "u0", {"p": 0, "n": i}) for i in range(5)]
        + [(1, str(i), "u1", {"p": 1, "n": i}) for i in range(3)]
    )
    stored = {(p, e.offset): e.timestamp for p, envelopes in iter_stream(page_views[0], VIEWS) for e in envelopes}
    assert {(r.partition, r.offset): round(r.timestamp.timestamp() * 1000) for r in rows} == stored


def test_spark_sql_takes_the_json_value_apart(spark_local, page_views):
    df = load(spark_local, page_views[1])
    df.createOrReplaceTempView("views")
    total = spark_local.sql("SELECT sum(get_json_object(value, '$.n')) AS n FROM views WHERE partition = 0").first()
    assert total is not None and total.n == 0 + 1 + 2 + 3 + 4


def test_offsets_given_per_partition_bound_the_read_start_inclusive_end_exclusive(spark_local, page_views):
    df = load(spark_local, page_views[1], startingOffsets='{"0": "2"}', endingOffsets='{"0": "4", "1": "2"}')
    assert sorted((r.partition, r.offset) for r in df.collect()) == [(0, "2"), (0, "3"), (1, "0"), (1, "1")]


def test_starting_at_upcoming_reads_nothing(spark_local, page_views):
    assert load(spark_local, page_views[1], startingOffsets='{"0": "upcoming", "1": "upcoming"}').count() == 0


def test_spark_kafka_offsets_minus_two_and_minus_one_are_earliest_and_latest(spark_local, page_views):
    df = load(spark_local, page_views[1], startingOffsets='{"0": -1, "1": -2}', endingOffsets='{"1": -1}')
    assert sorted((r.partition, r.offset) for r in df.collect()) == [(1, "0"), (1, "1"), (1, "2")]
    assert load(spark_local, page_views[1], endingOffsets="earliest").count() == 0


def test_from_names_offsets_per_partition_like_the_startpoint_cli(spark_local, page_views):
    df = load(spark_local, page_views[1], **{"from": "offset:0=3,1=2"})
    assert sorted((r.partition, r.offset) for r in df.collect()) == [(0, "3"), (0, "4"), (1, "2")]


def test_timestamps_bound_the_read_start_inclusive_end_exclusive(spark_local, tmp_path):
    config = job_config(tmp_path)
    create_stream(config, "clicks", 1)
    clicks = SystemStream("log", "clicks")
    times: list[int] = []
    for n in range(3):
        write_stream(config, clicks, [("k", n)])
        times.append(max(e.timestamp for _, envelopes in iter_stream(config, clicks) for e in envelopes))
        wait_until(lambda: now_ms() > times[-1], 5, "the clock to move past the last record's time")
    config_file = job_file(config, tmp_path)

    def values(**options: str) -> list[int]:
        rows = load(spark_local, config_file, stream=str(clicks), **options).orderBy("offset").collect()
        return [orjson.loads(r.value) for r in rows]

    assert values(startingTimestamp=str(times[1])) == [1, 2]
    assert values(startingTimestamp=str(times[0]), endingTimestamp=str(times[2])) == [0, 1]
    assert values(**{"from": f"timestamp:{times[2]}"}) == [2]
    assert values(startingTimestamp=str(times[2] + 1)) == []


def test_max_records_per_partition_reads_a_long_partition_in_several_tasks_without_loss(spark_local, page_views):
    df = load(spark_local, page_views[1], maxRecordsPerPartition="2")
    assert df.rdd.getNumPartitions() == 3 + 2 + 1
    assert sorted((r.partition, r.offset) for r in df.collect()) == sorted(
        [(0, str(i)) for i in range(5)] + [(1, str(i)) for i in range(3)]
    )


def test_two_options_for_the_start_of_a_read_are_refused_naming_both(spark_local, page_views):
    with pytest.raises(PySparkException, match=r"\['from', 'startingOffsets'\]"):
        load(spark_local, page_views[1], startingOffsets="earliest", **{"from": "oldest"}).collect()


def test_raw_gives_the_bytes_as_stored(spark_local, page_views):
    rows = load(spark_local, page_views[1], raw="true").where("partition = 1").orderBy("offset").collect()
    assert [(bytes(r.key), orjson.loads(bytes(r.value))) for r in rows] == [(b"u1", {"p": 1, "n": i}) for i in range(3)]


def test_a_stream_that_does_not_exist_is_an_error_naming_it(spark_local, page_views):
    with pytest.raises(PySparkException, match=r"log\.no-such-stream"):
        load(spark_local, page_views[1], stream="log.no-such-stream").collect()


def test_an_offset_option_naming_a_missing_partition_is_an_error_naming_it(spark_local, page_views):
    with pytest.raises(PySparkException, match=r"startingOffsets.*\[7\].*page-views"):
        load(spark_local, page_views[1], startingOffsets='{"7": "0"}').collect()


def test_a_value_no_serde_decodes_is_an_error_naming_partition_and_offset(spark_local, tmp_path):
    config = job_config(tmp_path, systems__log__samza__msg__serde="bytes")
    create_stream(config, "blobs", 1)
    write_stream(config, SystemStream("log", "blobs"), [("k", b"\x00\x01")])
    with pytest.raises(PySparkException, match=r"log.blobs partition 0 offset 0.*raw"):
        load(spark_local, job_file(config, tmp_path), stream="log.blobs").collect()
    assert [
        row.value for row in load(spark_local, job_file(config, tmp_path), stream="log.blobs", raw="true").collect()
    ] == [b"\x00\x01"]


def test_a_read_without_config_or_stream_is_refused_naming_both_options(spark_local, page_views):
    with pytest.raises(PySparkException, match=r"'config'.*'stream'"):
        spark_local.read.format("millstream").option("stream", str(VIEWS)).load().collect()


class _SessionWithoutArrow:
    """Stands for a session: registration is refused or skipped before the session is asked anything."""


@pytest.mark.parametrize("register", [datasource.register, store_datasource.register])
def test_registering_the_formats_without_pyarrow_is_refused_in_one_line_naming_the_extra(
    register: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(
        MillstreamError, match=r"needs pyarrow, which is not installed: pip install 'millstream\[dataframes\]'"
    ):
        register(_SessionWithoutArrow())


@pytest.mark.parametrize("register", [datasource.register, store_datasource.register])
def test_the_sessions_that_run_jobs_leave_the_formats_out_without_pyarrow(
    register: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    session = _SessionWithoutArrow()
    register(session, required=False)  # would fail at session.dataSource had it tried to register
    assert session not in datasource._registered and session not in store_datasource._registered
