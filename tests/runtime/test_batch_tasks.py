"""``BatchStreamTask``: a task that takes a partition's batch whole and sends with ``send_batch`` copies
every message once, in order; its batch is the unit of the process-error policy; a commit it asks for covers
the batch, so a restart reads on after it."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from millstream import BatchStreamTask
from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.coordinator.prepare import prepare
from millstream.model import SystemStream
from millstream.runtime.task_instance import TaskInstance
from millstream.testing import InProcessRunner, read_stream
from tests.helpers import create_stream, fill, job_config, output_origins, seal
from tests.runtime.fakes import DiscardingCollector
from tests.runtime.test_task_commit import SSP, Events, FakeCheckpoints, envelope, make_task

BATCH_TASK = "tests.jobs:BatchPassThrough"


def batch_job(tmp_path: Path, per_partition: int = 10, **extra: Any) -> tuple[Settings, set[tuple[int, int]]]:
    config = prepare(job_config(tmp_path, task=BATCH_TASK, **extra))
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    written = fill(config, "in", 2, per_partition)
    seal(config, "in")
    return config, written


def test_a_batch_task_copies_every_message_once_in_order_with_its_key(tmp_path):
    config, written = batch_job(tmp_path, per_partition=3000)
    result = InProcessRunner(config).run(timeout=120)
    assert result.outcome == "finished", result.error
    origins = output_origins(config)
    assert sorted(origins) == sorted(written)
    for partition in (0, 1):
        assert [v for p, v in origins if p == partition] == list(range(3000)), "a partition's order is kept"
    keys = {
        value["p"]: key for pairs in read_stream(config, SystemStream("log", "out")).values() for key, value in pairs
    }
    assert keys == {0: "k0", 1: "k1"}


def test_a_raising_batch_fails_naming_the_partition_and_the_batchs_offsets(tmp_path):
    config, _ = batch_job(tmp_path, test__fail__values="3")
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "failed"
    error = result.error or ""
    found = re.search(
        r"task 'Partition (\d)' failed processing the batch of offsets (\d+)\.\.(\d+) of stream 'log\.in' "
        r"partition \1: ValueError: cannot handle 3",
        error,
    )
    assert found, error
    assert int(found[2]) <= 3 <= int(found[3]), "the batch named holds the message at fault"


def test_skip_goes_past_every_message_of_a_raising_batch_and_counts_them(tmp_path):
    config, written = batch_job(tmp_path, task__process__errors="skip", test__fail__values="3")
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished", result.error
    origins = set(output_origins(config))
    assert origins < written and {(0, 3), (1, 3)}.isdisjoint(origins)
    skipped = sum(container.skipped_process_errors for container in result.containers)
    assert skipped == len(written) - len(origins), "every message of the failed batches, and only those"


class CommitsAfterEachBatch(BatchStreamTask):
    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def process_batch(self, envelopes, collector, coordinator):
        self.batches.append([envelope.offset for envelope in envelopes])
        coordinator.commit()


def batch_instance(task: BatchStreamTask) -> tuple[TaskInstance, FakeCheckpoints]:
    return make_task(Events(), None, task=task)


def test_a_batch_is_taken_whole_past_the_deadline_and_a_commit_it_asks_for_covers_all_of_it():
    task = CommitsAfterEachBatch()
    instance, checkpoints = batch_instance(task)
    consumed = instance.process(SSP, [envelope(0), envelope(1), envelope(2)], deadline=float("-inf"))
    assert consumed == 3 and task.batches == [["0", "1", "2"]]
    assert checkpoints.written, "the commit the task asked for was made"
    assert all(dict(checkpoint.offsets) == {SSP: "2"} for checkpoint in checkpoints.written)


def test_a_batch_task_given_one_message_sees_a_batch_of_one():
    task = CommitsAfterEachBatch()
    commits: list[str] = []
    task.process(envelope(7), DiscardingCollector(), SimpleNamespace(commit=lambda: commits.append("asked")))
    assert task.batches == [["7"]] and commits == ["asked"]


def test_a_job_whose_batch_task_commits_after_each_batch_finishes_exactly(tmp_path):
    config, written = batch_job(tmp_path, per_partition=50, test__commit__each="true", task__commit__ms="600000")
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished", result.error
    with metadata_store(config) as store:
        checkpoints = checkpoint_manager(config, store).read_all()
    offsets = {
        ssp.partition: offset for checkpoint in checkpoints.values() for ssp, offset in checkpoint.offsets.items()
    }
    assert offsets == {0: "49", 1: "49"}
    assert sorted(output_origins(config)) == sorted(written)
