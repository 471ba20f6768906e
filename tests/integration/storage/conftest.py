"""Blob store emulators for the state tests, one each per test session, started only when asked for.

Set ``MILLSTREAM_TEST_S3_ENDPOINT`` (an S3 API endpoint with credentials in the environment) or
``MILLSTREAM_TEST_AZURE_CONNECTION_STRING`` to run against servers of your own instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.integration.blob_emulators import AzuriteBlobServer, MotoS3Server


@dataclass(frozen=True)
class BlobTarget:
    """How a job reaches one blob store: the config keys, and a fresh bucket or container per test."""

    kind: str
    settings: dict[str, str]

    def config(self, bucket: str) -> dict[str, Any]:
        key = "blob__store__s3__bucket" if self.kind == "s3" else "blob__store__azure__container"
        return {"blob__store__manager__factory": self.kind, key: bucket, **self.settings}


@pytest.fixture(scope="session")
def s3_target(request: pytest.FixtureRequest) -> BlobTarget:
    external = os.environ.get("MILLSTREAM_TEST_S3_ENDPOINT")
    if external:
        return BlobTarget("s3", {"blob__store__s3__endpoint__url": external})
    target: BlobTarget = request.getfixturevalue("moto_s3_target")
    return target


@pytest.fixture(scope="session")
def moto_s3_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BlobTarget]:
    """The session's own S3 emulator on loopback, even when ``MILLSTREAM_TEST_S3_ENDPOINT`` names another:
    the network-fault tests put a proxy in front of it, and a proxy forwards to loopback only."""
    server = MotoS3Server(tmp_path_factory.mktemp("moto")).start()
    try:
        yield BlobTarget(
            "s3",
            {
                "blob__store__s3__endpoint__url": server.endpoint_url,
                "sensitive__blob__store__s3__access__key__id": "testing",
                "sensitive__blob__store__s3__secret__access__key": "testing",
            },
        )
    finally:
        server.stop()


@pytest.fixture(scope="session")
def azure_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BlobTarget]:
    external = os.environ.get("MILLSTREAM_TEST_AZURE_CONNECTION_STRING")
    if external:
        yield BlobTarget("azure", {"sensitive__blob__store__azure__connection__string": external})
        return
    server = AzuriteBlobServer(tmp_path_factory.mktemp("azurite")).start()
    try:
        yield BlobTarget("azure", {"sensitive__blob__store__azure__connection__string": server.connection_string})
    finally:
        server.stop()


@pytest.fixture(params=["s3", "azure"])
def blob_target(request: pytest.FixtureRequest) -> BlobTarget:
    return request.getfixturevalue(f"{request.param}_target")


@pytest.fixture
def bucket_name() -> Callable[[], str]:
    return lambda: f"millstream-{uuid.uuid4().hex[:12]}"
