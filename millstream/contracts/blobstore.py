"""The contract of a blob store (Samza's ``BlobStoreManager``): put a stream under a name, get it back,
delete it, list by prefix. Implementations raise ``BlobNotFoundError`` for an absent blob and
``BlobStoreRetriableError`` for failures worth retrying (connection errors, throttling, 5xx); the
backend retries those per ``blob.store.retry.policy.*``.
"""

from __future__ import annotations

import logging
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO, TypeVar

from millstream.config.settings import Settings
from millstream.contracts.blobstore_settings import BlobStoreConfig
from millstream.errors import ConfigError, MillstreamError
from millstream.plugins import load_object

log = logging.getLogger(__name__)

T = TypeVar("T")


class BlobStoreError(MillstreamError):
    """A blob store operation failed for good; names the store and the blob."""


class BlobNotFoundError(BlobStoreError):
    """The blob does not exist (deleted, or never written)."""


class BlobStoreRetriableError(BlobStoreError):
    """A failure that may pass: the operation is retried."""


class BlobStore(ABC):
    """Thread-safe: the backend uploads and downloads several files at once through one instance."""

    @abstractmethod
    def describe(self) -> str:
        """Where the blobs are, for messages: ``s3://bucket/prefix``."""

    def create(self) -> None:  # noqa: B027 - nothing to create by default
        """Create the bucket or container when missing; idempotent."""

    @abstractmethod
    def put(self, name: str, source: BinaryIO, size: int) -> str:
        """Store ``size`` bytes read from ``source`` as a new blob; returns its id."""

    @abstractmethod
    def get(self, blob_id: str, sink: BinaryIO) -> None:
        """Write the blob's bytes to ``sink``; ``BlobNotFoundError`` when it does not exist."""

    @abstractmethod
    def delete(self, blob_id: str) -> None:
        """Delete the blob; deleting an absent blob is not an error (cleanups are retried)."""

    @abstractmethod
    def list(self, prefix: str) -> list[str]:
        """Ids of every blob whose id starts with ``prefix``."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


class BlobStoreFactory(ABC):
    @abstractmethod
    def get_blob_store(self, config: Settings) -> BlobStore: ...


BLOB_STORE_FACTORIES = {
    "local": "millstream.embedded.local_blobstore:LocalBlobStoreFactory",
    "s3": "millstream.connectors.s3:S3BlobStoreFactory",
    "azure": "millstream.connectors.azure:AzureBlobStoreFactory",
}
FACTORY_KEY = "blob.store.manager.factory"


def blob_store(config: Settings) -> BlobStore:
    name = config.view(BlobStoreConfig).manager_factory
    factory_class = load_object(name, FACTORY_KEY, BLOB_STORE_FACTORIES)
    if not (isinstance(factory_class, type) and issubclass(factory_class, BlobStoreFactory)):
        raise ConfigError(f"config key '{FACTORY_KEY}': '{name}' is not a BlobStoreFactory")
    return factory_class().get_blob_store(config)


@dataclass(frozen=True)
class RetryPolicy:
    """``blob.store.retry.policy.*``: exponential backoff with jitter, bounded by count and duration.

    The longest delay is 5 s, not Samza's 312.5 s: an operation retried through an outage resumes within a
    few seconds of the store coming back, instead of sleeping through a backoff that grew during it."""

    max_retries: int = -1
    max_duration_ms: int = 900_000
    delay_ms: int = 100
    max_delay_ms: int = 5_000
    factor: float = 5.0
    jitter: float = 0.1

    @classmethod
    def of(cls, config: Settings) -> RetryPolicy:
        blob = config.view(BlobStoreConfig)
        return cls(
            blob.retry_max_retries,
            blob.retry_max_duration_ms,
            blob.retry_backoff_delay_ms,
            blob.retry_backoff_max_delay_ms,
            blob.retry_backoff_factor,
            blob.retry_jitter_factor,
        )

    def run(self, action: Callable[[], T], what: str, sleep: Callable[[float], None] = time.sleep) -> T:
        """Run ``action``, retrying ``BlobStoreRetriableError``; the last error is raised when the policy
        gives up."""
        started = time.monotonic()
        attempt = 0
        delay = self.delay_ms / 1000
        while True:
            try:
                return action()
            except BlobStoreRetriableError as error:
                attempt += 1
                elapsed_ms = (time.monotonic() - started) * 1000
                if (0 <= self.max_retries < attempt) or elapsed_ms + delay * 1000 > self.max_duration_ms:
                    raise BlobStoreError(f"{what}: giving up after {attempt} attempt(s): {error}") from error
                log.warning("%s failed (attempt %d), retrying in %.2fs: %s", what, attempt, delay, error)
                sleep(delay * (1 + random.uniform(-self.jitter, self.jitter)))
                delay = min(delay * self.factor, self.max_delay_ms / 1000)
