"""Samza's MetricsSnapshotReporter: each container's snapshot as a JSON message on a stream, every interval.

For those who ship metrics somewhere Prometheus does not reach (a Kafka topic read by a metrics pipeline,
a log stream kept for later): with ``metrics.reporters: snapshot`` and
``metrics.reporter.snapshot.stream: kafka.metrics`` every container sends one message per
``metrics.snapshot.interval.ms``, keyed by its container id (so one container's snapshots keep their
order on one partition)::

    {"header": {"job-name": "wordcount", "job-id": "1", "container-name": "0", "generation": 3,
                "attempt": 1, "host": "worker-7", "time": 1764000000000, "state": "running", "version": 1},
     "metrics": [{"name": "processed", "type": "counter", "value": 1200.0,
                  "labels": {"container": "0", "task": "Partition 0", "system": "log", "stream": "in",
                             "partition": "0"}},
                 {"name": "commit", "type": "timer", "value": 0.42, "count": 12, "max": 0.08, "labels": {...}}]}

Names are the registry's (no ``millstream_`` prefix, no unit suffix); a timer's ``value`` is its sum of
seconds. The reporter owns its producer: it sends from the snapshot thread, never the run loop's.
"""

from __future__ import annotations

import socket
from typing import Any

import orjson

from millstream.contracts.metrics import Sample
from millstream.contracts.metrics_snapshot import ContainerSnapshot
from millstream.contracts.systems import SystemProducer
from millstream.model import OutgoingMessageEnvelope, SystemStream

FORMAT_VERSION = 1
SOURCE = "metrics-snapshot-reporter"
"""The producer source the reporter flushes: none of the container's tasks."""


class SnapshotStreamReporter:
    """Sends each snapshot to ``stream`` with ``producer`` (started here, stopped by :meth:`close`)."""

    def __init__(self, producer: SystemProducer, stream: SystemStream, job_name: str, job_id: str) -> None:
        self.producer = producer
        self.stream = stream
        self.job_name = job_name
        self.job_id = job_id
        self.host = socket.gethostname()
        producer.register(SOURCE)
        producer.start()

    def report(self, snapshot: ContainerSnapshot) -> None:
        envelope = OutgoingMessageEnvelope(
            self.stream, self.encode(snapshot), snapshot.container_id.encode(), timestamp=snapshot.written_ms
        )
        self.producer.send(SOURCE, envelope)
        self.producer.flush(SOURCE)

    def encode(self, snapshot: ContainerSnapshot) -> bytes:
        header = {
            "job-name": self.job_name,
            "job-id": self.job_id,
            "container-name": snapshot.container_id,
            "generation": snapshot.generation,
            "attempt": snapshot.attempt,
            "host": self.host,
            "time": snapshot.written_ms,
            "state": snapshot.state,
            "version": FORMAT_VERSION,
        }
        return orjson.dumps({"header": header, "metrics": [_metric(sample) for sample in snapshot.samples]})

    def close(self) -> None:
        self.producer.stop()


def _metric(sample: Sample) -> dict[str, Any]:
    metric: dict[str, Any] = {"name": sample.name, "type": sample.kind, "value": sample.value}
    if sample.kind == "timer":
        metric.update(count=sample.count, max=sample.max)
    metric["labels"] = dict(sample.labels)
    return metric
