from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.spark.connect_server import ConnectServer

pytestmark = pytest.mark.spark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """One Spark Connect server for the whole run, started only when a test through Connect asks for it."""
    server = ConnectServer(tmp_path_factory.mktemp("connect")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark_connect(connect_server: ConnectServer) -> Iterator[SparkSession]:
    """A Spark Connect client session on the test server, millstream's formats registered."""
    from millstream.spark.run.connect import remote_session

    session = remote_session(connect_server.url)
    try:
        yield session
    finally:
        session.stop()
