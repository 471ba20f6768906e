"""Tasks the tests run, importable by Spark workers as ``tests.jobs:<Name>``."""

from __future__ import annotations

import gc
import logging
import os
import signal
import time
from typing import Any

from millstream import (
    AsyncStreamTask,
    BatchStreamTask,
    ClosableTask,
    DrainListenerTask,
    EndOfStreamListenerTask,
    IncomingMessageEnvelope,
    InitableTask,
    MessageCollector,
    OutgoingMessageEnvelope,
    StreamTask,
    SystemStream,
    TaskContext,
    TaskCoordinator,
    WindowableTask,
)

OUTPUT = SystemStream("log", "out")


def _origin(envelope: IncomingMessageEnvelope) -> dict[str, Any]:
    return {"p": envelope.ssp.partition, "o": envelope.offset, "v": envelope.message}


class PassThrough(StreamTask):
    """Copies every message to ``log.out`` with where it came from."""

    def process(self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator):
        collector.send(OutgoingMessageEnvelope(OUTPUT, _origin(envelope), key=envelope.key))


class ReportsFrozenHeap(StreamTask):
    """``PassThrough`` whose output also carries how many objects the garbage collector held frozen meanwhile."""

    def process(self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator):
        value = {**_origin(envelope), "frozen": gc.get_freeze_count()}
        collector.send(OutgoingMessageEnvelope(OUTPUT, value, key=envelope.key))


class BatchPassThrough(BatchStreamTask, InitableTask):
    """``PassThrough`` a batch at a time, sent with ``send_batch`` (JSON messages, string keys); raises on a
    batch holding a value in ``test.fail.values`` (comma-separated), and asks for a commit after each batch
    when ``test.commit.each`` is true."""

    def init(self, context: TaskContext) -> None:
        listed = context.config.get("test.fail.values", "")
        self.failing = {int(value) for value in listed.split(",") if value}
        self.commit_each = context.config.get("test.commit.each", "false") == "true"

    def process_batch(self, envelopes, collector, coordinator):
        bad = [envelope.message for envelope in envelopes if envelope.message in self.failing]
        if bad:
            raise ValueError(f"cannot handle {bad[0]}")
        collector.send_batch(OUTPUT, [_origin(envelope) for envelope in envelopes], [e.key for e in envelopes])
        if self.commit_each:
            coordinator.commit()


class SlowPassThrough(PassThrough, InitableTask):
    """Pass-through at a bounded rate (``test.delay.seconds``), so a test can act in the middle of a run."""

    def init(self, context: TaskContext) -> None:
        self.delay = float(context.config.get("test.delay.seconds", "0.002"))

    def process(self, envelope, collector, coordinator):
        time.sleep(self.delay)
        super().process(envelope, collector, coordinator)


class CountingTask(StreamTask, InitableTask, WindowableTask, EndOfStreamListenerTask):
    """Counts messages per task; reports windows and end-of-stream to ``log.out``, with the milliseconds from its
    init to its end of stream (``ran_ms``), which bound the windows it can have had."""

    def init(self, context: TaskContext) -> None:
        self.started = time.monotonic()
        self.task_name = str(context.task_name)
        self.count = 0
        self.windows = 0
        self.delay = float(context.config.get("test.delay.seconds", "0"))

    def process(self, envelope, collector, coordinator):
        if self.delay:
            time.sleep(self.delay)
        self.count += 1

    def window(self, collector, coordinator):
        self.windows += 1

    def on_end_of_stream(self, collector, coordinator):
        collector.send(
            OutgoingMessageEnvelope(
                OUTPUT,
                {
                    "task": self.task_name,
                    "count": self.count,
                    "windows": self.windows,
                    "ran_ms": (time.monotonic() - self.started) * 1000,
                },
            )
        )


class DrainReportingTask(CountingTask, DrainListenerTask):
    """Counts messages per task; reports the count to ``log.out`` when the job drains it (``on_drain``)."""

    def on_drain(self, collector, coordinator):
        collector.send(OutgoingMessageEnvelope(OUTPUT, {"task": self.task_name, "drained": self.count}))


class ShutdownAfterThree(StreamTask):
    """Asks for a shutdown at its third message."""

    def __init__(self) -> None:
        self.seen = 0

    def process(self, envelope, collector, coordinator):
        self.seen += 1
        collector.send(OutgoingMessageEnvelope(OUTPUT, _origin(envelope), key=envelope.key))
        if self.seen == 3:
            coordinator.shutdown()


class FailsOnPoison(PassThrough):
    """Raises on the message ``"poison"``: the container fails."""

    def process(self, envelope, collector, coordinator):
        if envelope.message == "poison":
            raise ValueError(f"poison message at offset {envelope.offset}")
        super().process(envelope, collector, coordinator)


class CrashesOnPoison(PassThrough):
    """Its Python worker dies of SIGSEGV on the message ``"segfault"``: a crash in a native library."""

    def process(self, envelope, collector, coordinator):
        if envelope.message == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        super().process(envelope, collector, coordinator)


class CommitsEachMessageFailsOnPoison(FailsOnPoison):
    """Requests a commit after every message (``coordinator.commit()``), and raises on ``"poison"``."""

    def process(self, envelope, collector, coordinator):
        super().process(envelope, collector, coordinator)
        coordinator.commit()


class FailingOnSome(PassThrough, InitableTask, WindowableTask):
    """Pass-through that raises ``ValueError`` on the values in ``test.fail.values`` (comma-separated), and in
    ``window()`` when ``test.fail.window`` is true: a user bug on some messages."""

    def init(self, context: TaskContext) -> None:
        listed = context.config.get("test.fail.values", "")
        self.failing = {int(value) for value in listed.split(",") if value}
        self.fail_window = context.config.get("test.fail.window", "false") == "true"
        self.delay = float(context.config.get("test.delay.seconds", "0"))

    def process(self, envelope, collector, coordinator):
        if self.delay:
            time.sleep(self.delay)
        if envelope.message in self.failing:
            raise ValueError(f"cannot handle {envelope.message}")
        super().process(envelope, collector, coordinator)

    def window(self, collector, coordinator):
        if self.fail_window:
            raise RuntimeError("window broke")


class MeteredPassThrough(PassThrough, InitableTask):
    """Pass-through that counts what it sent in a user metric (``millstream_user_enriched_total``) and
    records the value it saw last in a user gauge."""

    def init(self, context: TaskContext) -> None:
        self.enriched = context.metrics.counter("enriched")
        self.last_value = context.metrics.gauge("last_value")

    def process(self, envelope, collector, coordinator):
        super().process(envelope, collector, coordinator)
        self.enriched.inc()
        if isinstance(envelope.message, int):
            self.last_value.set(envelope.message)


class LoggingPassThrough(PassThrough):
    """Pass-through that logs the first message of each partition at INFO: a line a task logs itself."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def process(self, envelope, collector, coordinator):
        super().process(envelope, collector, coordinator)
        if envelope.ssp.partition not in self.seen:
            self.seen.add(envelope.ssp.partition)
            logging.getLogger("tests.jobs").info("first message of partition %d", envelope.ssp.partition)


class FailsQuotingSecrets(LoggingPassThrough, SlowPassThrough):
    """A slow, logging pass-through that raises on the message ``"quote-secrets"`` with every value of
    ``test.quoted.keys`` in its message, as a client library refusing credentials may: what the container
    reports must still not show them."""

    def init(self, context: TaskContext) -> None:
        super().init(context)
        self.quoted = [context.config[key] for key in context.config.get_list("test.quoted.keys")]

    def process(self, envelope, collector, coordinator):
        if envelope.message == "quote-secrets":
            raise PermissionError(f"login refused with {' and '.join(self.quoted)}")
        super().process(envelope, collector, coordinator)


class AsyncEnrich(AsyncStreamTask, InitableTask, ClosableTask):
    """Enriches every message from the loopback HTTP service at ``test.service.url`` (``tests/http_service.py``)
    with an aiohttp session opened by its async ``init``, and sends ``{"p", "o", "v", "e"}`` to ``log.out``.
    A non-2xx answer raises naming the call (``EnrichCallError``)."""

    async def init(self, context: TaskContext) -> None:  # type: ignore[override]
        import aiohttp

        self.url = f"{context.config.get('test.service.url')}/enrich"
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def process_async(self, envelope, collector, coordinator):
        async with self.session.get(self.url, params={"v": str(envelope.message)}) as response:
            if response.status != 200:
                raise EnrichCallError(f"GET {self.url}?v={envelope.message} answered {response.status}")
            body = await response.json()
        collector.send(OutgoingMessageEnvelope(OUTPUT, {**_origin(envelope), "e": body["e"]}, key=envelope.key))

    async def close(self) -> None:  # type: ignore[override]
        await self.session.close()


class EnrichCallError(Exception):
    """The enrichment service answered an error."""


class TableEnrich(AsyncStreamTask, InitableTask):
    """Reads the remote table ``enrich`` (``tables.enrich.*``, ``tests/table/enrich_table.py``) for the key
    ``value % test.keys`` (default 50) of every message and sends ``{"p", "o", "v", "e"}`` to ``log.out``."""

    def init(self, context: TaskContext) -> None:
        self.table = context.get_table("enrich")
        self.keys = int(context.config.get("test.keys", "50"))

    async def process_async(self, envelope, collector, coordinator):
        record = await self.table.get(envelope.message % self.keys)
        assert record is not None, f"the service knows {envelope.message % self.keys}"
        collector.send(OutgoingMessageEnvelope(OUTPUT, {**_origin(envelope), "e": record["e"]}, key=envelope.key))
