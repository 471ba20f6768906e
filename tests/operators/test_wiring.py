"""Wiring a task's operator graph into its container: which tasks share their container's watermark combiner."""

from __future__ import annotations

import pytest

from millstream.config.views import AppConfig, TaskConfig
from millstream.control.budget import BudgetSettings
from millstream.control.combining import WatermarkCombiner
from millstream.operators.wiring import _combiner


class FakeServices:
    def __init__(self) -> None:
        self.asked: list[tuple[int, int, bool]] = []

    def watermark_combiner(
        self, interval_ms: int, boundary_ms: int, aggregate: bool = False, budget: BudgetSettings | None = None
    ) -> WatermarkCombiner:
        self.asked.append((interval_ms, boundary_ms, aggregate))
        return WatermarkCombiner(interval_ms, boundary_ms, aggregate=aggregate, budget=budget)


@pytest.mark.parametrize("aggregate", [False, True], ids=["broadcast", "aggregated"])
def test_tasks_combine_in_both_modes_but_send_their_own_with_an_idle_timeout_or_combining_off(aggregate):
    """With an idle timeout a container's minimum would name an idle task at every interval: the consumer's
    idle rule could never tell it apart, so each task sends its own records (``combining``)."""
    app = AppConfig.parse({"control.aggregation": str(aggregate).lower()}, "app.")
    services = FakeServices()
    combined = _combiner(services, app, TaskConfig.parse({}, "task."), 100)  # type: ignore[arg-type]
    assert combined is not None and combined.aggregate == aggregate and services.asked == [(200, 100, aggregate)]
    idle = TaskConfig.parse({"watermark.idle.timeout.ms": "30000"}, "task.")
    assert _combiner(services, app, idle, 100) is None  # type: ignore[arg-type]
    off = AppConfig.parse({"control.aggregation": str(aggregate).lower(), "control.watermark.combine": "false"}, "app.")
    assert _combiner(services, off, TaskConfig.parse({}, "task."), 100) is None  # type: ignore[arg-type]
