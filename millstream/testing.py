"""Run jobs without Spark: for millstream's own fast tests and for users' unit tests of their tasks.

``InProcessRunner`` runs every container of a job in a thread of this process, with the same
coordinator, containers, checkpoints and systems as the Spark runner. ``TestRunner`` wraps it for
the common case: give a task some input, run it to the end, look at its output::

    result = (
        TestRunner(PageViewCounter)
        .add_input("page-views", [("u1", {"page": "/home"}), ("u2", {"page": "/cart"})])
        .add_output("page-view-counts")
        .run()
    )
    assert result.output("page-view-counts") == [...]
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from millstream.composition.systems import system_factory
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.config.views import parse_stream
from millstream.contracts.systems import StreamSpec
from millstream.coordinator.driver_loop import DriverLoop
from millstream.coordinator.job_result import JobResult
from millstream.coordinator.prepare import prepare
from millstream.coordinator.services import DriverServices
from millstream.coordinator.signals import graceful_stop_on_signals
from millstream.coordinator.status_document import status_document
from millstream.coordinator.thread_launcher import ThreadLauncher
from millstream.errors import MillstreamError, StreamNotFoundError
from millstream.metrics.server import metrics_endpoint
from millstream.model import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from millstream.serde.registry import SerdeRegistry

__all__ = ["EndOfStreamNotReachedError", "InProcessRunner", "TestResult", "TestRunner", "read_stream", "write_stream"]


class EndOfStreamNotReachedError(MillstreamError):
    """A ``TestRunner`` job did not end by itself within its timeout: it was stopped, and its output is only
    what was written until then. Names every partition a task still waited for end-of-stream of."""

    __test__ = False

    def __init__(self, job: JobResult, timeout: float) -> None:
        self.job = job
        waiting = "; ".join(f"task '{task}' on {', '.join(ssps)}" for task, ssps in sorted(job.waiting_for.items()))
        super().__init__(
            f"test job did not reach end-of-stream within {timeout:g} s and was {job.outcome}; its output is "
            f"incomplete. Still waiting for end-of-stream: {waiting or 'nothing reported by the containers'}. "
            "Give every input the job reads with add_input (inputs are sealed), or run(timeout=...) longer"
        )


class InProcessRunner:
    """Runs a job's containers as threads; ``run`` returns when all of them returned."""

    def __init__(self, config: Config, *, services: DriverServices | None = None) -> None:
        self.config = prepare(config)
        self._services = services
        """The driver's services of a root that holds them (a ``Job`` in a ``with`` block); else :meth:`run`
        builds its own and closes them when it returns."""
        self._stop = threading.Event()

    def run(self, timeout: float | None = None, *, handle_signals: bool = False) -> JobResult:
        """Run to completion; past ``timeout`` seconds the containers are stopped (they commit).

        The driver's loop is the Spark runner's (``coordinator/driver_loop.py``): a restart request
        (``set_startpoints(..., apply=True)``) stops the containers gracefully and starts a new generation, a
        deterministic failure fails the job with its message, and with ``handle_signals`` Ctrl-C / SIGTERM
        stop the containers gracefully too.
        """
        with (
            contextlib.nullcontext(self._services) if self._services else DriverServices(self.config) as services,
            graceful_stop_on_signals(self._stop) if handle_signals else contextlib.nullcontext(),
            metrics_endpoint(self.config, lambda: status_document(self.config, services), services.store),
        ):
            return self._run(services, timeout)

    def _run(self, services: DriverServices, timeout: float | None) -> JobResult:
        store = services.store()
        deadline = None if timeout is None else time.monotonic() + timeout
        launcher = ThreadLauncher(self.config, store, self._stop)
        return DriverLoop(self.config, store, launcher, self._stop, services).run(deadline)

    def request_stop(self) -> None:
        self._stop.set()


def write_stream(
    config: Config,
    stream: SystemStream,
    messages: Iterable[tuple[Any, Any]],
    *,
    partition: int | None = None,
) -> int:
    """Serialize and append ``(key, value)`` pairs to a stream with its configured serdes; returns the count.
    ``config`` is the job's settings or a plain ``Config`` (read as settings)."""
    settings = Settings.of(config)
    serdes = SerdeRegistry.from_config(settings)
    key_serde, msg_serde = serdes.key_serde(stream), serdes.msg_serde(stream)
    producer = system_factory(settings, stream.system).get_producer(stream.system, settings)
    producer.start()
    count = 0
    try:
        for key, value in messages:
            producer.send(
                "testing",
                OutgoingMessageEnvelope(
                    stream,
                    msg_serde.to_bytes(value) if msg_serde and value is not None else value,
                    key_serde.to_bytes(key) if key_serde and key is not None else key,
                    partition=partition,
                ),
            )
            count += 1
        producer.flush("testing")
    finally:
        producer.stop()
    return count


def read_stream(config: Config, stream: SystemStream, *, idle_timeout: float = 2.0) -> dict[int, list[tuple[Any, Any]]]:
    """Every retained ``(key, value)`` of every partition, decoded with the stream's serdes; ``config`` may be
    a plain ``Config``, as for :func:`write_stream`."""
    settings = Settings.of(config)
    serdes = SerdeRegistry.from_config(settings)
    key_serde, msg_serde = serdes.key_serde(stream), serdes.msg_serde(stream)
    out: dict[int, list[tuple[Any, Any]]] = {}
    for partition, envelopes in iter_stream(settings, stream, idle_timeout=idle_timeout):
        pairs = out.setdefault(partition, [])
        for envelope in envelopes:
            key = key_serde.from_bytes(envelope.key) if key_serde and envelope.key is not None else envelope.key
            value = envelope.message
            pairs.append((key, msg_serde.from_bytes(value) if msg_serde and value is not None else value))
    return out


def iter_stream(
    config: Config, stream: SystemStream, *, idle_timeout: float = 2.0
) -> Iterator[tuple[int, list[IncomingMessageEnvelope]]]:
    """Every retained record of every partition as it arrives, undecoded: ``(partition, envelopes)``,
    once per partition with an empty list first so a caller sees every partition.

    A partition is done at end-of-stream or once a record at or past the newest offset seen at the
    start arrived. Offsets may have gaps (Kafka's compaction and transaction markers), so the newest
    offset itself may never arrive: a partition that delivers nothing for ``idle_timeout`` seconds
    is done too, counted from when the caller took the last batch, so a slow caller misses nothing.
    """
    settings = Settings.of(config)
    factory = system_factory(settings, stream.system)
    with factory.get_admin(stream.system, settings) as admin:
        admin.start()
        metadata = admin.get_system_stream_metadata([stream.stream]).get(stream.stream)
        compare = admin.offset_comparator
    if metadata is None:
        raise StreamNotFoundError(stream.system, stream.stream)
    for partition in sorted(metadata.partitions):
        yield partition, []
    consumer = factory.get_consumer(stream.system, settings)
    newest: dict[SystemStreamPartition, str] = {}
    for partition, info in metadata.partitions.items():
        if info.oldest_offset is not None and info.newest_offset is not None:
            ssp = stream.partition(partition)
            consumer.register(ssp, info.oldest_offset)
            newest[ssp] = info.newest_offset
    consumer.start()
    try:
        pending = set(newest)
        last_data = time.monotonic()
        while pending and time.monotonic() - last_data < idle_timeout:
            for ssp, batch in consumer.poll(set(pending), 0.2).items():
                records = []
                for envelope in batch:
                    if envelope.is_end_of_stream:
                        pending.discard(ssp)
                        break
                    records.append(envelope)
                    order = compare(envelope.offset, newest[ssp])
                    if order is not None and order >= 0:
                        pending.discard(ssp)
                        break
                yield ssp.partition, records
                if batch:  # idle from here: the caller's time with the batch (decoding it, say) is not the stream's
                    last_data = time.monotonic()
    finally:
        consumer.stop()


class TestResult:
    __test__ = False  # not a pytest test class

    def __init__(self, config: Settings, job: JobResult, directory: Any = None) -> None:
        self.config = config
        self.job = job
        self._directory = directory  # the temporary data dir lives as long as the result

    def output(self, stream: str) -> list[tuple[Any, Any]]:
        """All ``(key, value)`` pairs of an output stream, partition after partition."""
        by_partition = self.output_by_partition(stream)
        return [pair for partition in sorted(by_partition) for pair in by_partition[partition]]

    def output_by_partition(self, stream: str) -> dict[int, list[tuple[Any, Any]]]:
        return read_stream(self.config, parse_stream(stream, "output"))


class TestRunner:
    """Runs a task over bounded inputs on the embedded log system, in a temporary directory.

    Unless configured otherwise, keys and values are JSON, input starts at the oldest offset, and
    streams a task writes to are created on first use.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, task_class: type | str, config: Mapping[str, Any] | None = None) -> None:
        name = task_class if isinstance(task_class, str) else f"{task_class.__module__}:{task_class.__qualname__}"
        self._values: dict[str, Any] = {"job.name": "test-job", "task.class": name, **(config or {})}
        self._inputs: list[tuple[SystemStream, int, Any]] = []
        self._outputs: list[tuple[SystemStream, int]] = []
        self._directory: tempfile.TemporaryDirectory[str] | None = None

    def add_input(
        self,
        stream: str,
        messages: Iterable[tuple[Any, Any]] | Mapping[int, Iterable[tuple[Any, Any]]],
        *,
        partitions: int | None = None,
    ) -> TestRunner:
        """``(key, value)`` pairs partitioned by key, or a mapping of partition number to pairs."""
        parsed = parse_stream(stream, "input")
        if isinstance(messages, Mapping):
            count = partitions or (max(messages) + 1 if messages else 1)
            self._inputs.append((parsed, count, {p: list(m) for p, m in messages.items()}))
        else:
            self._inputs.append((parsed, partitions or 1, list(messages)))
        return self

    def add_output(self, stream: str, *, partitions: int = 1) -> TestRunner:
        self._outputs.append((parse_stream(stream, "output"), partitions))
        return self

    def run(self, timeout: float = 60.0, *, data_dir: str | Path | None = None) -> TestResult:
        """Write and seal the inputs, run the job until every task reached end-of-stream, return its output.

        Raises ``EndOfStreamNotReachedError`` (naming the partitions still awaited) when the job did not end
        by itself within ``timeout`` seconds, rather than hand back partial output, and ``MillstreamError``
        when it failed.
        """
        if data_dir is None:
            self._directory = tempfile.TemporaryDirectory(prefix="millstream-test-")
            data_dir = self._directory.name
        values = dict(self._values)
        values.setdefault("job.data.dir", str(data_dir))
        systems = {stream.system for stream, _, _ in self._inputs} | {stream.system for stream, _ in self._outputs}
        for system in systems | {"log"}:
            values.setdefault(f"systems.{system}.samza.key.serde", "json")
            values.setdefault(f"systems.{system}.samza.msg.serde", "json")
        values.setdefault("systems.log.auto.create.streams", "true")
        inputs = [str(stream) for stream, _, _ in self._inputs]
        values.setdefault("task.inputs", ",".join(inputs))
        values.setdefault("systems.log.samza.offset.default", "oldest")
        config = prepare(Settings(values))
        with DriverServices(config) as services:  # the streams' setup and the run share the driver's admins
            for stream, partitions, messages in self._inputs:
                services.admin(stream.system).create_stream(StreamSpec(stream.system, stream.stream, partitions))
                if isinstance(messages, dict):
                    for partition, pairs in messages.items():
                        write_stream(config, stream, pairs, partition=partition)
                else:
                    write_stream(config, stream, messages)
                services.admin(stream.system).seal_stream(stream.stream)
            for stream, partitions in self._outputs:
                services.admin(stream.system).create_stream(StreamSpec(stream.system, stream.stream, partitions))
            job = InProcessRunner(config, services=services).run(timeout)
        if job.outcome == "failed":
            raise MillstreamError(f"test job failed: {job.error}")
        if job.outcome != "finished":
            raise EndOfStreamNotReachedError(job, timeout)
        return TestResult(config, job, self._directory)
