"""Errors of local state: every one names the task and store (and the file or blob) at fault."""

from __future__ import annotations

from millstream.errors import MillstreamError


class StoreError(MillstreamError):
    """A key-value store operation failed or was misused (a None key, an unserializable value...)."""


class StateRestoreError(MillstreamError):
    """A store could not be restored to its checkpoint: missing or corrupt snapshot, checksum mismatch,
    changelog gap. The message names the task, the store and the file or blob."""


class StateBackupError(MillstreamError):
    """A snapshot, upload or cleanup of a store failed; names the task, the store and the file."""


class CommitFailedError(MillstreamError):
    """An earlier commit of the task failed in its asynchronous stage; the cause is chained."""


class CommitTimeoutError(MillstreamError):
    """A commit waited longer than ``task.commit.timeout.ms`` for the previous one to finish."""
