"""The driver's endpoint over snapshots in a real metadata store: what is served, and what is left out."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.contracts.metrics import Registry
from millstream.contracts.metrics_snapshot import ContainerSnapshot, write_snapshot
from millstream.coordinator.services import DriverServices
from millstream.errors import ConfigError
from millstream.metrics.server import MetricsServer
from tests.helpers import job_config
from tests.integration.processes import free_port
from tests.metrics.scrape import fetch, scrape, status_json, total

SECRET = "hunter2-very-secret"


@pytest.fixture
def config(tmp_path) -> Settings:
    return job_config(tmp_path, **{"sensitive.token": SECRET, "job.name": "clicks"})


@pytest.fixture
def server(config) -> Iterator[MetricsServer]:
    status = {"job": {"name": "clicks"}, "error": f"failed with token {SECRET}"}
    with (
        DriverServices(config) as services,
        MetricsServer(config, lambda: status, services.store, free_port()) as running,
    ):
        yield running


def _publish(config: Settings, container: str, generation: int, attempt: int, processed: int) -> None:
    registry = Registry({"container": container})
    registry.counter("processed", task=f"Partition {container}", stream="in", partition=container).inc(processed)
    registry.counter(f"user_{SECRET}").inc()  # a secret inside a name must not leak either
    with metadata_store(config) as store:
        write_snapshot(store, ContainerSnapshot(container, generation, attempt, 0, "running", registry.snapshot()))


def test_metrics_serves_the_current_generation_and_attempts_only(config, server) -> None:
    with metadata_store(config) as store:
        coordination.publish_generation(store, 2)
        for container in ("0", "1", "2"):
            coordination.start_container_attempt(store, container)
        coordination.start_container_attempt(store, "1")  # container 1 restarted: attempt 2
    _publish(config, "0", 2, 1, 10)
    _publish(config, "1", 2, 1, 1000)  # the fenced attempt's last record
    _publish(config, "2", 1, 1, 1000)  # a container of the previous generation

    series = scrape(server.port)

    assert total(series, "millstream_processed_total", job="clicks") == 10
    assert total(series, "millstream_processed_total", container="0", stream="in", partition="0") == 10
    _, _, body = fetch(server.port, "/metrics")
    assert SECRET.encode() not in body


def test_status_json_and_the_page_are_served_without_secrets(server) -> None:
    document = status_json(server.port)
    assert document["job"] == {"name": "clicks"}
    assert SECRET not in str(document)

    status, content_type, page = fetch(server.port, "/")
    assert status == 200 and content_type.startswith("text/html")
    assert b"status.json" in page and b"<script>" in page and b"http" not in page.split(b"<script>")[1]

    assert fetch(server.port, "/nothing")[0] == 404


def test_a_port_in_use_is_refused_naming_the_key(config, server) -> None:
    expected = rf"'metrics\.prometheus\.port': cannot serve metrics on .*:{server.port}"
    with pytest.raises(ConfigError, match=expected):
        MetricsServer(config, dict, server._store, server.port)
