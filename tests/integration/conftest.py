"""Real servers for the integration tests, one per test session, started only when a test asks.

``kafka_broker``: a KRaft Apache Kafka broker from Maven Central's JARs (see ``kafka_broker.py``).
Set ``MILLSTREAM_TEST_KAFKA=host:port`` to run the tests against a broker of your own instead; the
tests that restart the broker are skipped then.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.integration.kafka_broker import KafkaBroker
from tests.integration.network import BlackHoleProxy
from tests.integration.processes import free_port
from tests.integration.schema_registry import SchemaRegistryServer


class ExternalBroker:
    """A broker the test session did not start: usable, but not restartable."""

    stopped_at: float | None = None

    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap_servers = bootstrap_servers

    def restart(self, down_seconds: float = 0.0, timeout: float = 120.0) -> None:
        pytest.skip("MILLSTREAM_TEST_KAFKA names an external broker, which the tests cannot restart")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker | ExternalBroker]:
    external = os.environ.get("MILLSTREAM_TEST_KAFKA")
    if external:
        yield ExternalBroker(external)
        return
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-broker")).start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def bootstrap(kafka_broker: KafkaBroker | ExternalBroker) -> str:
    return kafka_broker.bootstrap_servers


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Unique topic names for this test: ``topic_name("in")`` → ``t-<test>-in-<random>``."""
    test = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]

    def make(suffix: str = "t") -> str:
        return f"t-{test}-{suffix}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture(scope="session")
def schema_registry() -> Iterator[SchemaRegistryServer]:
    """A Confluent-compatible schema registry (see ``schema_registry.py`` for why it is a stand-in)."""
    server = SchemaRegistryServer().start()
    try:
        yield server
    finally:
        server.stop()


class ProxiedKafka:
    """A broker of the session's own whose clients all go through a :class:`BlackHoleProxy`: the broker
    advertises the proxy's port, so every connection (bootstrap and per-broker) can be black-holed."""

    def __init__(self, broker: KafkaBroker, proxy: BlackHoleProxy) -> None:
        self.broker = broker
        self.proxy = proxy

    @property
    def bootstrap_servers(self) -> str:
        return self.proxy.address


@pytest.fixture(scope="session")
def proxied_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxiedKafka]:
    """A second broker behind a black-hole proxy, for network-fault tests; use it through ``kafka_proxy``. It is
    the session's own even when ``MILLSTREAM_TEST_KAFKA`` names an external broker: it must advertise the proxy's
    port, and the proxy forwards to loopback only."""
    proxy_port = free_port()
    advertised = {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}"}
    broker = KafkaBroker(tmp_path_factory.mktemp("proxied-kafka"), settings=advertised)
    proxy = BlackHoleProxy(broker.port, proxy_port).start()  # before the broker: it advertises the proxy
    try:
        broker.start()
        yield ProxiedKafka(broker, proxy)
    finally:
        proxy.heal()
        broker.stop()
        proxy.stop()


@pytest.fixture
def kafka_proxy(proxied_kafka: ProxiedKafka) -> Iterator[ProxiedKafka]:
    """``proxied_kafka``, healed after the test whatever it left black-holed."""
    try:
        yield proxied_kafka
    finally:
        proxied_kafka.proxy.heal()
