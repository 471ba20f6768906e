"""Enrich each click with the user's profile and the product's catalog entry, both from adjunct stores.

``profiles`` follows a change-data-capture stream of the profiles table (``{"op": "c" | "u" | "d",
"after": row}``, keyed by user id): the extractor turns an insert or update into the row and a delete
into ``None``, which deletes the key. ``catalog`` is a versioned store built in bulk from a dataset with
Spark (``millstream adstore build``); the job switches to a new version in one step, so a click never
sees half of one catalog and half of another. The task only reads: the stores belong to their inputs.
"""

from __future__ import annotations

from typing import Any

from millstream import (
    Config,
    IncomingMessageEnvelope,
    InitableTask,
    KeyValueExtractor,
    KeyValueExtractorFactory,
    MessageCollector,
    OutgoingMessageEnvelope,
    StreamTask,
    SystemStream,
    TaskContext,
    TaskCoordinator,
)

OUTPUT = SystemStream("log", "enriched-clicks")


class ProfileChangeExtractor(KeyValueExtractor):
    def get_key(self, envelope: IncomingMessageEnvelope) -> Any:
        return envelope.key

    def get_value(self, envelope: IncomingMessageEnvelope) -> Any:
        change = envelope.message
        return None if change["op"] == "d" else change["after"]


class ProfileChangeExtractorFactory(KeyValueExtractorFactory):
    def get_key_value_extractor(self, config: Config) -> KeyValueExtractor:
        return ProfileChangeExtractor()


class EnrichClicks(StreamTask, InitableTask):
    def init(self, context: TaskContext) -> None:
        self.profiles = context.get_store("profiles")
        self.catalog = context.get_store("catalog")

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        click = envelope.message
        profile = self.profiles.get(click["user"]) or {"name": None, "tier": "unknown"}
        product = self.catalog.get(click["product"]) or {"title": None, "price": None}
        enriched = {**click, "tier": profile["tier"], "title": product["title"], "price": product["price"]}
        collector.send(OutgoingMessageEnvelope(OUTPUT, enriched, key=click["user"]))
