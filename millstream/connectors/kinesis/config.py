"""``systems.<s>.*`` settings of a Kinesis system, and the boto3 clients built from them.

Where the AWS settings come from, in order: ``systems.<s>.aws.region`` / ``aws.endpoint`` /
``aws.accessKey`` with the secret under ``sensitive.systems.<s>.aws.secretKey`` (and
``sensitive.systems.<s>.aws.sessionToken``), else ``aws.profile``, else boto3's default chain
(environment, shared files, instance or container role). Secrets are never printed: a secret key in
the plain namespace is refused with a pointer to ``sensitive.``.

The client makes no retries of its own (botocore's retries would hide throttling): the consumer
and the producer count throttled calls and back off themselves (see ``throttling``), and control-plane
calls go through :meth:`KinesisClients.call`, which does the same up to ``aws.max.attempts``.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from typing import Any, Literal, Self

from pydantic import Field

from millstream.config.core import Config
from millstream.config.secrets import SENSITIVE_PREFIX
from millstream.config.settings import Settings
from millstream.config.views import Bool
from millstream.connectors.kinesis.errors import KinesisConfigError, KinesisSystemError
from millstream.connectors.kinesis.offsets import ShardPosition
from millstream.connectors.kinesis.throttling import Backoff, KinesisMetrics, is_throttling, is_transient
from millstream.contracts.systems import SystemConfigView
from millstream.instants import parse_epoch_ms
from millstream.model import SystemStream

KINESIS_FACTORY_NAMES = frozenset(
    {
        "kinesis",
        "org.apache.samza.system.kinesis.KinesisSystemFactory",
        "millstream.connectors.kinesis.factory:KinesisSystemFactory",
        "millstream.connectors.kinesis.factory.KinesisSystemFactory",
        "millstream.connectors.kinesis:KinesisSystemFactory",
    }
)
SECRET_KEYS = ("aws.secretKey", "aws.sessionToken")
InitialPosition = Literal["TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"]
_CLIENTS: dict[tuple[Any, ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()


class KinesisSystemConfig(SystemConfigView):
    """The keys a Kinesis system accepts under ``systems.<s>.`` (besides ``samza.*`` and ``streams.*``)."""

    region: str | None = Field(None, alias="aws.region")
    """The AWS region; default: boto3's default chain (environment, profile, instance metadata)."""
    endpoint: str | None = Field(None, alias="aws.endpoint")
    """A Kinesis-compatible endpoint URL (an emulator, a VPC endpoint); default: AWS's for the region."""
    access_key: str | None = Field(None, alias="aws.accessKey")
    """An access key id; its secret is ``sensitive.systems.<s>.aws.secretKey``. Default: boto3's default chain."""
    secret_key: str | None = Field(None, alias="aws.secretKey")
    """Refused: secrets belong under ``sensitive.systems.<s>.aws.secretKey``."""
    profile: str | None = Field(None, alias="aws.profile")
    """A named profile of the AWS shared config files."""
    connect_timeout_ms: int = Field(5_000, alias="aws.connect.timeout.ms", ge=1)
    """Connect timeout of every AWS call."""
    read_timeout_ms: int = Field(10_000, alias="aws.read.timeout.ms", ge=1)
    """Read timeout of every AWS call."""
    max_attempts: int = Field(5, alias="aws.max.attempts", ge=1)
    """Attempts of a control-plane call (ListShards, CreateStream...) when throttled or unavailable."""

    initial_position: InitialPosition | None = Field(None, alias="consumer.initial.position")
    """Where a shard without a checkpoint starts; default from ``samza.offset.default``
    (``oldest`` → TRIM_HORIZON, ``upcoming`` → LATEST)."""
    initial_timestamp: str | None = Field(None, alias="consumer.initial.timestamp")
    """Epoch milliseconds or ISO 8601; required with ``consumer.initial.position=AT_TIMESTAMP``."""
    application_name: str | None = Field(None, alias="consumer.application.name")
    """Names the lease table (shard leases and checkpoints); default ``<job.name>-<job.id>``. A new name
    starts from nothing: the way to reset every checkpoint of the job (Samza: a new KCL TableName)."""
    lease_duration_ms: int = Field(10_000, alias="consumer.lease.duration.ms", ge=100)
    """A lease not renewed for this long (seen by the local clock) is taken over; renewed every third."""
    checkpoint_sync_ms: int = Field(500, alias="consumer.checkpoint.sync.ms", ge=10)
    """How often committed positions are copied to the lease table and leases are balanced."""
    shard_sync_ms: int = Field(10_000, alias="consumer.shard.sync.ms", ge=10)
    """How often the shards are listed (at once when a shard the consumer reads ends)."""
    get_records_max: int = Field(10_000, alias="consumer.getrecords.max.records", ge=1, le=10_000)
    """Most records one GetRecords call asks for."""
    calls_per_second: float = Field(5.0, alias="consumer.shard.getrecords.per.second", gt=0)
    """GetRecords calls per second each reader makes on one shard (Kinesis allows 5 per shard across all readers)."""
    bytes_per_second: float = Field(2 * 1024 * 1024, alias="consumer.shard.bytes.per.second", gt=0)
    """Bytes per second each reader takes from one shard (Kinesis serves 2 MiB/s per shard across all readers)."""
    idle_ms: int = Field(500, alias="consumer.idle.ms", ge=0)
    """Wait after a GetRecords that returned nothing (Kinesis's and KCL's idle time between reads)."""
    poll_batch_size: int = Field(10_000, alias="consumer.poll.batch.size", ge=1)
    """Most envelopes one ``poll`` hands out per SSP."""
    backoff_initial_ms: int = Field(200, alias="consumer.backoff.initial.ms", ge=1)
    """First delay after a throttled or failed GetRecords."""
    backoff_max_ms: int = Field(10_000, alias="consumer.backoff.max.ms", ge=1)
    """Longest delay after throttled or failed GetRecords calls."""
    stop_timeout_ms: int = Field(5_000, alias="consumer.stop.timeout.ms", ge=0)
    """How long ``stop`` waits for the readers before releasing the leases."""
    lease_store: Literal["metadata", "dynamodb"] = Field("metadata", alias="consumer.lease.store")
    """Where shard leases and per-shard checkpoints live: the job's metadata store, or a DynamoDB table."""
    dynamodb_table: str | None = Field(None, alias="consumer.dynamodb.table", pattern=r"^[A-Za-z0-9_.-]{3,255}$")
    """The lease table with ``consumer.lease.store=dynamodb``; default ``millstream-<application>``."""
    dynamodb_create_table: Bool = Field(True, alias="consumer.dynamodb.create.table")
    """Create the table (on-demand capacity) when it does not exist."""
    dynamodb_endpoint: str | None = Field(None, alias="aws.dynamodb.endpoint")
    """A DynamoDB-compatible endpoint URL (an emulator, a VPC endpoint); default: AWS's for the region."""

    producer_batch_records: int = Field(500, alias="producer.batch.records", ge=1, le=500)
    """Most records in one PutRecords call (Kinesis allows 500)."""
    producer_batch_bytes: int = Field(5 * 1024 * 1024, alias="producer.batch.bytes", ge=1, le=5 * 1024 * 1024)
    """Most bytes in one PutRecords call (Kinesis allows 5 MiB)."""
    producer_max_attempts: int = Field(10, alias="producer.max.attempts", ge=1)
    """Attempts per record (a failed record of a PutRecords is retried alone) before ``flush`` fails."""
    producer_backoff_initial_ms: int = Field(100, alias="producer.backoff.initial.ms", ge=1)
    """First delay before a failed record is retried."""
    producer_backoff_max_ms: int = Field(5_000, alias="producer.backoff.max.ms", ge=1)
    """Longest delay before a failed record is retried."""
    producer_preserve_key_order: Bool = Field(False, alias="producer.preserve.key.order")
    """At most one record per partition key in a PutRecords call, so that retrying a failed record can
    never put it behind a later record of its key (PutRecords does not keep order across failures)."""

    @classmethod
    def read(cls, config: Config, name: object = None) -> Self:
        """The system ``name``'s keys, refusing a plain secret and an incomplete initial position."""
        settings = super().read(config, name)
        prefix = cls.prefix_for(name)
        if settings.secret_key is not None:
            raise KinesisConfigError(
                f"config key '{prefix}aws.secretKey' must not hold a secret in plain config: "
                f"set '{SENSITIVE_PREFIX}{prefix}aws.secretKey' instead (never printed)"
            )
        if settings.initial_position == "AT_TIMESTAMP" and settings.initial_timestamp is None:
            raise KinesisConfigError(
                f"config key '{prefix}consumer.initial.position' is AT_TIMESTAMP: set "
                f"'{prefix}consumer.initial.timestamp' (epoch milliseconds or ISO 8601)"
            )
        if settings.initial_timestamp is not None:
            parse_timestamp(settings.initial_timestamp, f"{prefix}consumer.initial.timestamp")
        return settings

    def application(self, config: Settings) -> str:
        return self.application_name or config.job.job_key

    def lease_table_name(self, config: Settings) -> str:
        """The DynamoDB lease table: configured, else ``millstream-<application>`` (KCL names its table
        after the application too), with characters DynamoDB refuses replaced by ``-``."""
        if self.dynamodb_table:
            return self.dynamodb_table
        name = re.sub(r"[^A-Za-z0-9_.-]", "-", f"millstream-{self.application(config)}")
        return name[:255]

    def initial_shard_position(self, config: Settings, system: str, stream: str) -> ShardPosition:
        """Where a shard of ``stream`` without a checkpoint starts (at the job's first start)."""
        if self.initial_position == "AT_TIMESTAMP":
            assert self.initial_timestamp is not None
            return ShardPosition.at_timestamp(parse_timestamp(self.initial_timestamp, "consumer.initial.timestamp"))
        if self.initial_position == "TRIM_HORIZON":
            return ShardPosition.trim_horizon()
        if self.initial_position == "LATEST":
            return ShardPosition.latest()
        oldest = config.offset_default(SystemStream(system, stream)) == "oldest"
        return ShardPosition.trim_horizon() if oldest else ShardPosition.latest()

    def buffer_size(self, config: Settings) -> int:
        """Envelopes a slot buffers before its readers wait (``task.consumer.buffer.size``)."""
        return config.task.max_buffered_per_partition


def config_keys() -> frozenset[str]:
    return KinesisSystemConfig.keys()


def parse_timestamp(text: str, key: str) -> int:
    """Epoch milliseconds from digits or an ISO 8601 instant (UTC when it has no offset)."""
    try:
        return parse_epoch_ms(text)
    except ValueError:
        raise KinesisConfigError(
            f"config key '{key}' has invalid value {text!r}: give epoch milliseconds or ISO 8601"
        ) from None


class KinesisClients:
    """The boto3 clients of one system, built once from its settings (boto3 clients are thread-safe)."""

    def __init__(self, config: Settings, system: str) -> None:
        self.system = system
        self.settings = config.view(KinesisSystemConfig, system)
        secrets = config.subset(f"{SENSITIVE_PREFIX}systems.{system}.")
        self._secret_key = secrets.get("aws.secretKey")
        self._session_token = secrets.get("aws.sessionToken")
        unknown = sorted(set(secrets) - set(SECRET_KEYS))
        if unknown:
            raise KinesisConfigError(
                f"unknown config key '{SENSITIVE_PREFIX}systems.{system}.{unknown[0]}' "
                f"(accepted: {', '.join(SENSITIVE_PREFIX + 'systems.' + system + '.' + k for k in SECRET_KEYS)})"
            )
        if (self.settings.access_key is None) != (self._secret_key is None):
            present, missing = (
                (f"systems.{system}.aws.accessKey", f"{SENSITIVE_PREFIX}systems.{system}.aws.secretKey")
                if self._secret_key is None
                else (f"{SENSITIVE_PREFIX}systems.{system}.aws.secretKey", f"systems.{system}.aws.accessKey")
            )
            raise KinesisConfigError(f"config key '{present}' is set but '{missing}' is not: give both or neither")
        self._client_instance: Any = None

    def _session(self) -> Any:
        try:
            import boto3
        except ImportError:
            raise KinesisConfigError(
                f"system '{self.system}' is a Kinesis system, which needs boto3: pip install 'millstream[kinesis]'"
            ) from None
        return boto3.session.Session(
            aws_access_key_id=self.settings.access_key,
            aws_secret_access_key=self._secret_key,
            aws_session_token=self._session_token,
            region_name=self.settings.region,
            profile_name=self.settings.profile,
        )

    def _client(self, service: str, endpoint: str | None, retries: dict[str, Any], pool: int) -> Any:
        from botocore.config import Config as BotoConfig
        from botocore.exceptions import BotoCoreError

        settings = self.settings
        boto_config = BotoConfig(
            connect_timeout=settings.connect_timeout_ms / 1000,
            read_timeout=settings.read_timeout_ms / 1000,
            retries=retries,
            max_pool_connections=pool,
        )
        try:
            return self._session().client(service, endpoint_url=endpoint, config=boto_config)
        except BotoCoreError as error:
            raise KinesisConfigError(
                f"cannot create a {service} client for system '{self.system}': {error} "
                f"(set systems.{self.system}.aws.region, or configure the AWS default chain)"
            ) from None

    def _shared(self, service: str, endpoint: str | None) -> Any:
        """A client shared by every ``KinesisClients`` of this process with the same settings: creating
        a boto3 client costs about half a second, and a container builds an admin, a consumer and a
        producer. No botocore retries: callers count throttles and back off themselves."""
        settings = self.settings
        key = (
            os.getpid(),
            service,
            endpoint,
            settings.region,
            settings.access_key,
            hashlib.sha256(f"{self._secret_key}/{self._session_token}".encode()).hexdigest(),
            settings.profile,
            settings.connect_timeout_ms,
            settings.read_timeout_ms,
        )
        with _CLIENTS_LOCK:
            client = _CLIENTS.get(key)
            if client is None:
                client = _CLIENTS[key] = self._client(
                    service, endpoint, {"total_max_attempts": 1, "mode": "standard"}, 64
                )
        return client

    @property
    def client(self) -> Any:
        """The boto3 Kinesis client (see ``_shared``)."""
        if self._client_instance is None:
            self._client_instance = self._shared("kinesis", self.settings.endpoint)
        return self._client_instance

    @property
    def dynamodb(self) -> Any:
        """The boto3 DynamoDB client of the lease table (``consumer.lease.store=dynamodb``)."""
        return self._shared("dynamodb", self.settings.dynamodb_endpoint)

    def call(
        self,
        operation: str,
        metrics: KinesisMetrics | None = None,
        *,
        stream: str | None = None,
        **arguments: Any,
    ) -> Any:
        """A control-plane call (ListShards, CreateStream...), retried with backoff when throttled or
        when Kinesis is briefly unavailable, up to ``aws.max.attempts``; other errors raise at once."""
        from botocore.exceptions import BotoCoreError, ClientError

        backoff = Backoff(self.settings.backoff_initial_ms / 1000, self.settings.backoff_max_ms / 1000)
        method = getattr(self.client, _snake(operation))
        for attempt in range(1, self.settings.max_attempts + 1):
            try:
                return method(**arguments)
            except ClientError as error:
                throttled = is_throttling(error)
                if throttled and metrics is not None:
                    metrics.throttled(operation)
                if not (throttled or is_transient(error)) or attempt == self.settings.max_attempts:
                    raise
            except BotoCoreError as error:
                if attempt == self.settings.max_attempts:
                    raise KinesisSystemError(self.system, f"{operation} failed: {error}", stream=stream) from None
            time.sleep(backoff.next_delay())
        raise AssertionError("unreachable")


def _snake(operation: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in operation).lstrip("_")
