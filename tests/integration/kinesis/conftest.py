"""kinesalite for the Kinesis tests: one emulator per test session, started only when a test asks.

Set ``MILLSTREAM_TEST_KINESIS=http://host:port`` to run the tests against an emulator of your own.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.integration.kinesis.emulator import Kinesalite


@pytest.fixture(scope="session")
def kinesalite() -> Iterator[Kinesalite | None]:
    """The session's emulator, or ``None`` when ``MILLSTREAM_TEST_KINESIS`` names one of your own."""
    if os.environ.get("MILLSTREAM_TEST_KINESIS"):
        yield None
        return
    with Kinesalite() as emulator:
        yield emulator


@pytest.fixture
def kinesis_endpoint(kinesalite: Kinesalite | None) -> Iterator[str]:
    """The emulator's endpoint for one test. A test during which the emulator died fails at teardown with the
    emulator's exit status and last output; the next test gets a new emulator, so one death fails one test."""
    if kinesalite is None:
        yield os.environ["MILLSTREAM_TEST_KINESIS"]
        return
    if kinesalite.process is None or kinesalite.process.poll() is not None:
        kinesalite.restart()
    yield kinesalite.endpoint
    kinesalite.check()


@pytest.fixture
def stream_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Unique stream names for this test: ``stream_name("in")`` → ``s-<test>-in-<random>``."""
    test = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]

    def make(suffix: str = "s") -> str:
        return f"s-{test}-{suffix}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture(scope="session")
def dynamodb_endpoint() -> Iterator[str]:
    """moto's server (DynamoDB API, in memory) on 127.0.0.1, for the DynamoDB lease table tests."""
    from moto.server import ThreadedMotoServer

    from tests.integration.processes import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
