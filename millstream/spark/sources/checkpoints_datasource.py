"""Format ``millstream-checkpoints``: a job's last checkpoint of every task as a DataFrame, to audit with Spark SQL.

::

    spark.read.format("millstream-checkpoints").option("config", "job.yaml").load()

One row per task and input partition, read through the job's own checkpoint manager from its metadata
store (whichever the config names: the job's SQLite file, Kafka...), so the rows are what the job would
resume from. The data is small (a row per partition), so it is read in one Spark task, as tuples.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import IntegerType, StringType, StructField, StructType, TimestampType

from millstream.checkpoint.checkpoint import CheckpointV2
from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.core import load_config
from millstream.config.settings import Settings
from millstream.model import TaskName
from millstream.spark.sources.stream_read import StreamReadError

FORMAT = "millstream-checkpoints"

CHECKPOINT_SCHEMA = StructType(
    [
        StructField("task", StringType(), nullable=False),
        StructField("system", StringType(), nullable=False),
        StructField("stream", StringType(), nullable=False),
        StructField("partition", IntegerType(), nullable=False),
        StructField("version", IntegerType(), nullable=False),
        StructField("offset", StringType(), nullable=True),
        StructField("checkpoint_id", StringType(), nullable=True),
        StructField("time", TimestampType(), nullable=True),
    ]
)
"""``checkpoint_id`` and ``time`` (when the commit started) exist from checkpoint version 2 on; null for V1.
``offset`` is the last offset the task processed, null when the task has processed nothing there."""

CheckpointRow = tuple[str, str, str, int, int, str | None, str | None, datetime | None]


class MillstreamCheckpointsDataSource(DataSource):
    """Spark's entry point for format ``millstream-checkpoints``; its one option is ``config``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return CHECKPOINT_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        path = self.options.get("config")
        if not path:
            raise StreamReadError(f"format '{FORMAT}' needs option 'config' (the job's config file)")
        return CheckpointsReader(load_config(path).to_dict())


class CheckpointsReader(DataSourceReader):
    def __init__(self, config: dict[str, str]) -> None:
        self.config = config

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[CheckpointRow]:
        yield from checkpoint_rows(Settings(self.config))


def checkpoint_rows(config: Settings) -> list[CheckpointRow]:
    """Every task's last checkpoint, a row per input partition, ordered by task and partition."""
    with metadata_store(config) as store:
        manager = checkpoint_manager(config, store, None)
        manager.start()
        try:
            checkpoints = manager.read_all()
        finally:
            manager.stop()
    rows: list[CheckpointRow] = []
    for task in sorted(checkpoints, key=TaskName.sort_key):
        checkpoint = checkpoints[task]
        checkpoint_id = checkpoint.checkpoint_id if isinstance(checkpoint, CheckpointV2) else None
        time = None if checkpoint_id is None else datetime.fromtimestamp(checkpoint_id.millis / 1000, tz=UTC)
        for ssp, offset in sorted(checkpoint.offsets.items()):
            rows.append(
                (
                    str(task),
                    ssp.system,
                    ssp.stream,
                    ssp.partition,
                    checkpoint.version,
                    offset,
                    None if checkpoint_id is None else str(checkpoint_id),
                    time,
                )
            )
    return rows
