"""AWS Kinesis (``millstream[kinesis]``): a consumer that survives resharding, a producer, startpoints.

Modules, one role each: ``config`` (keys and boto3 clients), ``admin`` (streams, shards, slots),
``consumer`` (the façade over ``slots``, the queues ``poll`` empties; ``reader``, one thread per shard;
``lease_setup``, initial positions and startpoints; ``lease_keeper``, taking and keeping leases),
``producer`` (PutRecords with per-record retries), ``allocation`` (shard ↔ SSP slots), ``leases``
(lease table and balancing in the metadata store), ``dynamodb`` (the lease table in DynamoDB instead),
``offsets`` (positions, composite offsets, startpoint markers), ``shards`` (lineage),
``throttling`` (read limits, backoff, counters), ``errors`` and ``factory``.

The engine never imports this package: it is reached as ``systems.<s>.samza.factory: kinesis``.
"""

from millstream.connectors.kinesis.admin import KinesisSystemAdmin
from millstream.connectors.kinesis.consumer import SHARD_ID_HEADER, KinesisSystemConsumer
from millstream.connectors.kinesis.factory import KinesisSystemFactory
from millstream.connectors.kinesis.producer import KinesisSystemProducer

__all__ = [
    "SHARD_ID_HEADER",
    "KinesisSystemAdmin",
    "KinesisSystemConsumer",
    "KinesisSystemFactory",
    "KinesisSystemProducer",
]
