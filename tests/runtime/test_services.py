"""A container opens each of its services once: one admin per system, the documented metadata-store
connections (``runtime.services.STORE_PURPOSES``), and every producer under its attempt's writer token.

Counted through our own seams (``systems.<s>.samza.factory`` and ``metadata.store.factory``) around a real
container run: two inputs, a store with a changelog, and metrics shipped to a stream."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from millstream.config.settings import Settings
from millstream.contracts.systems import WriterToken
from millstream.coordinator.job_coordinator import JobCoordinator
from millstream.coordinator.prepare import prepare
from millstream.embedded.sqlite import SqliteMetadataStoreFactory
from millstream.model import SystemStream
from millstream.runtime.container import Container
from millstream.runtime.services import STORE_PURPOSES, ContainerServices
from millstream.testing import write_stream
from tests.helpers import create_stream, seal
from tests.runtime import counting
from tests.runtime.counting import CountingLogFactory, CountingSqliteFactory
from tests.storage.harness import state_config


def counted_job(tmp_path: Path, **extra: Any) -> Settings:
    """Two inputs, a store with a changelog, metrics shipped to a stream; admins and connections counted."""
    config = prepare(
        state_config(
            tmp_path,
            "changelog",
            task__inputs="log.in,log.more",
            systems__log__samza__factory="tests.runtime.counting:CountingLogFactory",
            metadata__store__factory="tests.runtime.counting:CountingSqliteFactory",
            metrics__reporters="log,snapshot",
            metrics__reporter__snapshot__stream="log.metrics",
            **extra,
        )
    )
    for stream in ("in", "more", "out", "metrics"):
        create_stream(config, stream, 1)
    write_stream(config, SystemStream("log", "in"), [(f"k{i}", i) for i in range(20)], partition=0)
    write_stream(config, SystemStream("log", "more"), [(f"k{i}", i) for i in range(10)], partition=0)
    seal(config, "in")
    seal(config, "more")
    return config


def test_a_container_opens_one_admin_per_system_the_documented_store_connections_and_writes_only_as_its_attempt(
    tmp_path: Path,
) -> None:
    config = counted_job(tmp_path)
    with SqliteMetadataStoreFactory().get_metadata_store(config) as store:
        model = JobCoordinator(config, store).start()
    counting.reset()

    result = Container(config, model, "0").run()

    assert result.outcome == "finished" and result.messages == 30
    assert CountingLogFactory.admins == Counter({"log": 1}), "one admin for the inputs, the changelog and the lag"
    # the container's thread (the heartbeat beats through it) and the metrics snapshot thread; no adjunct stores
    assert CountingSqliteFactory.opened == len(STORE_PURPOSES) - 1 == 2
    assert len(CountingLogFactory.producers) >= 3, "output, changelog and the metrics stream"
    writers = {getattr(producer, "_writer", None) for producer in CountingLogFactory.producers}
    assert None not in writers, "a producer wrote without the container's writer token"
    attempt = (config.job.job_key, "0", model.generation, result.epoch)
    assert {(w.job, w.container_id, w.generation, w.epoch) for w in writers if w is not None} == {attempt}


def test_a_container_and_its_services_read_the_views_of_the_settings_they_are_given(tmp_path: Path) -> None:
    config = counted_job(tmp_path)
    with SqliteMetadataStoreFactory().get_metadata_store(config) as store:
        model = JobCoordinator(config, store).start()
    container = Container(config, model, "0")
    assert container.task_config is config.task, "the container parsed task.* again instead of reading its settings"
    with ContainerServices(config, "0") as services:
        assert services.config is config, "the services rebuilt the settings they were given"


def test_services_refuse_a_metadata_store_connection_for_an_undeclared_purpose(tmp_path: Path) -> None:
    with ContainerServices(state_config(tmp_path, "changelog")) as services, pytest.raises(Exception, match="one of"):
        services.metadata_store("somewhere")


def test_producers_built_before_the_attempt_is_known_refuse_to_take_it_over(tmp_path: Path) -> None:
    config = state_config(tmp_path, "changelog")
    create_stream(config, "out", 1)
    with ContainerServices(config) as services:
        services.producers.producer("log")
        with pytest.raises(Exception, match="before its attempt"):
            services.start_attempt(WriterToken("job", "0", 1, 1))
