"""Final commits made as a group, end to end: a ``partition_by`` -> window job whose containers run several
downstream tasks each, all reaching end-of-stream at about the same time, gives exact windows, and every task's
last checkpoint names the end of every partition it read."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.composition.systems import system_factory
from millstream.config.settings import Settings
from millstream.control.framing import MessageType, unframe
from millstream.coordinator.job_result import JobResult
from millstream.model import SystemStream, SystemStreamPartition, TaskName
from millstream.testing import InProcessRunner, iter_stream, read_stream, write_stream
from tests.api.apps import app_config, messages, reference_counts
from tests.helpers import create_stream, seal

IN = SystemStream("log", "in")
SOURCES = 3
INTERMEDIATE = 8
"""Downstream partitions: 8 tasks over 2 containers, 4 of them ending together in each."""
INTERMEDIATE_STREAM = "test-1-by-user"
STREAMS = ("in", INTERMEDIATE_STREAM)


def grouped_job(tmp_path: Any, **extra: Any) -> tuple[Settings, dict[int, list]]:
    config = app_config(
        tmp_path,
        "tests.api.apps:WindowedCount",
        job__container__count=2,
        app__intermediate__partitions=INTERMEDIATE,
        task__commit__ms=60_000,  # no timer commit: the final commits are the ones made as groups
        **extra,
    )
    data = {p: messages(p, 40, users=16) for p in range(SOURCES)}
    create_stream(config, "in", SOURCES)
    create_stream(config, "out", 1)
    for partition, pairs in data.items():
        write_stream(config, IN, pairs, partition=partition)
    seal(config, "in")
    return config, data


def assert_exact_windows(config: Settings, data: dict[int, list]) -> None:
    records = [value for pairs in read_stream(config, SystemStream("log", "out")).values() for _, value in pairs]
    panes = [record for record in records if "count" in record]
    assert {(p["user"], p["start"]): p["count"] for p in panes} == reference_counts(data)
    assert len(panes) == len(reference_counts(data)), "every pane exactly once"


def assert_every_task_checkpointed_the_end_of_its_partitions(config: Settings, result: JobResult) -> None:
    """Each task's last checkpoint covers every record of its partitions that matters: a source partition's last
    message, and an intermediate partition's every user message and end-of-stream. All an intermediate partition
    may hold past it is a combined watermark a container sent for producers that had ended (``control.combining``
    names finished tasks too), which the ended consumer never needs."""
    tasks = sorted({task for container in result.containers for task in container.processed})
    assert len(tasks) == max(SOURCES, INTERMEDIATE)
    checkpointed = {}
    with metadata_store(config) as store:
        reader = checkpoint_manager(config, store, None)
        reader.start()
        try:
            for task in tasks:
                last = reader.read_last_checkpoint(TaskName(task))
                assert last is not None, f"{task} has no final checkpoint"
                offsets = last.offsets.items()
                checkpointed.update({s: int(o) for s, o in offsets if s.stream in STREAMS and o is not None})
        finally:
            reader.stop()
    admin = system_factory(config, "log").get_admin("log", config)
    admin.start()
    try:
        ends = admin.get_ssp_metadata(set(checkpointed))
    finally:
        admin.stop()
    assert {ssp.stream for ssp in checkpointed} == set(STREAMS)
    for ssp, offset in checkpointed.items():
        if ssp.stream == "in":
            assert offset == int(ends[ssp].upcoming_offset) - 1, (ssp, offset, ends[ssp])
    for partition, records in iter_stream(config, SystemStream("log", INTERMEDIATE_STREAM), idle_timeout=0.5):
        ssp = SystemStreamPartition("log", INTERMEDIATE_STREAM, partition)
        past = [unframe(r.message)[0] for r in records if int(r.offset) > checkpointed[ssp]]  # read ones are purged
        assert set(past) <= {MessageType.COMBINED_WATERMARK, MessageType.WATERMARK}, (ssp, checkpointed[ssp], past)


@pytest.mark.parametrize("aggregation", ["false", "true"])
def test_tasks_ending_together_are_committed_as_groups_with_exact_windows_and_final_checkpoints(
    tmp_path, caplog, aggregation
):
    config, data = grouped_job(tmp_path, app__control__aggregation=aggregation)
    caplog.set_level(logging.DEBUG, logger="millstream.runtime.run_loop")
    result = InProcessRunner(config).run(timeout=120)
    assert result.outcome == "finished", result.error
    assert_exact_windows(config, data)
    assert_every_task_checkpointed_the_end_of_its_partitions(config, result)
    groups = [
        int(found[1])
        for record in caplog.records
        if (found := re.match(r"final commits of (\d+) task", record.getMessage()))
    ]
    assert sum(groups) >= INTERMEDIATE, "every task's final commit was made by its run loop"
    assert max(groups) > 1, f"tasks ending together are committed together: {groups}"
