"""Blobs in an S3 bucket, through any S3-compatible API (AWS, MinIO, moto): ``pip install millstream[s3]``.

``blob.store.s3.bucket`` (required), ``blob.store.s3.endpoint.url`` (for anything but AWS; path-style
addressing is used then), ``blob.store.s3.region``, ``blob.store.s3.request.timeout.ms`` (connect and read
timeout of a request, default 60000); credentials from
``sensitive.blob.store.s3.access.key.id`` / ``sensitive.blob.store.s3.secret.access.key``, else boto3's
usual chain (environment, profile, instance role). Large files go up in multipart uploads.
"""

from __future__ import annotations

from typing import Any, BinaryIO

from millstream.config.settings import Settings
from millstream.contracts.blobstore import (
    BlobNotFoundError,
    BlobStore,
    BlobStoreError,
    BlobStoreFactory,
    BlobStoreRetriableError,
)
from millstream.contracts.blobstore_settings import BlobStoreConfig
from millstream.errors import ConfigError

ACCESS_KEY = "sensitive.blob.store.s3.access.key.id"
SECRET_KEY = "sensitive.blob.store.s3.secret.access.key"
_RETRIABLE_CODES = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestTimeout",
    "InternalError",
    "ServiceUnavailable",
}


class S3BlobStore(BlobStore):
    def __init__(
        self,
        bucket: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        request_timeout_ms: int = 60_000,
    ) -> None:
        try:
            import boto3
            from boto3.s3.transfer import TransferConfig
            from botocore.config import Config as BotoConfig
        except ImportError:
            raise ConfigError("the s3 blob store needs boto3: pip install 'millstream[s3]'") from None
        self.bucket = bucket
        self.endpoint_url = endpoint_url
        options: dict[str, Any] = {"retries": {"max_attempts": 3, "mode": "standard"}, "max_pool_connections": 32}
        options["connect_timeout"] = options["read_timeout"] = request_timeout_ms / 1000
        if endpoint_url:
            options["s3"] = {"addressing_style": "path"}
        self._client = boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=region or "us-east-1",
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            config=BotoConfig(**options),
        )
        self._transfer = TransferConfig(multipart_threshold=64 << 20, multipart_chunksize=16 << 20, max_concurrency=4)

    def describe(self) -> str:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"S3 bucket '{self.bucket}'{where}"

    def _fail(self, action: str, blob_id: str, error: Exception) -> BlobStoreError:
        from botocore.exceptions import ClientError, ConnectionError, EndpointConnectionError, ReadTimeoutError

        message = f"{self.describe()}: cannot {action} blob '{blob_id}': {error}"
        if isinstance(error, ClientError):
            code = str(error.response.get("Error", {}).get("Code", ""))
            status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            if code in ("NoSuchKey", "404", "NotFound"):
                return BlobNotFoundError(f"{self.describe()}: blob '{blob_id}' does not exist")
            if code in _RETRIABLE_CODES or status >= 500:
                return BlobStoreRetriableError(message)
            return BlobStoreError(message)
        if isinstance(error, (ConnectionError, EndpointConnectionError, ReadTimeoutError, OSError)):
            return BlobStoreRetriableError(message)
        return BlobStoreError(message)

    def create(self) -> None:
        from botocore.exceptions import ClientError

        try:
            self._client.head_bucket(Bucket=self.bucket)
        except ClientError:
            try:
                self._client.create_bucket(Bucket=self.bucket)
            except Exception as error:
                raise self._fail("create the bucket for", "", error) from None

    def put(self, name: str, source: BinaryIO, size: int) -> str:
        try:
            self._client.upload_fileobj(source, self.bucket, name, Config=self._transfer)
        except Exception as error:
            raise self._fail("write", name, error) from None
        return name

    def get(self, blob_id: str, sink: BinaryIO) -> None:
        try:
            self._client.download_fileobj(self.bucket, blob_id, sink, Config=self._transfer)
        except Exception as error:
            raise self._fail("read", blob_id, error) from None

    def delete(self, blob_id: str) -> None:
        try:
            self._client.delete_object(Bucket=self.bucket, Key=blob_id)
        except Exception as error:
            failure = self._fail("delete", blob_id, error)
            if not isinstance(failure, BlobNotFoundError):
                raise failure from None

    def list(self, prefix: str) -> list[str]:
        try:
            found: list[str] = []
            for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                found.extend(item["Key"] for item in page.get("Contents", []))
            return sorted(found)
        except Exception as error:
            raise self._fail("list", prefix + "*", error) from None

    def close(self) -> None:
        self._client.close()


class S3BlobStoreFactory(BlobStoreFactory):
    """``blob.store.manager.factory=s3``."""

    def get_blob_store(self, config: Settings) -> BlobStore:
        blob = config.view(BlobStoreConfig)
        if not blob.s3_bucket:
            raise ConfigError("config key 'blob.store.s3.bucket' is required with blob.store.manager.factory=s3")
        return S3BlobStore(
            blob.s3_bucket,
            endpoint_url=blob.s3_endpoint_url,
            region=blob.s3_region,
            access_key=config.get(ACCESS_KEY),
            secret_key=config.get(SECRET_KEY),
            request_timeout_ms=blob.s3_request_timeout_ms,
        )
