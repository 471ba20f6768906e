"""Blobs in an Azure Blob Storage container (or Azurite): ``pip install millstream[azure]``.

``blob.store.azure.container`` (required); the account from ``sensitive.blob.store.azure.connection.string``,
else ``blob.store.azure.account.url`` with ``sensitive.blob.store.azure.account.key`` (or, without a
key, ``azure-identity``'s default credential when installed).
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

CONNECTION_STRING = "sensitive.blob.store.azure.connection.string"
ACCOUNT_KEY = "sensitive.blob.store.azure.account.key"


class AzureBlobStore(BlobStore):
    def __init__(
        self,
        container: str,
        *,
        connection_string: str | None = None,
        account_url: str | None = None,
        credential: Any = None,
    ) -> None:
        try:
            from azure.storage.blob import BlobServiceClient
        except ImportError:
            raise ConfigError(
                "the azure blob store needs azure-storage-blob: pip install 'millstream[azure]'"
            ) from None
        if connection_string:
            service = BlobServiceClient.from_connection_string(connection_string)
        elif account_url:
            service = BlobServiceClient(account_url, credential=credential)
        else:
            raise ConfigError(f"the azure blob store needs '{CONNECTION_STRING}' or 'blob.store.azure.account.url'")
        self.container_name = container
        self.account_url = service.url
        self._service = service
        self._container = service.get_container_client(container)

    def describe(self) -> str:
        return f"Azure container '{self.container_name}' at {self.account_url}"

    def _fail(self, action: str, blob_id: str, error: Exception) -> BlobStoreError:
        from azure.core.exceptions import (
            HttpResponseError,
            ResourceNotFoundError,
            ServiceRequestError,
            ServiceResponseError,
        )

        message = f"{self.describe()}: cannot {action} blob '{blob_id}': {error}"
        if isinstance(error, ResourceNotFoundError):
            return BlobNotFoundError(f"{self.describe()}: blob '{blob_id}' does not exist")
        if isinstance(error, (ServiceRequestError, ServiceResponseError, OSError)):
            return BlobStoreRetriableError(message)
        if isinstance(error, HttpResponseError) and (
            (error.status_code or 0) in (408, 429) or (error.status_code or 0) >= 500
        ):
            return BlobStoreRetriableError(message)
        return BlobStoreError(message)

    def create(self) -> None:
        from azure.core.exceptions import ResourceExistsError

        try:
            self._container.create_container()
        except ResourceExistsError:
            pass
        except Exception as error:
            raise self._fail("create the container for", "", error) from None

    def put(self, name: str, source: BinaryIO, size: int) -> str:
        try:
            self._container.upload_blob(name, source, length=size, overwrite=True, max_concurrency=4)
        except Exception as error:
            raise self._fail("write", name, error) from None
        return name

    def get(self, blob_id: str, sink: BinaryIO) -> None:
        try:
            seekable = getattr(sink, "seekable", lambda: False)()
            downloader = self._container.download_blob(blob_id, max_concurrency=4 if seekable else 1)
            if seekable:
                downloader.readinto(sink)
            else:  # a checksumming stream: the chunks arrive in order
                for chunk in downloader.chunks():
                    sink.write(chunk)
        except Exception as error:
            raise self._fail("read", blob_id, error) from None

    def delete(self, blob_id: str) -> None:
        try:
            self._container.delete_blob(blob_id)
        except Exception as error:
            failure = self._fail("delete", blob_id, error)
            if not isinstance(failure, BlobNotFoundError):
                raise failure from None

    def list(self, prefix: str) -> list[str]:
        try:
            return sorted(blob.name for blob in self._container.list_blobs(name_starts_with=prefix))
        except Exception as error:
            raise self._fail("list", prefix + "*", error) from None

    def close(self) -> None:
        self._service.close()


class AzureBlobStoreFactory(BlobStoreFactory):
    """``blob.store.manager.factory=azure``."""

    def get_blob_store(self, config: Settings) -> BlobStore:
        blob = config.view(BlobStoreConfig)
        if not blob.azure_container:
            raise ConfigError(
                "config key 'blob.store.azure.container' is required with blob.store.manager.factory=azure"
            )
        credential: Any = config.get(ACCOUNT_KEY)
        if blob.azure_account_url and credential is None and not config.get(CONNECTION_STRING):
            try:
                from azure.identity import DefaultAzureCredential

                credential = DefaultAzureCredential()
            except ImportError:
                credential = None
        return AzureBlobStore(
            blob.azure_container,
            connection_string=config.get(CONNECTION_STRING),
            account_url=blob.azure_account_url,
            credential=credential,
        )
