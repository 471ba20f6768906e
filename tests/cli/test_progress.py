"""The progress line of ``millstream run`` after a container restart: one line naming the cause, and a bar that
ends at the input's total, since it counts positions, not the messages each attempt saw."""

from __future__ import annotations

from pathlib import Path

import pytest

from millstream import InitableTask, TaskContext
from tests.cli.test_main import SPARK, bounded_input, millstream
from tests.helpers import output_origins
from tests.jobs import PassThrough

PER_PARTITION = 300


class FailsOnceMidway(PassThrough, InitableTask):
    """The first attempt fails at offset 150 of partition 0, after its first commits; later attempts pass."""

    def init(self, context: TaskContext) -> None:
        self.marker = Path(context.config.get("test.marker", ""))

    def process(self, envelope, collector, coordinator):
        if envelope.ssp.partition == 0 and envelope.offset == "150" and not self.marker.exists():
            self.marker.touch()
            raise ValueError("transient trouble at offset 150")
        super().process(envelope, collector, coordinator)


@pytest.mark.spark
def test_a_restarted_container_prints_one_line_with_its_cause_and_the_bar_still_ends_at_the_total(tmp_path):
    values = {
        "task.class": f"{__name__}:FailsOnceMidway",
        "test.marker": str(tmp_path / "failed-once"),
        "task.commit.ms": 20,
        "job.container.retry.count": 2,
        "metrics.enabled": "true",
        "metrics.snapshot.interval.ms": 200,
        **SPARK,
    }
    path, config, written = bounded_input(tmp_path, values, partitions=2, per_partition=PER_PARTITION)
    result = millstream("run", path)
    assert result.returncode == 0, result.stderr
    restarts = [line for line in result.stderr.splitlines() if " restarted (attempt " in line]
    assert len(restarts) == 1, result.stderr
    assert restarts[0].startswith("container 0 restarted (attempt 2): attempt 1 failed: ")
    assert "transient trouble at offset 150" in restarts[0]
    progress = [line for line in result.stderr.splitlines() if line.startswith("job cli-test ")]
    assert len(progress) == 1 and f"{2 * PER_PARTITION}/{2 * PER_PARTITION} messages" in progress[0], result.stderr
    assert set(output_origins(config)) == written
