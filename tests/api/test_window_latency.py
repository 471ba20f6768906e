"""A window fires as soon as the watermark passes its end, not at the next watermark tick (issue 31 item 4).

``WindowedCount`` (``partition_by`` → 10 s tumbling window) runs with ``app.watermark.interval.ms`` at ten
minutes: no timer tick happens during the test, so only the window-boundary rule (``millstream.control
.boundary``) can move the watermark — without it the window would never close and the wait would fail.
Also run through the Spark runner (``tests/spark/test_window_latency.py``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from millstream.config.settings import Settings
from millstream.control.framing import unframe
from millstream.control.messages import CombinedWatermarkMessage, WatermarkMessage
from millstream.coordinator.job_result import JobResult
from millstream.model import SystemStream
from millstream.testing import InProcessRunner, iter_stream, read_stream, write_stream
from tests.api.apps import WINDOW_MS, app_config
from tests.helpers import create_stream, wait_until

IN = SystemStream("log", "in")
INTERMEDIATE = SystemStream("log", "test-1-by-user")
"""``WindowedCount``'s intermediate stream (``<app.name>-<app.id>-by-user``)."""
PARTITIONS = 2
TEN_MINUTES_MS = 600_000


def prompt_window_app(tmp_path: Path, **extra: Any) -> Settings:
    """Two input and two intermediate partitions, a watermark timer that never ticks and no commit during the
    test (a commit flushes what the aggregate route holds back), the intermediate records kept (to count the
    control records) and the default control pacing (200 ms)."""
    keep = f"systems__log__streams__{INTERMEDIATE.stream}__samza__delete__committed__messages"
    config = app_config(
        tmp_path,
        "tests.api.apps:WindowedCount",
        app__intermediate__partitions=PARTITIONS,
        app__watermark__interval__ms=TEN_MINUTES_MS,
        task__commit__ms=TEN_MINUTES_MS,
        **{keep: "false"},
        **extra,
    )
    create_stream(config, "in", PARTITIONS)
    create_stream(config, "out", 1)
    for partition in range(PARTITIONS):
        # four messages in the first window, then one past its end: the input stays open (no end-of-stream)
        pairs = [(f"k{partition}", {"user": f"u{i % 2}", "n": i, "ts": i * 2_000}) for i in range(4)]
        pairs.append((f"k{partition}", {"user": "u0", "n": 99, "ts": WINDOW_MS + 1_000}))
        write_stream(config, IN, pairs, partition=partition)
    return config


def records(config: Settings) -> list[dict[str, Any]]:
    return [value for pairs in read_stream(config, SystemStream("log", "out")).values() for _, value in pairs]


def assert_the_first_window_fires_without_a_timer_tick(config: Settings, runner: Any, run: Callable[[], JobResult]):
    """Run the job until the first window's panes are out (they can only come from the boundary rule),
    stop it, and check what came out and what went through the intermediate stream."""
    outcome: dict[str, JobResult] = {}
    job = threading.Thread(target=lambda: outcome.setdefault("result", run()), daemon=True)
    job.start()
    try:
        wait_until(
            lambda: len([r for r in records(config) if "count" in r]) >= 2,  # one pane per user
            90,
            "the first window fired although no watermark timer ticked",
        )
    finally:
        runner.request_stop()
        job.join(120)
    assert outcome["result"].outcome == "stopped", outcome["result"].error
    panes = sorted((r["user"], r["count"]) for r in records(config) if "count" in r)
    assert panes == [("u0", 2 * PARTITIONS), ("u1", 2 * PARTITIONS)], "the first window, exactly, and only it"
    out = records(config)
    assert all(r["end"] == WINDOW_MS for r in out if "count" in r), "the second window is still open"
    passed = [r["watermark"] for r in out if "watermark" in r]
    assert passed and max(passed) == WINDOW_MS + 1_000, "the window fired on the boundary-passing watermark"
    marks = [
        message.timestamp
        for _, batch in iter_stream(config, INTERMEDIATE)
        for envelope in batch
        if isinstance(message := unframe(envelope.message)[1], (WatermarkMessage, CombinedWatermarkMessage))
    ]
    # per producing task and partition (aggregated, or broadcast combined per container: fewer): its first
    # watermark and the boundary one, however the timing fell; aggregated, the aggregating task's copies to
    # the other partition come on top
    assert len(marks) <= 2 * PARTITIONS * PARTITIONS + 2 * (PARTITIONS - 1), f"{len(marks)} watermark records: {marks}"
    assert max(marks) == WINDOW_MS + 1_000


@pytest.mark.parametrize("aggregate", [False, True], ids=["broadcast", "aggregated"])
def test_a_window_fires_when_the_watermark_passes_its_end_without_waiting_for_the_watermark_timer(tmp_path, aggregate):
    """Aggregated, the producers' watermarks wait for a flush of their output, which the timer makes: a
    boundary watermark asks for one at once."""
    config = prompt_window_app(tmp_path, app__control__aggregation=str(aggregate).lower())
    runner = InProcessRunner(config)
    assert_the_first_window_fires_without_a_timer_tick(config, runner, lambda: runner.run(timeout=120))
