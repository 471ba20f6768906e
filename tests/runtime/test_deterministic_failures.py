"""A failure of user code that repeats at the same offset is deterministic: the job fails with it instead
of retrying (``job.container.failure.repeat.limit``). The attempts are made here as Spark would retry them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.contracts.metadata import MetadataStore
from millstream.coordinator.job_coordinator import JobCoordinator
from millstream.coordinator.prepare import prepare
from millstream.job_model import JobModel
from millstream.runtime.container import Container
from millstream.runtime.process_errors import TaskCallbackError, TaskProcessError
from millstream.testing import InProcessRunner
from tests.helpers import create_stream, fill, job_config, output_origins, seal

FAILING = "tests.jobs:FailingOnSome"


def single_partition_job(tmp_path: Path, **extra: Any) -> Settings:
    config = prepare(job_config(tmp_path, task=FAILING, **{"test__fail__values": "3", **extra}))
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    fill(config, "in", 1, 10)
    seal(config, "in")
    return config


def published(config: Settings, store: MetadataStore) -> JobModel:
    return JobCoordinator(config, store).start()


def test_the_second_identical_failure_is_deterministic_and_later_attempts_do_not_start(tmp_path):
    config = single_partition_job(tmp_path)
    store = metadata_store(config)
    model = published(config, store)
    for _ in range(2):
        with pytest.raises(TaskProcessError, match=r"failed processing offset 3 of stream 'log\.in' partition 0"):
            Container(config, model, "0", store=store).run()
    failure = coordination.deterministic_failure(store, model.generation) or ""
    assert failure.startswith("millstream.runtime.process_errors.TaskProcessError: task 'Partition 0' failed")
    assert failure.endswith("ValueError: cannot handle 3")
    retry = Container(config, model, "0", store=store).run()
    assert retry.outcome == "failed" and retry.processed == {}
    assert coordination.container_epoch(store, "0") == 2
    record = coordination.container_failures(store)["0"]
    assert (record["task"], record["stream"], record["partition"], record["offset"], record["count"]) == (
        "Partition 0", "log.in", 0, "3", 2,
    )  # fmt: skip


def test_a_single_failure_is_not_deterministic(tmp_path):
    config = single_partition_job(tmp_path)
    store = metadata_store(config)
    model = published(config, store)
    with pytest.raises(TaskProcessError):
        Container(config, model, "0", store=store).run()
    assert coordination.deterministic_failure(store, model.generation) is None
    assert coordination.container_failures(store)["0"]["count"] == 1


def test_repeat_limit_0_never_finds_a_failure_deterministic(tmp_path):
    config = single_partition_job(tmp_path, job__container__failure__repeat__limit=0)
    store = metadata_store(config)
    model = published(config, store)
    for _ in range(3):
        with pytest.raises(TaskProcessError):
            Container(config, model, "0", store=store).run()
    assert coordination.deterministic_failure(store, model.generation) is None
    assert coordination.container_epoch(store, "0") == 3


def test_repeat_limit_1_makes_the_first_failure_fail_the_job(tmp_path):
    config = single_partition_job(tmp_path, job__container__failure__repeat__limit=1)
    store = metadata_store(config)
    model = published(config, store)
    with pytest.raises(TaskProcessError):
        Container(config, model, "0", store=store).run()
    assert coordination.deterministic_failure(store, model.generation) is not None


def test_a_repeating_window_failure_is_deterministic_too(tmp_path):
    config = single_partition_job(
        tmp_path,
        test__fail__values="",
        test__fail__window="true",
        task__window__ms=10,
        test__delay__seconds=0.01,
    )
    store = metadata_store(config)
    model = published(config, store)
    for _ in range(2):
        with pytest.raises(TaskCallbackError, match="window broke"):
            Container(config, model, "0", store=store).run()
    assert "RuntimeError: window broke" in (coordination.deterministic_failure(store, model.generation) or "")


def test_a_new_generation_with_fixed_code_processes_past_the_offset_that_failed(tmp_path):
    config = single_partition_job(tmp_path)
    store = metadata_store(config)
    model = published(config, store)
    for _ in range(2):
        with pytest.raises(TaskProcessError):
            Container(config, model, "0", store=store).run()
    fixed = config.with_overrides({"test.fail.values": ""})
    result = InProcessRunner(fixed).run(timeout=60)
    assert result.outcome == "finished", result.error
    assert {value for _, value in output_origins(config)} == set(range(10))
    assert coordination.container_failures(store) == {}


def test_in_process_a_failure_ends_the_job_with_the_message_naming_where(tmp_path):
    result = InProcessRunner(single_partition_job(tmp_path)).run(timeout=60)
    assert result.outcome == "failed"
    assert re.search(
        r"task 'Partition 0' failed processing offset 3 of stream 'log\.in' partition 0: ", result.error or ""
    )
