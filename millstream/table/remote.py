"""``RemoteTableInstance``: a ``RemoteTable`` at run time, on the container's event loop.

Each read goes, in order, through the cache (a hit costs no call), the reads already in flight (a key asked
for twice at once is fetched once), the batcher (with a ``read_all`` function, the keys asked for in the same
turn of the loop, or within ``batch.linger.ms``, go out as one call of up to ``batch.max.size`` keys; puts
likewise with ``write_all``), the
rate limiter (the call waits for its credits: one per key) and the retry policy (a retriable failure is
tried again after a backoff, within the attempts and the budget). A call that fails for good raises
``RemoteTableError`` naming the table, the operation and the key, in every task waiting for it.

A fetch runs as a task of its own: a caller that is cancelled (``task.callback.timeout.ms``, a join's
``timeout_ms``) stops waiting for it without cancelling it for the others. Everything runs on one thread
(the container's loop): no locks.

Metrics (``table`` label): ``table_requests`` (calls made, retries included), ``table_cache_hits`` /
``table_cache_misses``, ``table_retries``, ``table_errors`` (failed calls), ``table_batches``,
``table_throttled_seconds`` (time calls waited for the rate limiter) and ``table_call`` (a timer: each call's duration).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, Generic, TypeVar

from millstream.api.remote_table import RemoteTable
from millstream.contracts.metrics import NOOP_METRICS, MetricsRegistry
from millstream.errors import MillstreamError
from millstream.table.cache import MISSING, TtlCache
from millstream.table.errors import RemoteTableError, RetriableError
from millstream.table.limiter import RateLimiter
from millstream.table.retry import RetryPolicy
from millstream.table.settings import TableConfig

T = TypeVar("T")


def default_retriable(error: BaseException) -> bool:
    return isinstance(error, RetriableError | TimeoutError | ConnectionError)


class _Metrics:
    __slots__ = ("batches", "errors", "hits", "latency", "misses", "requests", "retries", "throttled")

    def __init__(self, registry: MetricsRegistry, table_id: str) -> None:
        self.requests = registry.counter("table_requests", table=table_id)
        self.hits = registry.counter("table_cache_hits", table=table_id)
        self.misses = registry.counter("table_cache_misses", table=table_id)
        self.retries = registry.counter("table_retries", table=table_id)
        self.errors = registry.counter("table_errors", table=table_id)
        self.batches = registry.counter("table_batches", table=table_id)
        self.throttled = registry.counter("table_throttled_seconds", table=table_id)
        self.latency = registry.timer("table_call", table=table_id)


class _Batcher(Generic[T]):
    """Items asked for together, handed to ``flush`` as one batch: when ``max_size`` are waiting, or at the
    next turn of the loop (``linger`` 0) or ``linger`` seconds after the first."""

    def __init__(self, max_size: int, linger: float, flush: Callable[[list[T]], None]) -> None:
        self.max_size = max_size
        self.linger = linger
        self._flush = flush
        self.items: list[T] = []
        self._handle: asyncio.Handle | None = None

    def add(self, item: T) -> None:
        self.items.append(item)
        if len(self.items) >= self.max_size:
            self.flush()
        elif self._handle is None:
            loop = asyncio.get_running_loop()
            self._handle = loop.call_later(self.linger, self.flush) if self.linger else loop.call_soon(self.flush)

    def flush(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        items, self.items = self.items, []
        if items:
            self._flush(items)


class RemoteTableInstance:
    """One container's instance of a remote table (see the module docstring); made by ``TableProvider``."""

    def __init__(
        self,
        definition: RemoteTable,
        settings: TableConfig,
        metrics: MetricsRegistry = NOOP_METRICS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.definition = definition
        self.table_id = definition.table_id
        self.clock = clock
        self.sleep = sleep
        self.metrics = _Metrics(metrics, self.table_id)
        self.cache = TtlCache(settings.cache_max_size, settings.cache_ttl_ms / 1000) if settings.cache_ttl_ms else None
        rate = settings.rate_limit_credits_per_second
        self.limiter = RateLimiter(rate, settings.rate_limit_burst, clock()) if rate > 0 else None
        self.retry = RetryPolicy(
            max_attempts=settings.retry_max_attempts,
            backoff=settings.retry_backoff_ms / 1000,
            backoff_max=settings.retry_backoff_max_ms / 1000,
            budget=settings.retry_budget_ms / 1000,
        )
        self.retriable = definition.retriable or default_retriable
        size, linger = settings.batch_max_size, settings.batch_linger_ms / 1000
        self._pending: dict[Any, asyncio.Future[Any]] = {}
        """Reads in flight, by key: a second read of the key waits for the same call."""
        self._reads: _Batcher[Any] | None = None
        if definition.read_all is not None and size > 1:
            self._reads = _Batcher(size, linger, lambda keys: self._spawn(self._read_batch(keys)))
        self._writes: _Batcher[tuple[Any, Any, asyncio.Future[None]]] | None = None
        if definition.write_all is not None and size > 1:
            self._writes = _Batcher(
                settings.batch_max_size, linger, lambda items: self._spawn(self._write_batch(items))
            )
        self._fetches: set[asyncio.Task[None]] = set()
        self._opening: asyncio.Future[None] | None = None

    async def get(self, key: Any) -> Any | None:
        cache = self.cache
        if cache is not None:
            value = cache.get(key, self.clock())
            if value is not MISSING:
                self.metrics.hits.inc()
                return value
            self.metrics.misses.inc()
        future = self._pending.get(key)
        if future is None:
            future = self._pending[key] = asyncio.get_running_loop().create_future()
            if self._reads is not None:
                self._reads.add(key)
            else:
                self._spawn(self._read_batch([key]))
        return await asyncio.shield(future)

    async def get_all(self, keys: Iterable[Any]) -> dict[Any, Any]:
        wanted = list(dict.fromkeys(keys))
        values = await asyncio.gather(*(self.get(key) for key in wanted))
        return {key: value for key, value in zip(wanted, values, strict=True) if value is not None}

    async def put(self, key: Any, value: Any) -> None:
        """Write ``key`` (batched with the other puts of the loop turn when the table has ``write_all``),
        then cache it. A read does not see a put still waiting in its batch."""
        if self._writes is not None:
            written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._writes.add((key, value, written))
            await asyncio.shield(written)
            return
        write, write_all = self.definition.write, self.definition.write_all
        if write is not None:
            await self._call("write", key, 1, lambda: write(key, value))
        elif write_all is not None:  # batches of one (batch.max.size 1)
            await self._call("write_all", key, 1, lambda: write_all({key: value}))
        else:
            raise MillstreamError(f"remote table '{self.table_id}' has no write function: cannot put key {key!r}")
        if self.cache is not None:
            self.cache.put(key, value, self.clock())

    async def delete(self, key: Any) -> None:
        delete = self.definition.delete
        if delete is None:
            raise MillstreamError(f"remote table '{self.table_id}' has no delete function: cannot delete key {key!r}")
        if self.cache is not None:
            self.cache.invalidate(key)
        await self._written(key)
        await self._call("delete", key, 1, lambda: delete(key))
        if self.cache is not None:
            self.cache.invalidate(key)

    async def close(self) -> None:
        """Send the batches still waiting, wait for the calls in flight, then run the definition's ``close``."""
        for batcher in (self._reads, self._writes):
            if batcher is not None:
                batcher.flush()
        if self._fetches:
            await asyncio.gather(*self._fetches, return_exceptions=True)
        if self._opening is not None and self.definition.close is not None:
            await self.definition.close()

    async def _written(self, key: Any) -> None:
        """A delete goes after the puts of ``key`` still waiting in a batch: that batch goes out first."""
        writes = self._writes
        waiting = [written for k, _, written in writes.items if k == key] if writes is not None else []
        if writes is not None and waiting:
            writes.flush()
            await asyncio.gather(*(asyncio.shield(written) for written in waiting), return_exceptions=True)

    async def _write_batch(self, items: list[tuple[Any, Any, asyncio.Future[None]]]) -> None:
        """One ``write_all`` of the batch's puts (the last value of a key put twice), then the cache."""
        write_all = self.definition.write_all
        assert write_all is not None
        values = {key: value for key, value, _ in items}
        keys = list(values)
        try:
            self.metrics.batches.inc()
            await self._call("write_all", keys, len(keys), lambda: write_all(values))
        except Exception as error:
            for _, _, written in items:
                written.set_exception(error)
                written.exception()
            return
        if self.cache is not None:
            now = self.clock()
            for key, value in values.items():
                self.cache.put(key, value, now)
        for _, _, written in items:
            written.set_result(None)

    def _spawn(self, fetch: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(fetch)
        self._fetches.add(task)
        task.add_done_callback(self._fetches.discard)

    async def _read_batch(self, keys: list[Any]) -> None:
        """Fetch ``keys`` (one ``read`` for one key, else one ``read_all``) and settle their futures."""
        definition = self.definition
        try:
            if len(keys) == 1:
                key = keys[0]
                found = {key: await self._call("read", key, 1, lambda: definition.read(key))}
            else:
                read_all = definition.read_all
                assert read_all is not None
                self.metrics.batches.inc()
                found = dict(await self._call("read_all", keys, len(keys), lambda: read_all(keys)))
        except Exception as error:
            for key in keys:
                future = self._pending.pop(key)
                future.set_exception(error)
                future.exception()  # retrieved: a caller that timed out leaves no "never retrieved" warning
            return
        now = self.clock()
        for key in keys:
            value = found.get(key)
            if value is not None and self.cache is not None:
                self.cache.put(key, value, now)
            self._pending.pop(key).set_result(value)

    async def _opened(self) -> None:
        """The definition's ``open`` runs before the first call, once (every caller waits for it); one that
        failed fails the calls waiting for it and runs again at the next call."""
        opening = self._opening
        if opening is not None and opening.done():  # opened (a failed one is reset to None)
            return
        if opening is None:
            opening = self._opening = asyncio.get_running_loop().create_future()
            try:
                if self.definition.open is not None:
                    await self.definition.open()
            except Exception as error:
                self._opening = None
                opening.set_exception(error)
                opening.exception()
                raise
            opening.set_result(None)
        await asyncio.shield(opening)

    async def _call(self, operation: str, key: Any, credits: int, call: Callable[[], Awaitable[Any]]) -> Any:
        """``call()`` within the rate limit, retried under the policy; a failure for good raises
        ``RemoteTableError`` naming the table, ``operation`` and ``key``."""
        await self._opened()
        metrics, clock = self.metrics, self.clock
        attempts = 0
        first = clock()
        while True:
            if self.limiter is not None:
                wait = self.limiter.reserve(credits, clock())
                if wait > 0:
                    metrics.throttled.inc(wait)
                    await self.sleep(wait)
            attempts += 1
            metrics.requests.inc()
            started = clock()
            try:
                result = await call()
            except Exception as error:
                metrics.errors.inc()
                if not self.retriable(error):
                    raise RemoteTableError(self.table_id, operation, key, attempts, "not retriable", error) from error
                delay = self.retry.delay(attempts, clock() - first)
                if delay is None:
                    reason = self.retry.exhausted(attempts)
                    raise RemoteTableError(self.table_id, operation, key, attempts, reason, error) from error
                metrics.retries.inc()
                await self.sleep(delay)
                continue
            metrics.latency.update(clock() - started)
            return result
