"""Errors of remote tables: what a table function raises to ask for a retry, and what a table raises
when a call failed for good (naming the table, the operation and the key)."""

from __future__ import annotations

from typing import Any

from millstream.errors import MessageError


class RetriableError(MessageError):
    """Raised by a table function for a failure worth retrying (a 429, a 503, a reset connection).

    ``TimeoutError`` and ``ConnectionError`` are retriable too; any other exception is not, unless the
    table's ``retriable`` predicate says so."""


class RemoteTableError(MessageError):
    """A call of a remote table failed: not retriable, or retried until its attempts or its budget ran out.

    Carries the table id, the operation (``read``, ``read_all``, ``write``, ``delete``), the key (the keys
    of a batch) and the attempts made; the original exception is its ``__cause__``. It fails its message
    under ``task.process.errors``, as the task's own exceptions do."""

    def __init__(self, table_id: str, operation: str, key: Any, attempts: int, reason: str, cause: BaseException):
        self.table_id = table_id
        self.operation = operation
        self.key = key
        self.attempts = attempts
        noun = "keys" if isinstance(key, list) else "key"
        super().__init__(
            f"remote table '{table_id}': {operation} of {noun} {key!r} failed after {attempts} attempt"
            f"{'s' if attempts != 1 else ''} ({reason}): {type(cause).__name__}: {cause}"
        )
