"""Issue 38 item 3, past the deadline: a network cut longer than ``systems.<s>.outage.timeout.ms`` fails the call
loudly, the error naming the call, the brokers and the deadline key (shorter cuts are ridden out: see
``test_spark_network_ride_out``)."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from millstream.composition.metadata import metadata_store
from millstream.connectors.kafka.admin import KafkaSystemAdmin
from millstream.connectors.kafka.config import KafkaClientSettings
from millstream.connectors.kafka.errors import KafkaProduceError, KafkaSystemError
from millstream.contracts import coordination
from millstream.contracts.systems import WriterToken
from millstream.model import OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from millstream.runtime.services import ContainerServices
from tests.integration.conftest import ProxiedKafka
from tests.integration.kafka.helpers import create_topic, kafka_config

pytestmark = pytest.mark.integration

DEADLINE_MS = 3000
REQUEST_TIMEOUT_MS = 1000


def deadline_config(kafka: ProxiedKafka, tmp_path: Path):
    return kafka_config(
        kafka.bootstrap_servers,
        job__name=f"deadline-{uuid.uuid4().hex[:8]}",
        job__data__dir=str(tmp_path),
        metadata__store__factory="sqlite",
        systems__kafka__operation__timeout__ms=REQUEST_TIMEOUT_MS,
        systems__kafka__outage__timeout__ms=DEADLINE_MS,
    )


def names_the_brokers_and_the_deadline(message: str, kafka: ProxiedKafka) -> bool:
    return kafka.bootstrap_servers in message and "systems.kafka.outage.timeout.ms" in message


def test_reading_end_offsets_past_the_deadline_fails_naming_the_call_the_brokers_and_the_key(
    kafka_proxy: ProxiedKafka, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    changelog = topic_name("changelog")
    create_topic(kafka_proxy.bootstrap_servers, changelog, 1)
    config = deadline_config(kafka_proxy, tmp_path)
    admin = KafkaSystemAdmin("kafka", KafkaClientSettings(config, "kafka"), config=config)
    admin.start()
    ssp = SystemStreamPartition("kafka", changelog, 0)
    try:
        with kafka_proxy.proxy.cut(), pytest.raises(KafkaSystemError) as failed:
            admin.get_written_ssp_metadata([ssp])
        message = str(failed.value)
        assert re.search(f"reading (metadata of topic '{changelog}'|end offsets|oldest offsets)", message), message
        assert names_the_brokers_and_the_deadline(message, kafka_proxy), message
        assert admin.get_written_ssp_metadata([ssp])[ssp].upcoming_offset == "0", "healed, the same admin answers"
    finally:
        admin.stop()


@pytest.mark.parametrize("producer", ["output", "state"])
def test_a_flush_past_the_deadline_fails_naming_the_call_and_the_brokers(
    kafka_proxy: ProxiedKafka, topic_name: Callable[[str], str], tmp_path: Path, producer: str
) -> None:
    """The output producer's flush (deliveries) and the state producer's (its transaction's commit)."""
    topic = topic_name("out")
    create_topic(kafka_proxy.bootstrap_servers, topic, 1)
    config = deadline_config(kafka_proxy, tmp_path)
    store = metadata_store(config)
    store.init()
    coordination.publish_generation(store, 1)
    epoch = coordination.start_container_attempt(store, "0")
    services = ContainerServices(config, writer=WriterToken(config.job.job_key, "0", 1, epoch))
    pool = services.producers
    try:
        chosen = pool.producer("kafka") if producer == "output" else pool.state_producer("kafka")
        chosen.send("task", OutgoingMessageEnvelope(SystemStream("kafka", topic), b"v", b"k", partition=0))
        pool.flush("task")
        with kafka_proxy.proxy.cut(), pytest.raises(KafkaProduceError) as failed:
            chosen.send("task", OutgoingMessageEnvelope(SystemStream("kafka", topic), b"v", b"k", partition=0))
            pool.flush("task")
        message = str(failed.value)
        call = "flushing failed" if producer == "output" else "committing the transaction"
        assert call in message and names_the_brokers_and_the_deadline(message, kafka_proxy), message
    finally:
        kafka_proxy.proxy.heal()
        try:
            services.close()
        finally:
            store.close()


def test_a_client_created_during_an_outage_of_brokers_this_process_reached_waits_for_them(
    kafka_proxy: ProxiedKafka, tmp_path: Path
) -> None:
    """What failed a container in the ride-out test: its changelog admin, created at its first commit while the
    network was cut, gave up after startup.timeout.ms. Brokers reached before are waited for (the deadline)."""
    config = deadline_config(kafka_proxy, tmp_path).with_overrides(
        {"systems.kafka.startup.timeout.ms": "500", "systems.kafka.outage.timeout.ms": "60000"}
    )
    first = KafkaSystemAdmin("kafka", KafkaClientSettings(config, "kafka"), config=config)
    first.start()  # this process has reached the brokers
    started: dict[str, BaseException | None] = {}

    def start_another() -> None:
        try:
            KafkaSystemAdmin("kafka", KafkaClientSettings(config, "kafka"), config=config).start()
            started["error"] = None
        except BaseException as error:
            started["error"] = error

    thread = threading.Thread(target=start_another)
    with kafka_proxy.proxy.cut():
        thread.start()
        time.sleep(2.0)  # the fault itself: four startup timeouts without a broker
    thread.join(60)
    assert started == {"error": None}
