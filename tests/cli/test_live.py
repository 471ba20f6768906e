"""``millstream job status --watch``: the view rendered from the status document of a real in-process run."""

from __future__ import annotations

import copy
from typing import Any

from rich.console import Console

from millstream.cli.live import LiveView
from millstream.config.settings import Settings
from millstream.coordinator.status_document import status_document
from millstream.testing import InProcessRunner
from tests.cli.test_main import table_rows
from tests.helpers import create_stream, fill, job_config, seal


def _ran(tmp_path, **extra: Any) -> dict[str, Any]:
    """The status document after a bounded two-container job over two partitions of 40 messages."""
    config = Settings.of(job_config(tmp_path, task="tests.jobs:MeteredPassThrough", job__container__count=2, **extra))
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    fill(config, "in", 2, 40)
    seal(config, "in")
    assert InProcessRunner(config).run(timeout=60).outcome == "finished"
    return status_document(config)


def _text(view: LiveView, document: dict[str, Any]) -> str:
    console = Console(record=True, width=200)
    console.print(view.render(document))
    return console.export_text()


def _section(text: str, title: str, following: str | None = None) -> list[list[str]]:
    """The rows of the table titled ``title`` (up to the one titled ``following``)."""
    lines = [line.rstrip() for line in text.splitlines()]
    start = lines.index(title)
    end = lines.index(following) if following else len(lines)
    return table_rows("\n".join(lines[start:end]))


def test_the_watch_view_shows_each_container_task_and_partition_with_its_figures(tmp_path) -> None:
    document = _ran(tmp_path, metrics__enabled="true", metrics__snapshot__interval__ms=100)
    clock = iter([10.0, 12.0])
    view = LiveView(clock=lambda: next(clock))
    earlier = copy.deepcopy(document)
    earlier["containers"]["0"]["tasks"]["Partition 0"]["processed"] = 20  # 20 more in the 2 s until the next
    _text(view, earlier)
    text = _text(view, document)

    assert "job test generation 1: 2 container(s), 2 task(s)" in text
    containers = _section(text, "containers", "tasks")
    assert [row[:3] + row[4:] for row in containers] == [
        ["0", "finished", "1", "40", "10"],
        ["1", "finished", "1", "40", "0"],
    ]
    assert "pid" in containers[0][3]  # in process: host and pid, where Spark shows its task
    tasks = _section(text, "tasks", "partitions")
    assert [row[:6] for row in tasks] == [
        ["0", "Partition 0", "40", "10", "0", "1"],
        ["1", "Partition 1", "40", "0", "0", "1"],
    ]
    assert all(row[6].endswith("s") and row[7].endswith("s") for row in tasks)  # commit mean and max
    partitions = _section(text, "partitions")
    assert partitions == [
        ["Partition 0", "log.in.0", "39", "40", "40", "0", "0"],
        ["Partition 1", "log.in.1", "39", "40", "40", "0", "0"],
    ]
    assert "failed" not in text


def test_with_metrics_off_the_watch_view_shows_checkpoints_and_dashes_for_live_figures(tmp_path) -> None:
    text = _text(LiveView(), _ran(tmp_path))

    containers = _section(text, "containers", "tasks")
    assert [row[:3] + row[4:] for row in containers] == [
        ["0", "finished", "1", "-", "-"],
        ["1", "finished", "1", "-", "-"],
    ]
    partitions = _section(text, "partitions")
    assert [row[:4] + row[5:] for row in partitions] == [
        ["Partition 0", "log.in.0", "39", "40", "-", "0"],
        ["Partition 1", "log.in.1", "39", "40", "-", "0"],
    ]


def test_the_watch_view_shows_start_up_progress_watermarks_and_failures_when_the_document_has_them() -> None:
    document = {
        "job": {"name": "clicks", "id": "1"},
        "generation": 4,
        "model": {"generation": 4, "containers": {"0": {"tasks": {"Partition 0": ["log.in.0"]}}}},
        "containers": {
            "0": {
                "state": "failed",
                "attempt": 2,
                "error": "TaskProcessError: boom at log.in.0 offset 17",
                "executor": {"task_attempt_id": 9, "partition": 0, "spark_attempt": 1},
                "pid": 42,
                "tasks": {"Partition 0": {"processed": 17, "lag": 3, "commits": 2}},
                "progress": [{"name": "store_restore_bytes", "labels": {"store": "counts"}, "value": 1200.0}],
                "failures": {"dead_lettered": 2.0, "process_errors_skipped": 0.0},
            }
        },
        "partitions": [],
        "startpoints": {"pending": [], "failures": {"Partition 0": {"log.in.0": "offset 99 is past the end"}}},
        "watermarks": [{"container": "0", "name": "watermark", "labels": {"partition": "0"}, "value": 5000.0}],
    }
    text = _text(LiveView(), document)

    assert "job clicks generation 4: 1 container(s), 1 task(s)" in text
    assert _section(text, "containers", "tasks")[0][:4] == [
        "0",
        "failed",
        "2",
        "Spark task 9 (partition 0, attempt 1) pid 42",
    ]
    assert _section(text, "restore and bootstrap", "watermarks") == [
        ["0", "store_restore_bytes", "store=counts", "1,200"]
    ]
    assert _section(text, "watermarks")[0][:4] == ["0", "watermark", "partition=0", "5000"]
    assert "container 0 failed: TaskProcessError: boom at log.in.0 offset 17" in text
    assert "container 0: dead lettered: 2" in text and "process errors skipped" not in text
    assert "startpoint of Partition 0 log.in.0 could not be applied: offset 99 is past the end" in text
