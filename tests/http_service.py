"""A real HTTP service on loopback for the tests and benchmarks of jobs that call other services.

``EnrichService`` is an aiohttp web server on its own thread and event loop, on a free port of 127.0.0.1.
``GET /enrich?v=<int>`` answers ``{"v": v, "e": v * 10}`` after ``latency`` seconds (a fixed delay, or a
``(low, high)`` range drawn per request), fails with 500 for the values in ``failing`` (or at random with
``error_rate``), answers 404 for those in ``missing``, 429 past ``rate_limit`` requests per second, and never
answers the values in ``hanging`` (for timeouts); ``flaky=n`` fails each value's first ``n`` requests with 503
(a transient failure). ``GET /enrich_batch?v=<int>,<int>...`` answers ``{"<v>": {"v": v, "e": v * 10}, ...}``
for the values it knows (a remote table's batch read), under the same rules per value. It counts what it
served. Jobs in other processes (Spark workers, a killed container) reach it by ``url``.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class ServiceSettings:
    latency: float | tuple[float, float] = 0.0
    failing: frozenset[int] = frozenset()
    hanging: frozenset[int] = frozenset()
    error_rate: float = 0.0
    rate_limit: float | None = None
    """Requests per second served; more in one second are answered 429."""
    flaky: int = 0
    """Each value's first ``flaky`` requests are answered 503."""
    missing: frozenset[int] = frozenset()
    """Values the service does not know: answered 404 (left out of a batch's answer)."""


@dataclass
class ServiceCounts:
    served: int = 0
    failed: int = 0
    throttled: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    values: list[int] = field(default_factory=list)
    requests: Counter[int] = field(default_factory=Counter)
    """Requests per value (a batch counts once for each of its values)."""
    batches: list[int] = field(default_factory=list)
    """The size of each batch request."""


class EnrichService:
    def __init__(self, settings: ServiceSettings | None = None, seed: int = 7, port: int = 0) -> None:
        self.settings = settings or ServiceSettings()
        self.counts = ServiceCounts()
        self._random = random.Random(seed)
        self._window = (0.0, 0)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="enrich-service", daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = port
        """0: a free port, chosen at ``start``."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> EnrichService:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/enrich", self._enrich)
        app.router.add_get("/enrich_batch", self._enrich_batch)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, backlog=2048, reuse_address=True)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    def _throttled(self) -> bool:
        limit = self.settings.rate_limit
        if limit is None:
            return False
        second = int(time.monotonic())
        start, count = self._window
        if start != second:
            start, count = second, 0
        self._window = (start, count + 1)
        return count + 1 > limit

    async def _enrich_batch(self, request: web.Request) -> web.Response:
        values = [int(v) for v in request.query["v"].split(",")]
        self.counts.batches.append(len(values))
        if self._throttled():
            self.counts.throttled += 1
            return web.json_response({"error": "rate limited"}, status=429)
        if any([self._flaky(value) for value in values]):  # every value counts its request
            return web.json_response({"error": "try again"}, status=503)
        responses = await asyncio.gather(*(self._answer(value) for value in values))
        if any(status not in (200, 404) for status, _ in responses):
            return web.json_response({"error": "cannot enrich"}, status=500)
        return web.json_response({str(body["v"]): body for status, body in responses if status == 200})

    def _flaky(self, value: int) -> bool:
        self.counts.requests[value] += 1
        return self.counts.requests[value] <= self.settings.flaky

    async def _enrich(self, request: web.Request) -> web.Response:
        value = int(request.query["v"])
        if self._throttled():
            self.counts.throttled += 1
            return web.json_response({"error": "rate limited"}, status=429)
        if self._flaky(value):
            return web.json_response({"error": "try again"}, status=503)
        status, body = await self._answer(value)
        return web.json_response(body, status=status)

    async def _answer(self, value: int) -> tuple[int, dict[str, object]]:
        settings, counts = self.settings, self.counts
        counts.in_flight += 1
        counts.max_in_flight = max(counts.max_in_flight, counts.in_flight)
        try:
            if value in settings.hanging:
                await asyncio.sleep(60)
            latency = settings.latency
            delay = self._random.uniform(*latency) if isinstance(latency, tuple) else latency
            if delay > 0:
                await asyncio.sleep(delay)
            if value in settings.missing:
                return 404, {"error": f"no {value}"}
            if value in settings.failing or (settings.error_rate and self._random.random() < settings.error_rate):
                counts.failed += 1
                return 500, {"error": f"cannot enrich {value}"}
            counts.served += 1
            counts.values.append(value)
            return 200, {"v": value, "e": value * 10}
        finally:
            counts.in_flight -= 1


@contextmanager
def enrich_service(settings: ServiceSettings | None = None, port: int = 0) -> Iterator[EnrichService]:
    service = EnrichService(settings, port=port).start()
    try:
        yield service
    finally:
        service.stop()
