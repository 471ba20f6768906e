"""Tasks the Kafka tests (and the embedded log's exactly-once tests) run, importable by workers as
``tests.integration.kafka.jobs:<Name>``."""

from __future__ import annotations

import time

from millstream import (
    IncomingMessageEnvelope,
    InitableTask,
    MessageCollector,
    OutgoingMessageEnvelope,
    StreamTask,
    SystemStream,
    TaskContext,
    TaskCoordinator,
)


class KafkaPassThrough(StreamTask, InitableTask):
    """Copies every message to ``kafka.<test.output>`` with where it came from, at most one message per
    ``test.delay.seconds`` (so a test can act in the middle of a run)."""

    def init(self, context: TaskContext) -> None:
        self.output = SystemStream("kafka", context.config["test.output"])
        self.delay = float(context.config.get("test.delay.seconds", "0"))

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        if self.delay:
            time.sleep(self.delay)
        origin = {"p": envelope.ssp.partition, "o": envelope.offset, "v": envelope.message}
        collector.send(OutgoingMessageEnvelope(self.output, origin, key=envelope.key))


class KafkaEnrich(StreamTask, InitableTask):
    """Looks every message's key up in the adjunct store ``rates`` and writes ``{"p", "v", "key",
    "rate"}`` to ``kafka.<test.output>``."""

    def init(self, context: TaskContext) -> None:
        self.output = SystemStream("kafka", context.config["test.output"])
        self.rates = context.get_store("rates")

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        value = {"p": envelope.ssp.partition, "v": envelope.message, "key": envelope.key}
        value["rate"] = self.rates.get(envelope.key)
        collector.send(OutgoingMessageEnvelope(self.output, value, key=envelope.key))


class KafkaCopy(StreamTask, InitableTask):
    """Copies every message, decoded by the input's serde, to ``kafka.<test.output>`` to be encoded by the
    output's serde."""

    def init(self, context: TaskContext) -> None:
        self.output = SystemStream("kafka", context.config["test.output"])

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        collector.send(OutgoingMessageEnvelope(self.output, envelope.message, key=envelope.key))


class KafkaFailingOnSome(KafkaPassThrough):
    """The pass-through raising ``ValueError`` on the values in ``test.fail.values`` (comma-separated)."""

    def init(self, context: TaskContext) -> None:
        super().init(context)
        self.failing = {int(value) for value in context.config.get("test.fail.values", "").split(",") if value}

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        if envelope.message in self.failing:
            raise ValueError(f"cannot handle {envelope.message}")
        super().process(envelope, collector, coordinator)


class KafkaCountPerKey(StreamTask, InitableTask):
    """Counts messages per key in the store ``counts`` and sends ``{"p", "v", "key", "count"}`` to
    ``<test.output.system>.<test.output>`` (system ``kafka`` unless set), at most one message per
    ``test.delay.seconds``: state a restart must restore exactly. The embedded log's exactly-once tests run it too."""

    def init(self, context: TaskContext) -> None:
        self.store = context.get_store("counts")
        self.output = SystemStream(context.config.get("test.output.system", "kafka"), context.config["test.output"])
        self.delay = float(context.config.get("test.delay.seconds", "0"))

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        if self.delay:
            time.sleep(self.delay)
        count = (self.store.get(envelope.key) or 0) + 1
        self.store.put(envelope.key, count)
        record = {"p": envelope.ssp.partition, "v": envelope.message, "key": envelope.key, "count": count}
        collector.send(OutgoingMessageEnvelope(self.output, record, key=envelope.key))
