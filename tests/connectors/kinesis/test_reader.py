"""The shard reader against a scripted client: what it enqueues, how it retries, and how it reports back."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from millstream.config.settings import Settings
from millstream.connectors.kinesis.config import KinesisSystemConfig
from millstream.connectors.kinesis.errors import KinesisReadError
from millstream.connectors.kinesis.reader import ShardReader
from millstream.connectors.kinesis.slots import OwnedShard
from millstream.connectors.kinesis.throttling import KinesisMetrics

from .conftest import SYSTEM, owned, records

FAST = {
    f"systems.{SYSTEM}.consumer.idle.ms": "1",
    f"systems.{SYSTEM}.consumer.backoff.initial.ms": "1",
    f"systems.{SYSTEM}.consumer.backoff.max.ms": "2",
    f"systems.{SYSTEM}.consumer.shard.getrecords.per.second": "1000",
}


class ScriptedClient:
    """GetRecords answers from a script: a response dict, or an error code to raise."""

    def __init__(self, script: list[dict[str, Any] | str]) -> None:
        self.script = list(script)
        self.iterators: list[dict[str, Any]] = []

    def get_shard_iterator(self, **arguments: Any) -> dict[str, Any]:
        self.iterators.append(arguments)
        return {"ShardIterator": f"it-{len(self.iterators)}"}

    def get_records(self, **arguments: Any) -> dict[str, Any]:
        step = self.script.pop(0)
        if isinstance(step, str):
            raise ClientError({"Error": {"Code": step, "Message": step}}, "GetRecords")
        return step


class Sink:
    """Collects what the reader enqueues; refuses once ``open`` is False."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.open = True

    def wait_for_space(self, shard: OwnedShard) -> bool:
        return self.open

    def enqueue(self, shard: OwnedShard, batch: list[dict[str, Any]]) -> bool:
        if not self.open:
            return False
        self.batches.append([r["SequenceNumber"] for r in batch])
        shard.last_enqueued = batch[-1]["SequenceNumber"]
        return True


def run(script: list[dict[str, Any] | str], sink: Sink | None = None) -> tuple[list[Any], Sink, ScriptedClient]:
    """Run a reader to its end in this thread; returns the reports it made, the sink and the client."""
    sink = sink or Sink()
    client = ScriptedClient(script)
    reports: list[Any] = []
    reader = ShardReader(
        SYSTEM,
        owned("shardId-0"),
        settings=Settings(FAST).view(KinesisSystemConfig, SYSTEM),
        client=client,
        metrics=KinesisMetrics(),
        sink=sink,
        on_finished=lambda shard, ended: reports.append(("finished", ended)),
        on_failed=lambda shard, error: reports.append(("failed", error)),
    )
    reader.run()
    return reports, sink, client


def page(*sequences: int, last: bool = False) -> dict[str, Any]:
    response: dict[str, Any] = {"Records": records(*sequences)}
    if not last:
        response["NextShardIterator"] = "next"
    return response


def test_a_reader_enqueues_every_page_and_reports_the_shard_ended_when_no_iterator_follows() -> None:
    reports, sink, client = run([page(1, 2), page(), page(3, last=True)])
    assert sink.batches == [["1", "2"], ["3"]]
    assert reports == [("finished", True)]
    assert client.iterators[0]["ShardIteratorType"] == "TRIM_HORIZON"


def test_a_throttled_read_is_retried_without_losing_or_repeating_records() -> None:
    reports, sink, _ = run([page(1), "ProvisionedThroughputExceededException", page(2, last=True)])
    assert sink.batches == [["1"], ["2"]]
    assert reports == [("finished", True)]


def test_an_expired_iterator_resumes_after_the_last_enqueued_record() -> None:
    reports, sink, client = run([page(1, 2), "ExpiredIteratorException", page(3, last=True)])
    assert sink.batches == [["1", "2"], ["3"]]
    assert client.iterators[-1]["ShardIteratorType"] == "AFTER_SEQUENCE_NUMBER"
    assert client.iterators[-1]["StartingSequenceNumber"] == "2"
    assert reports == [("finished", True)]


def test_a_reader_whose_sink_refuses_stops_and_reports_the_shard_not_ended() -> None:
    sink = Sink()
    sink.open = False
    reports, _, _ = run([page(1)], sink)
    assert reports == [("finished", False)]


def test_a_refused_read_is_reported_as_a_failure_naming_the_shard() -> None:
    reports, _, _ = run([page(1), "AccessDeniedException"])
    ((kind, error),) = reports
    assert kind == "failed"
    assert isinstance(error, KinesisReadError)
    assert "AccessDeniedException" in str(error) and "shardId-0" in str(error)
