"""``blob.store.``: the schema of the blob-store keys, read by the blob stores.

Read through the job's settings (``settings.view(...)``, ``millstream.config.settings``), which parse it once."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from millstream.config.views import Bool, ConfigView


class BlobStoreConfig(ConfigView):
    """``blob.store.*``: where the blob-store state backend keeps snapshots."""

    PREFIX: ClassVar[str] = "blob.store."

    manager_factory: str = Field("local", alias="manager.factory")
    """``local``, ``s3``, ``azure``, or ``module:Class`` of a ``BlobStoreFactory``."""
    prefix: str = ""
    """Prefix of every blob name (a folder in the bucket or container)."""
    local_dir: str | None = Field(None, alias="local.dir")
    """The ``local`` blob store's directory; default ``<job.data.dir>/blobs``."""
    s3_bucket: str | None = Field(None, alias="s3.bucket")
    """The ``s3`` blob store's bucket."""
    s3_endpoint_url: str | None = Field(None, alias="s3.endpoint.url")
    """An S3-compatible endpoint URL (an emulator, MinIO); default: AWS's for the region."""
    s3_region: str | None = Field(None, alias="s3.region")
    """The bucket's region; default: boto3's default chain."""
    s3_request_timeout_ms: int = Field(60_000, alias="s3.request.timeout.ms", ge=1)
    """Connect and read timeout of each S3 request (boto3's ``connect_timeout`` and ``read_timeout``): how long a
    request that gets no answer (an unreachable endpoint, a network partition) waits before it is retried."""
    azure_container: str | None = Field(None, alias="azure.container")
    """The ``azure`` blob store's container."""
    azure_account_url: str | None = Field(None, alias="azure.account.url")
    """The storage account URL, ``https://<account>.blob.core.windows.net``."""
    transfer_threads: int = Field(8, alias="transfer.threads", ge=1)
    """Files uploaded or downloaded at once per container."""
    retry_max_retries: int = Field(-1, alias="retry.policy.max.retries", ge=-1)
    """Retries of a failed blob operation; -1: bounded only by the maximum duration."""
    retry_max_duration_ms: int = Field(900_000, alias="retry.policy.max.retry.duration.millis", ge=0)
    """How long a blob operation is retried before it fails."""
    retry_backoff_delay_ms: int = Field(100, alias="retry.policy.backoff.delay.millis", ge=0)
    """First delay between retries of a blob operation."""
    retry_backoff_max_delay_ms: int = Field(5_000, alias="retry.policy.backoff.max.delay.millis", ge=0)
    """Longest delay between retries of a blob operation. It bounds how long after the store comes back an
    operation retried through an outage resumes (Samza's 312500 let a 60 s outage cost minutes more)."""
    retry_backoff_factor: float = Field(5.0, alias="retry.policy.backoff.delay.factor", ge=1)
    """Factor by which the delay between retries grows."""
    retry_jitter_factor: float = Field(0.1, alias="retry.policy.jitter.factor", ge=0, le=1)
    """Random share of each delay, so that containers do not retry in step."""
    compare_file_owners_on_restore: Bool = Field(True, alias="compare.file.owners.on.restore")
    """A restored file must have the owner and group it had when uploaded (as Samza checks)."""
    restore_recover_missing_blobs: Bool = Field(True, alias="restore.recover.missing.blobs.enabled")
    """A start whose checkpoint names blobs that are gone (a snapshot index, store files) goes on with what
    remains — the local checkpoint directory, else an empty store — and checkpoints a complete snapshot
    at once, as Samza does; off, it fails naming the blobs."""
