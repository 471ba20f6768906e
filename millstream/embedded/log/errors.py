"""Errors of the embedded log system; each names the stream, partition, offset or file at fault."""

from __future__ import annotations

from pathlib import Path

from millstream.contracts.systems import OffsetOutOfRangeError, SystemOperationError, WriterFencedError, WriterToken


class LogSystemError(SystemOperationError):
    """An operation on the embedded log failed."""


class LogStorageError(LogSystemError):
    """A partition file could not be opened, read or written (SQLite error, missing or corrupt file)."""

    def __init__(self, stream: str, partition: int, path: Path, detail: str) -> None:
        self.stream = stream
        self.partition = partition
        self.path = path
        super().__init__(f"log stream '{stream}' partition {partition} (file '{path}'): {detail}")


class CorruptStreamError(LogSystemError):
    """A stream directory exists but its ``stream.json`` is unreadable or its partitions are missing."""

    def __init__(self, stream: str, path: Path, detail: str) -> None:
        self.stream = stream
        self.path = path
        super().__init__(f"log stream '{stream}' at '{path}' is corrupt: {detail}")


class InvalidStreamNameError(LogSystemError):
    """A stream name that cannot be a directory name under the log's root."""

    def __init__(self, stream: str, detail: str) -> None:
        self.stream = stream
        super().__init__(f"'{stream}' is not a valid log stream name: {detail}")


class InvalidOffsetError(LogSystemError):
    """An offset string that is not a non-negative integer."""

    def __init__(self, stream: str, partition: int, offset: str) -> None:
        self.stream = stream
        self.partition = partition
        self.offset = offset
        super().__init__(
            f"log stream '{stream}' partition {partition}: offset {offset!r} is not a non-negative integer"
        )


class PartitionSealedError(LogSystemError):
    """An append to a partition that was sealed (bounded and complete)."""

    def __init__(self, stream: str, partition: int, path: Path) -> None:
        self.stream = stream
        self.partition = partition
        self.path = path
        super().__init__(
            f"log stream '{stream}' partition {partition} (file '{path}') is sealed; nothing more may be appended"
        )


class LogOffsetOutOfRangeError(OffsetOutOfRangeError):
    """A read position outside ``[oldest, upcoming]``: trimmed by retention, or beyond the log's end."""

    def __init__(self, stream: str, partition: int, offset: int, oldest: int, upcoming: int) -> None:
        self.stream = stream
        self.partition = partition
        self.offset = offset
        self.oldest = oldest
        self.upcoming = upcoming
        if offset < oldest:
            reason = f"was trimmed; the oldest available offset is {oldest}"
        else:
            reason = f"is beyond the end of the log; the upcoming offset is {upcoming}"
        super().__init__(f"log stream '{stream}' partition {partition}: offset {offset} {reason}")


class TransactionTimedOutError(WriterFencedError):
    """An exactly-once transaction stayed open past ``systems.<s>.transaction.timeout.ms`` and was aborted: its
    writer's commit (or next write) fails, nothing of the transaction is visible, and the writer's attempt is
    fenced; the container's next attempt restores from the last committed checkpoint."""

    def __init__(self, system: str, txn: int, writer: WriterToken, path: Path) -> None:
        self.target = f"log system '{system}' transaction {txn}"
        self.writer = writer
        self.txn = txn
        super(WriterFencedError, self).__init__(  # WriterFencedError's own message says a newer attempt took over
            f"{self.target} of {writer.describe()} was aborted: it was open longer than "
            f"systems.{system}.transaction.timeout.ms, so nothing of it was committed and this attempt may write no "
            f"more; the container's next attempt restores from its last committed checkpoint (file '{path}')",
        )
