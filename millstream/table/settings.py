"""``tables.<id>.``: the schema of a remote table's keys, beside the remote tables that read them.

Read through the job's settings (``settings.view(...)``, ``millstream.config.settings``), which parse it once."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from millstream.config.core import Config
from millstream.config.views import ConfigView
from millstream.errors import ConfigError


class TableConfig(ConfigView):
    """``tables.<id>.*``: a remote table (see the Async I/O guide). A table defined in the application
    (``RemoteTable(...)``) takes its settings from its arguments; these keys override them."""

    SECTION: ClassVar[str] = "tables.{name}."

    definition: str | None = None
    """``module:name`` of the table's definition: a ``RemoteTable`` or a function of the config returning one.
    Needed by a table a task reaches by id only (``context.get_table("<id>")``)."""
    rate_limit_credits_per_second: float = Field(0.0, alias="rate.limit.credits.per.second", ge=0)
    """Credits per second the table's calls may use, shared by every task of a container (a read or write of
    one key costs 1, a batch read one per key); calls past it wait their turn. 0: no limit."""
    rate_limit_burst: float | None = Field(None, alias="rate.limit.burst", gt=0)
    """Credits that may be saved up while the table is idle and spent at once; default: one second's worth."""
    retry_max_attempts: int = Field(3, alias="retry.max.attempts", ge=1)
    """Attempts per call (1: no retry). Only retriable failures are retried: ``RetriableError``,
    ``TimeoutError``, ``ConnectionError``, or what the table's ``retriable`` predicate accepts."""
    retry_backoff_ms: int = Field(100, alias="retry.backoff.ms", ge=0)
    """Wait before the first retry; each next one waits twice as long as the one before."""
    retry_backoff_max_ms: int = Field(5_000, alias="retry.backoff.max.ms", ge=0)
    """Longest wait between two attempts."""
    retry_budget_ms: int = Field(30_000, alias="retry.budget.ms", ge=0)
    """Longest time a call may spend from its first attempt to the start of its last one: no retry starts
    later. Past it (or past ``retry.max.attempts``) the call fails with a ``RemoteTableError`` naming the table
    and key, and its message goes to ``task.process.errors``."""
    cache_ttl_ms: int = Field(0, alias="cache.ttl.ms", ge=0)
    """How long a record read stays in the table's cache (one per container); 0: no cache."""
    cache_max_size: int = Field(10_000, alias="cache.max.size", ge=1)
    """Records the cache holds at most; the least recently used go first."""
    batch_max_size: int = Field(100, alias="batch.max.size", ge=1)
    """Keys per batch, for a table with a ``read_all`` (or ``write_all``) function: the reads (puts) asked for
    while the event loop runs (every message in flight of the container's tasks) go out together; 1: no
    batching."""
    batch_linger_ms: int = Field(0, alias="batch.linger.ms", ge=0)
    """How long a batch waits for more keys before it goes out; 0: only the reads asked in the same turn of
    the event loop."""


def table_ids(config: Config) -> list[str]:
    """Every table named by a ``tables.<id>.<key>`` key."""
    ids = set()
    for key in config.subset("tables."):
        table_id, sep, _ = key.partition(".")
        if not sep or not table_id:
            raise ConfigError(f"unknown config key 'tables.{key}' (expected tables.<id>.<setting>)")
        ids.add(table_id)
    return sorted(ids)
