"""``metadata.``: the schema of the metadata-store keys, read by the metadata stores.

Read through the job's settings (``settings.view(...)``, ``millstream.config.settings``), which parse it once."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from millstream.config.views import ConfigView


class MetadataConfig(ConfigView):
    PREFIX: ClassVar[str] = "metadata."

    store_factory: str = Field("sqlite", alias="store.factory")
    """The job's metadata store (job model, epochs, stop and drain signals, startpoints): ``sqlite`` or ``kafka``."""
    store_path: str | None = Field(None, alias="store.path")
    """The SQLite metadata store's file; default ``<job.data.dir>/jobs/<job.name>-<job.id>/metadata.db``."""
    store_lock_lease_ms: int = Field(120_000, alias="store.lock.lease.ms", gt=0)
    """SQLite store: how long a writer that finds the write lock taken waits for the same holder, measured on its own
    clock from when it first finds that holder in its way, naming it in a warning every ``metadata.store.lock.wait.ms``.
    Within it no writer fails for the lock; past it the job's newest driver ends a holder that is a process on its
    own host (a stopped process keeps SQLite's lock until it dies), and any other writer fails, naming the holder."""
    store_lock_wait_ms: int = Field(5_000, alias="store.lock.wait.ms", gt=0)
    """SQLite store: one round of waiting for the write lock (SQLite's busy timeout); after each, the waiter logs
    who holds the lock (container, attempt, pid, host, since)."""
    store_testing_stop_in_write: str | None = Field(None, alias="store.testing.stop.in.write")
    """Testing only, SQLite store: the first write to this namespace (e.g. ``checkpoint-v1``) stops its process
    (``SIGSTOP``) with the write lock held, once per ``metadata.store.testing.marker.dir``, for the paused-holder
    tests."""
    store_testing_marker_dir: str | None = Field(None, alias="store.testing.marker.dir")
    """Testing only: where ``metadata.store.testing.stop.in.write`` claims its one stop (a file holding the stopped
    pid)."""
