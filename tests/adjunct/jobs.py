"""Tasks of the adjunct store tests (importable by Spark executors)."""

from __future__ import annotations

from typing import Any

from millstream.adjunct.extractor import KeyValueExtractor, KeyValueExtractorFactory
from millstream.adjunct.manager import (
    AdjunctContext,
    AdjunctDataStoreManager,
    AdjunctDataStoreManagerFactory,
    StreamAdjunctDataStoreManager,
)
from millstream.api.application import InputDescriptor, OutputDescriptor, StreamApplication, StreamApplicationDescriptor
from millstream.api.table import AdjunctTableDescriptor
from millstream.api.task import InitableTask, StreamTask, TaskContext
from millstream.config import Config
from millstream.model import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition

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


class EnrichApp(StreamApplication):
    """High-level: ``in`` joined with the adjunct store ``rates`` on the message's currency → ``out``."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        (
            app.input(InputDescriptor("log.in", key_serde="string", msg_serde="json"))
            .join(
                AdjunctTableDescriptor("rates", "log.rates", key_serde="string", msg_serde="json", bootstrap=True),
                key=lambda message: message["currency"],
                joiner=lambda message, rate: [message["currency"], message["n"], rate],
                how="left",
            )
            .send_to(OutputDescriptor("log.out", msg_serde="json"))
        )


class CountingManager(StreamAdjunctDataStoreManager):
    """The built-in manager, remembering how many messages each batch it stored held."""

    batches: list[int] = []  # in-process containers run in this process: the test reads it

    def process_batch(self, ssp: SystemStreamPartition, envelopes: list[IncomingMessageEnvelope]) -> int:
        consumed = super().process_batch(ssp, envelopes)
        CountingManager.batches.append(consumed)
        return consumed


class CountingManagerFactory(AdjunctDataStoreManagerFactory):
    def get_adjunct_data_store_manager(self, context: AdjunctContext) -> AdjunctDataStoreManager:
        return CountingManager(context)
