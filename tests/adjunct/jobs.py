"""Tasks of the adjunct store tests (importable by Spark executors)."""

from __future__ import annotations

from typing import Any

from millstream.adjunct.extractor import KeyValueExtractor, KeyValueExtractorFactory
from millstream.api.task import InitableTask, StreamTask, TaskContext
from millstream.config import Config
from millstream.model import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream

OUT = SystemStream("log", "out")


class Enrich(StreamTask, InitableTask):
    """Looks every input key up in the adjunct store ``rates`` and emits ``[key, value, rate]``."""

    store_name = "rates"

    def init(self, context: TaskContext) -> None:
        self.rates = context.get_store(self.store_name)

    def process(self, envelope: IncomingMessageEnvelope, collector: Any, coordinator: Any) -> None:
        rate = self.rates.get(envelope.key)
        collector.send(OutgoingMessageEnvelope(OUT, [envelope.key, envelope.message, rate], envelope.key))


class TryToWrite(Enrich):
    """Tries to write the adjunct store: the read-only view must refuse."""

    def process(self, envelope: IncomingMessageEnvelope, collector: Any, coordinator: Any) -> None:
        try:
            self.rates.put(envelope.key, "mine")
            outcome = "written"
        except Exception as error:  # the test checks the message
            outcome = str(error)
        collector.send(OutgoingMessageEnvelope(OUT, [envelope.key, outcome], envelope.key))


class CurrencyOnly(KeyValueExtractor):
    """Projects a record ``{"currency": ..., "rate": ..., ...}`` to ``currency -> rate``."""

    def get_key(self, envelope: IncomingMessageEnvelope) -> Any:
        record = envelope.message
        return None if record is None else record.get("currency")

    def get_value(self, envelope: IncomingMessageEnvelope) -> Any:
        record = envelope.message
        return None if record is None or record.get("deleted") else record["rate"]


class CurrencyOnlyFactory(KeyValueExtractorFactory):
    def get_key_value_extractor(self, config: Config) -> KeyValueExtractor:
        return CurrencyOnly()
