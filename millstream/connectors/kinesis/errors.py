"""Errors of the Kinesis system; each names the system, stream, shard or sequence number at fault."""

from __future__ import annotations

from millstream.contracts.systems import SystemOperationError
from millstream.errors import ConfigError


class KinesisSystemError(SystemOperationError):
    """An operation against Kinesis failed; the message names the system and what was being done."""

    def __init__(
        self,
        system: str,
        detail: str,
        *,
        stream: str | None = None,
        shard_id: str | None = None,
        sequence_number: str | None = None,
    ) -> None:
        self.system = system
        self.stream = stream
        self.shard_id = shard_id
        self.sequence_number = sequence_number
        where = f"Kinesis system '{system}'"
        if stream is not None:
            where += f" stream '{stream}'"
        if shard_id is not None:
            where += f" shard '{shard_id}'"
        if sequence_number is not None:
            where += f" at sequence number {sequence_number}"
        super().__init__(f"{where}: {detail}")


class KinesisConfigError(ConfigError):
    """A Kinesis setting is missing or wrong, or the job uses Kinesis in a way it cannot support."""


class KinesisStreamNotActiveError(KinesisSystemError):
    """A stream that does not become ACTIVE in time (still creating, updating or being deleted)."""


class KinesisOffsetError(KinesisSystemError):
    """An offset string that is not a Kinesis position of the form ``shardId:sequenceNumber[,...]``."""

    def __init__(self, system: str, stream: str | None, offset: str, detail: str) -> None:
        self.offset = offset
        super().__init__(system, f"offset {offset!r} is not a Kinesis offset: {detail}", stream=stream)


class KinesisReadError(KinesisSystemError):
    """Reading a shard failed for good (not a throttle or an outage, which are retried)."""


class KinesisProduceError(KinesisSystemError):
    """Records could not be written after every retry; raised by ``flush``, before any checkpoint."""

    def __init__(
        self, system: str, stream: str, partition_key: str, error_code: str, detail: str, failed: int = 1
    ) -> None:
        self.partition_key = partition_key
        self.error_code = error_code
        self.failed = failed
        more = f" ({failed} records failed)" if failed > 1 else ""
        super().__init__(
            system,
            f"cannot write the record with partition key {partition_key!r}: {error_code}: {detail}{more}",
            stream=stream,
        )


class KinesisLeaseError(KinesisSystemError):
    """The shard lease table in the metadata store holds something this consumer cannot read."""
