"""The Grafana dashboard in the docs charts what the driver serves: every metric name it queries is in
``/metrics`` of a running job (a high-level job with a changelog-backed and a blob-backed store,
restarted so that both restore)."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

from millstream.config.settings import Settings
from millstream.coordinator.job_result import JobResult
from millstream.model import SystemStream
from millstream.testing import InProcessRunner, write_stream
from tests.api.apps import messages
from tests.helpers import create_stream, wait_until
from tests.integration.processes import free_port
from tests.metrics.apps import counting_windows_config
from tests.metrics.scrape import Series, scrape, total

DASHBOARD = Path(__file__).parents[2] / "docs" / "operating" / "grafana-dashboard.json"
IN = SystemStream("log", "in")


def queried_names() -> set[str]:
    """Every metric name in the dashboard's queries (and its variables')."""
    document = json.loads(DASHBOARD.read_text())
    expressions = [target["expr"] for panel in document["panels"] for target in panel.get("targets", [])]
    expressions.extend(
        variable["definition"] for variable in document["templating"]["list"] if "definition" in variable
    )
    return {name for expression in expressions for name in re.findall(r"\bmillstream_[a-zA-Z0-9_]+", expression)}


def run_until(config: Settings, port: int, probe: Any, what: str) -> Series:
    """Run the job until ``probe(scrape)`` holds, then stop it; the scrape that satisfied it."""
    runner = InProcessRunner(config)
    outcome: dict[str, JobResult] = {}
    job = threading.Thread(target=lambda: outcome.setdefault("result", runner.run(timeout=120)))
    job.start()
    try:
        series = wait_until(lambda: (s := scrape(port)) and probe(s) and s, 90, what)
    finally:
        runner.request_stop()
        job.join(60)
    assert outcome["result"].outcome == "stopped", outcome["result"].error
    assert isinstance(series, dict)
    return series


def test_every_metric_the_dashboard_queries_is_served_for_a_running_job(tmp_path) -> None:
    port = free_port()
    config = counting_windows_config(
        tmp_path,
        metrics__prometheus__port=port,
        metrics__prometheus__host="127.0.0.1",
        metrics__snapshot__interval__ms=100,
        task__commit__ms=200,
    )
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    for partition in range(2):
        write_stream(config, IN, messages(partition, 30), partition=partition)

    def committed(series: Series) -> bool:
        return total(series, "millstream_processed_total") == 60 and total(series, "millstream_commits_total") >= 2

    run_until(config, port, committed, "the first run to process and commit everything")

    names = queried_names()
    assert len(names) >= 15, names

    def everything_served(series: Series) -> bool:
        return names <= {name for name, _ in series}

    for partition in range(2):
        write_stream(config, IN, messages(partition, 10, start=30), partition=partition)
    series = run_until(config, port, everything_served, "every series the dashboard queries")

    restored = total(series, "millstream_store_restored_bytes", store="totals")
    assert restored > 0 and restored == total(series, "millstream_store_restore_expected_bytes", store="totals")
