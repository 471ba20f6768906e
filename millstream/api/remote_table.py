"""``RemoteTable``: a table another service holds, read (and written) through ``async`` functions.

Samza's Table API in Python: users define the table by its functions and settings; the container builds
one instance of it per container (``millstream.table``), shared by its tasks, with a rate limiter, retries,
a cache and batching in front of the functions. Tasks reach it with ``context.get_table(...)``; the
high-level API joins a stream with it (``stream.join(table, key=..., joiner=...)``), an async lookup join
with the guarantees of ``map_async``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from millstream.api.task import TaskContext

ReadFunction = Callable[[Any], Awaitable[Any]]
ReadAllFunction = Callable[[list[Any]], Awaitable[Mapping[Any, Any]]]
WriteFunction = Callable[[Any, Any], Awaitable[None]]
WriteAllFunction = Callable[[dict[Any, Any]], Awaitable[None]]
DeleteFunction = Callable[[Any], Awaitable[None]]


class AsyncTable(Protocol):
    """What ``context.get_table`` returns: a remote table's operations, awaited on the container's loop."""

    async def get(self, key: Any) -> Any | None:
        """The record of ``key`` (None: the service has none), from the cache when it holds it."""
        ...

    async def get_all(self, keys: Iterable[Any]) -> dict[Any, Any]:
        """The records of ``keys`` found (one batch call when the table has ``read_all``)."""
        ...

    async def put(self, key: Any, value: Any) -> None:
        """Write through to the service, then to the cache."""
        ...

    async def delete(self, key: Any) -> None:
        """Delete at the service and from the cache."""
        ...


class RemoteTable:
    """A remote table: ``read(key)`` (``async``, returns the record or None) and optionally ``read_all(keys)``
    (``async``, returns a mapping of the keys found: reads are then batched), ``write(key, value)``,
    ``write_all(records)`` (a dict of the keys to write and their values: puts are then batched) and
    ``delete(key)``; ``open()`` / ``close()`` (``async``) run on the container's event loop before the first
    call and when the container stops (to open and close a client session); an ``open`` that raised fails
    the calls waiting for it and runs again at the next call.

    The settings are the ``tables.<table_id>.*`` config keys' (see the configuration reference), given here
    as arguments; a key in the job's config overrides its argument. ``retriable(error)`` says which
    failures are retried besides ``RetriableError``, ``TimeoutError`` and ``ConnectionError``. Keys must be
    hashable (the cache, the reads in flight and the batches are keyed by them).
    """

    def __init__(
        self,
        table_id: str,
        read: ReadFunction,
        *,
        read_all: ReadAllFunction | None = None,
        write: WriteFunction | None = None,
        write_all: WriteAllFunction | None = None,
        delete: DeleteFunction | None = None,
        open: Callable[[], Awaitable[None]] | None = None,
        close: Callable[[], Awaitable[None]] | None = None,
        retriable: Callable[[BaseException], bool] | None = None,
        rate_limit: float | None = None,
        rate_limit_burst: float | None = None,
        max_attempts: int | None = None,
        backoff_ms: int | None = None,
        backoff_max_ms: int | None = None,
        retry_budget_ms: int | None = None,
        cache_ttl_ms: int | None = None,
        cache_max_size: int | None = None,
        batch_max_size: int | None = None,
        batch_linger_ms: int | None = None,
    ) -> None:
        if not table_id or "." in table_id:
            raise ValueError(f"a table id is a name without dots, not {table_id!r}")
        self.table_id = table_id
        self.read = read
        self.read_all = read_all
        self.write = write
        self.write_all = write_all
        self.delete = delete
        self.open = open
        self.close = close
        self.retriable = retriable
        settings = {
            "rate.limit.credits.per.second": rate_limit,
            "rate.limit.burst": rate_limit_burst,
            "retry.max.attempts": max_attempts,
            "retry.backoff.ms": backoff_ms,
            "retry.backoff.max.ms": backoff_max_ms,
            "retry.budget.ms": retry_budget_ms,
            "cache.ttl.ms": cache_ttl_ms,
            "cache.max.size": cache_max_size,
            "batch.max.size": batch_max_size,
            "batch.linger.ms": batch_linger_ms,
        }
        self.settings = {f"tables.{table_id}.{key}": str(value) for key, value in settings.items() if value is not None}
        """The table's settings as config keys (those given); the job's config overrides them."""

    def __repr__(self) -> str:
        return f"RemoteTable({self.table_id!r})"


class RemoteJoin:
    """``stream.join(remote_table, ...)``: what ``map_async`` awaits per message (``flat``: the joined
    result, or nothing for an inner join without a record)."""

    def __init__(
        self, table: RemoteTable, key_fn: Callable[[Any], Any], joiner: Callable[[Any, Any], Any], how: str
    ) -> None:
        self.table = table
        self.key_fn = key_fn
        self.joiner = joiner
        self.how = how
        self._instance: AsyncTable | None = None

    def init(self, context: TaskContext) -> None:
        self._instance = context.get_table(self.table)

    async def __call__(self, message: Any) -> list[Any]:
        assert self._instance is not None, "the join's table is opened at init"
        record = await self._instance.get(self.key_fn(message))
        if record is None and self.how == "inner":
            return []
        return [self.joiner(message, record)]
