"""Stateful tasks the storage tests run, importable by Spark workers as ``tests.storage.jobs:<Name>``."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from millstream import (
    EndOfStreamListenerTask,
    IncomingMessageEnvelope,
    InitableTask,
    MessageCollector,
    OutgoingMessageEnvelope,
    StreamTask,
    SystemStream,
    TaskContext,
    TaskCoordinator,
)

OUTPUT = SystemStream("log", "out")
STORE = "counts"


class CountPerKey(StreamTask, InitableTask):
    """Counts messages per key in the ``counts`` store and emits each new count with the input's origin.

    ``test.delay.seconds`` slows it down so a test can act in the middle of a run.
    """

    def init(self, context: TaskContext) -> None:
        self.store = context.get_store(STORE)
        self.delay = float(context.config.get("test.delay.seconds", "0"))

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        if self.delay:
            time.sleep(self.delay)
        count = (self.store.get(envelope.key) or 0) + 1
        self.store.put(envelope.key, count)
        origin: dict[str, Any] = {"p": envelope.ssp.partition, "o": envelope.offset, "v": envelope.message}
        collector.send(OutgoingMessageEnvelope(OUTPUT, {**origin, "count": count}, key=envelope.key))


class CountPerKeyDeletingOnForget(CountPerKey):
    """Counts like ``CountPerKey``, but a message ``"forget"`` deletes its key from the store (a tombstone in
    the changelog)."""

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        if envelope.message == "forget":
            self.store.delete(envelope.key)
        else:
            super().process(envelope, collector, coordinator)


class CountPerKeyReportingAtEnd(CountPerKey, EndOfStreamListenerTask):
    """Also sends its whole store to ``log.out`` at end-of-stream: ``{"task": name, "store": {key: count}}``."""

    def init(self, context: TaskContext) -> None:
        super().init(context)
        self.task_name = str(context.task_name)

    def on_end_of_stream(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        collector.send(OutgoingMessageEnvelope(OUTPUT, {"task": self.task_name, "store": dict(self.store.all())}))


class CountPerKeyHeldOnce(CountPerKeyReportingAtEnd):
    """The first attempt to reach offset ``test.hold.offset`` stops there until ``<test.hold.dir>/release``
    exists, then goes on and requests a commit at offset ``test.hold.commit.offset``: the zombie of a test
    that starts a newer attempt of the container while it is held. Later attempts never stop (the
    ``held`` marker is taken once, atomically), so it works across processes (Spark workers) too."""

    def init(self, context: TaskContext) -> None:
        super().init(context)
        self.hold_dir = Path(context.config.get("test.hold.dir", ""))
        self.hold_at = int(context.config.get("test.hold.offset", "-1"))
        self.commit_at = int(context.config.get("test.hold.commit.offset", "-1"))
        self.zombie = False

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        offset = int(envelope.offset)
        if offset == self.hold_at and _take_once(self.hold_dir / "held"):
            self.zombie = True
            deadline = time.monotonic() + 300
            while not (self.hold_dir / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.02)  # the job under test is held, not the test
        super().process(envelope, collector, coordinator)
        if self.zombie and offset == self.commit_at:
            coordinator.commit()


def _take_once(marker: Path) -> bool:
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False
