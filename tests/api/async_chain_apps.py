"""Applications with async operators after other operators (``operators/async_chain.py``), for the in-process,
Spark and kill tests of ``tests/api/test_async_chains.py`` and ``tests/spark/test_async_chains.py``. Each
reads ``log.in`` (``tests.api.apps.messages``) and calls the loopback HTTP service at ``test.service.url``;
``test.ordered=false`` makes the async operators unordered."""

from __future__ import annotations

from typing import Any

from millstream.api.application import OutputDescriptor, StreamApplication, StreamApplicationDescriptor
from millstream.api.task import TaskContext
from tests.api.apps import HttpEnrich, source


class ManyConnections(HttpEnrich):
    """``HttpEnrich`` without aiohttp's 100 connections per session, so hundreds of calls are in flight."""

    async def init(self, context: TaskContext) -> None:
        import aiohttp

        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))


def kept(n: int) -> bool:
    """What ``ChainEnriched``'s filter keeps: a third of the messages go."""
    return n % 3 != 0


def chain_result(n: int) -> dict[str, Any]:
    """What ``ChainEnriched`` writes for the message ``n`` it keeps."""
    return {"n": n, "half": n // 2, "e": n * 10, "sum": n * 10 + n // 2}


class ChainEnriched(StreamApplication):
    """``in`` → filter → map → ``map_async`` (the HTTP service) → map → ``out``: ``chain_result(n)`` for every
    message ``kept(n)``."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        config = app.config
        ordered = config.get("test.ordered", "true") == "true"
        (
            source(app)
            .filter(lambda m: kept(m["n"]))
            .map(lambda m: {"n": m["n"], "half": m["n"] // 2})
            .map_async(ManyConnections(str(config.get("test.service.url"))), concurrency=50, ordered=ordered)
            .map(lambda m: {**m, "sum": m["e"] + m["half"]})
            .send_to(OutputDescriptor("log.out", msg_serde="json"))
        )


class ChainJoined(StreamApplication):
    """``in`` → map → join with the remote table ``enrich`` on ``n`` (inner: the service's ``missing`` values
    go) → ``out``: ``{"n", "user", "e"}``."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        from tests.table.enrich_table import enrich_table

        config = app.config
        table = enrich_table(str(config.get("test.service.url")), batched=True, backoff_ms=5)
        (
            source(app)
            .map(lambda m: {"n": m["n"], "user": m["user"]})
            .join(
                table,
                key=lambda m: m["n"],
                joiner=lambda m, record: {**m, "e": record["e"]},
                concurrency=50,
                ordered=config.get("test.ordered", "true") == "true",
            )
            .send_to(OutputDescriptor("log.out", msg_serde="json"))
        )


class TwoAwaitsAfterAMerge(StreamApplication):
    """``in`` split in two branches (even ``n`` as is, odd ``n`` marked) merged again → ``map_async`` → map →
    ``flat_map_async`` (each twice, enriched again) → ``out``, and the unenriched odd branch to ``side`` as
    well: two awaits per message in a chain, after a merge, with a delivery outside the chain beside them."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        config = app.config
        url = str(config.get("test.service.url"))
        ordered = config.get("test.ordered", "true") == "true"
        second = HttpEnrich(url)

        async def twice(message: dict[str, Any]) -> list[dict[str, Any]]:
            enriched = await second({"n": message["n"]})
            return [{**message, "e2": enriched["e"], "copy": copy} for copy in (0, 1)]

        twice.init = second.init  # type: ignore[attr-defined]
        twice.close = second.close  # type: ignore[attr-defined]
        stream = source(app)
        odd = stream.filter(lambda m: m["n"] % 2 == 1).map(lambda m: {**m, "odd": True})
        odd.send_to(OutputDescriptor("log.side", msg_serde="json"))
        (
            stream.filter(lambda m: m["n"] % 2 == 0)
            .merge(odd)
            .map_async(HttpEnrich(url), concurrency=50, ordered=ordered)
            .map(lambda m: {"n": m["n"], "e": m["e"], "odd": m.get("odd", False)})
            .flat_map_async(twice, concurrency=50, ordered=ordered)
            .send_to(OutputDescriptor("log.out", msg_serde="json"))
        )


class RepartitionedEnriched(StreamApplication):
    """``in`` → partition_by(user) → map (the value) → ``map_async`` (the HTTP service) → ``out``: an await
    after an intermediate stream, whose messages start from the stream's input as a source's do."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        (
            source(app)
            .partition_by(lambda m: m["user"], name="by-user")
            .map(lambda kv: kv.value)
            .map_async(HttpEnrich(str(app.config.get("test.service.url"))), concurrency=20)
            .send_to(OutputDescriptor("log.out", msg_serde="json"))
        )
