"""Bounded reads of one shard, outside any job: what :class:`millstream.contracts.systems.ShardedSystemAdmin`'s
``read_shard`` does for Kinesis (DataFrame reads plan shard by shard and call it in their tasks).

A job reads shards through slots and leases, because shards come and go while it runs; a bounded read needs
neither. It reads with ``GetShardIterator`` / ``GetRecords`` from its start to the first record past its end,
to the shard's tip (an empty answer with no lag: every record written until now was delivered) or to the end
of a closed shard. Envelopes carry what a job's consumer gives them: the sequence number as offset, the arrival
time as timestamp, the shard and sequence number as headers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from millstream.connectors.kinesis.errors import KinesisSystemError
from millstream.connectors.kinesis.slots import SEQUENCE_NUMBER_HEADER, SHARD_ID_HEADER, arrival_millis
from millstream.model import IncomingMessageEnvelope, SystemStreamPartition

Call = Callable[..., Any]
"""``call(operation, stream, **arguments)``: one Kinesis API call, throttling and metrics handled (the admin's)."""


def read_shard(
    call: Call,
    system: str,
    ssp: SystemStreamPartition,
    shard_id: str,
    start: Mapping[str, Any],
    ends_before: Callable[[str, int], bool],
) -> Iterator[list[IncomingMessageEnvelope]]:
    """The envelopes of ``shard_id`` from ``start`` in batches, as the capability's ``read_shard`` states."""
    for response in _responses(call, system, ssp, shard_id, start):
        batch, done = _envelopes(ssp, shard_id, response.get("Records", []), ends_before)
        if batch:
            yield batch
        if done or (not batch and response.get("MillisBehindLatest", 0) == 0):
            return


def _responses(
    call: Call, system: str, ssp: SystemStreamPartition, shard_id: str, start: Mapping[str, Any]
) -> Iterator[dict[str, Any]]:
    """``GetRecords`` answers from ``start`` to the end of the shard; Kinesis's refusals (an expired shard, a
    sequence number it does not hold) as errors naming the stream, the shard and the start."""
    from botocore.exceptions import ClientError

    arguments = dict(start)
    if "Timestamp" in arguments:
        arguments["Timestamp"] = datetime.fromtimestamp(arguments["Timestamp"] / 1000, tz=UTC)
    try:
        iterator = call("GetShardIterator", ssp.stream, StreamName=ssp.stream, ShardId=shard_id, **arguments)
        iterator = iterator["ShardIterator"]
        while iterator is not None:
            response = call("GetRecords", ssp.stream, ShardIterator=iterator, Limit=10_000)
            yield response
            iterator = response.get("NextShardIterator")
    except ClientError as error:
        raise KinesisSystemError(
            system,
            f"refused the read from {_describe(start)}: {error}",
            stream=ssp.stream,
            shard_id=shard_id,
        ) from None


def _describe(start: Mapping[str, Any]) -> str:
    position = start["ShardIteratorType"]
    detail = start.get("StartingSequenceNumber") or start.get("Timestamp")
    return f"{position} {detail}" if detail is not None else position


def _envelopes(
    ssp: SystemStreamPartition, shard_id: str, records: list[dict[str, Any]], ends_before: Callable[[str, int], bool]
) -> tuple[list[IncomingMessageEnvelope], bool]:
    """The records before the read's end as envelopes (as a job's consumer builds them), and whether it ended."""
    shard_header = shard_id.encode()
    envelopes: list[IncomingMessageEnvelope] = []
    for record in records:
        sequence, arrival = record["SequenceNumber"], arrival_millis(record.get("ApproximateArrivalTimestamp"))
        if ends_before(sequence, arrival):
            return envelopes, True
        key, data = record.get("PartitionKey"), record["Data"]
        headers = {SHARD_ID_HEADER: shard_header, SEQUENCE_NUMBER_HEADER: sequence.encode()}
        envelopes.append(
            IncomingMessageEnvelope(ssp, sequence, key and key.encode(), data, arrival, headers, len(data))
        )
    return envelopes, False
