"""The snapshot stream reporter (Samza's MetricsSnapshotReporter) on the embedded log: what a container
sends every interval, and the JSON a metrics pipeline reads."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from millstream.config.settings import Settings
from millstream.contracts.metrics import Sample
from millstream.contracts.metrics_snapshot import ContainerSnapshot
from millstream.coordinator.prepare import prepare
from millstream.errors import ConfigError
from millstream.metrics.stream_reporter import SnapshotStreamReporter
from millstream.model import OutgoingMessageEnvelope, SystemStream
from millstream.testing import InProcessRunner, read_stream
from tests.helpers import create_stream, fill, job_config, seal

METRICS = SystemStream("log", "metrics")


class RecordingProducer:
    def __init__(self) -> None:
        self.sent: list[OutgoingMessageEnvelope] = []
        self.flushed = 0
        self.state = "new"

    def register(self, source: str) -> None:
        pass

    def start(self) -> None:
        self.state = "started"

    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None:
        self.sent.append(envelope)

    def flush(self, source: str) -> None:
        self.flushed += 1

    def stop(self) -> None:
        self.state = "stopped"


def test_a_snapshot_is_one_flushed_json_message_keyed_by_its_container() -> None:
    producer = RecordingProducer()
    reporter = SnapshotStreamReporter(producer, METRICS, "wordcount", "7")  # type: ignore[arg-type]
    samples = [
        Sample("processed", "counter", (("container", "2"), ("task", "Partition 1")), 12.0),
        Sample("commit", "timer", (("container", "2"), ("task", "Partition 1")), 0.5, count=4, max=0.25),
    ]
    reporter.report(ContainerSnapshot("2", 3, 1, 1_764_000_000_000, "running", samples))
    reporter.close()

    (envelope,) = producer.sent
    assert (envelope.system_stream, envelope.key, envelope.timestamp) == (METRICS, b"2", 1_764_000_000_000)
    document = orjson.loads(envelope.message)
    header = document["header"]
    assert {key: header[key] for key in ("job-name", "job-id", "container-name", "generation", "attempt")} == {
        "job-name": "wordcount",
        "job-id": "7",
        "container-name": "2",
        "generation": 3,
        "attempt": 1,
    }
    assert (header["time"], header["state"], header["version"]) == (1_764_000_000_000, "running", 1)
    assert document["metrics"] == [
        {"name": "processed", "type": "counter", "value": 12.0, "labels": {"container": "2", "task": "Partition 1"}},
        {
            "name": "commit",
            "type": "timer",
            "value": 0.5,
            "count": 4,
            "max": 0.25,
            "labels": {"container": "2", "task": "Partition 1"},
        },
    ]
    assert (producer.flushed, producer.state) == (1, "stopped")


def last_snapshots(config: Settings, stream: SystemStream) -> dict[str, Any]:
    """Each container's last snapshot read from ``stream``, whose serdes (string keys, JSON messages) read
    what the reporter sends."""
    last: dict[str, Any] = {}
    for pairs in read_stream(config, stream).values():
        for key, value in pairs:
            last[key] = value
    return last


def processed(document: dict[str, Any]) -> float:
    return sum(metric["value"] for metric in document["metrics"] if metric["name"] == "processed")


def test_each_container_sends_its_snapshots_to_the_configured_log_stream(tmp_path) -> None:
    config = job_config(
        tmp_path,
        job__container__count=2,
        metrics__reporters="snapshot",
        metrics__reporter__snapshot__stream="log.metrics",
        metrics__snapshot__interval__ms=50,
    )
    for stream, partitions in (("in", 2), ("out", 2), ("metrics", 1)):
        create_stream(config, stream, partitions)
    fill(config, "in", 2, 40)
    seal(config, "in")

    result = InProcessRunner(config).run(timeout=60)

    assert result.outcome == "finished", result.error
    last = last_snapshots(config, METRICS)
    assert set(last) == {"0", "1"}
    assert {document["header"]["state"] for document in last.values()} == {"finished"}
    assert {document["header"]["job-name"] for document in last.values()} == {"test"}
    assert sum(processed(document) for document in last.values()) == 80


def test_the_snapshot_reporter_without_a_stream_stops_the_job_before_it_starts(tmp_path) -> None:
    config = job_config(tmp_path, metrics__reporters="log,snapshot")
    with pytest.raises(ConfigError, match=r"'metrics\.reporters' includes 'snapshot': set metrics\.reporter\.snapshot"):
        prepare(config)
