"""Tasks and an extractor the adjunct store benchmark runs (importable by Spark workers as
``benchmarks.adjunct_tasks:<Name>``).

``LATENCIES_NS`` collects per-lookup times: in-process containers are threads of the benchmark's own
process, so the benchmark reads the list after the run (closed config namespaces leave no key to pass
a file name through). ``list.append`` is atomic under the GIL, so tasks of several containers may share it.
"""

from __future__ import annotations

from time import perf_counter_ns
from typing import Any

from millstream import InitableTask, StreamTask
from millstream.adjunct.extractor import KeyValueExtractor, KeyValueExtractorFactory
from millstream.config import Config
from millstream.model import IncomingMessageEnvelope

STORE = "adj"
LATENCIES_NS: list[int] = []


class TimedLookup(StreamTask, InitableTask):
    """One ``get`` of the message's key in the adjunct store ``adj`` per message, timed."""

    def init(self, context: Any) -> None:
        self.store = context.get_store(STORE)
        self.samples = LATENCIES_NS

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        started = perf_counter_ns()
        self.store.get(envelope.key)
        self.samples.append(perf_counter_ns() - started)


class TimedNothing(TimedLookup):
    """``TimedLookup``'s loop without the lookup: the rate it is compared with."""

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        started = perf_counter_ns()
        self.samples.append(perf_counter_ns() - started)


class CurrencyAndRate(KeyValueExtractor):
    """Keeps the envelope's key and projects a JSON record to ``{"currency": ..., "rate": ...}``."""

    def get_key(self, envelope: IncomingMessageEnvelope) -> Any:
        return envelope.key

    def get_value(self, envelope: IncomingMessageEnvelope) -> Any:
        record = envelope.message
        return None if record is None else {"currency": record["currency"], "rate": record["rate"]}


class CurrencyAndRateFactory(KeyValueExtractorFactory):
    def get_key_value_extractor(self, config: Config) -> KeyValueExtractor:
        return CurrencyAndRate()
