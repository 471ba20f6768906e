"""What the in-process and the Spark tests both check of a job running with metrics on: processed counts
converge to what was produced, lag to zero, commits are timed, user metrics and the status document appear."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.helpers import wait_until
from tests.metrics.scrape import Series, present, scrape, status_json, total


def converged(port: int, produced: int, partitions: int) -> Callable[[], Series | None]:
    """A probe: the scrape once every partition's lag is 0 and the processed count is ``produced``."""

    def probe() -> Series | None:
        series = scrape(port)
        lags = [value for (name, _), value in series.items() if name == "millstream_lag"]
        done = total(series, "millstream_processed_total") == produced and len(lags) == partitions
        return series if done and not any(lags) else None

    return probe


def check_running_job(port: int, produced: int, partitions: int, timeout: float = 90) -> dict[str, Any]:
    """Wait for the figures to converge while the job runs; return its status document."""
    series = wait_until(converged(port, produced, partitions), timeout, "processed counts and lag to converge")
    assert series is not None
    assert total(series, "millstream_processed_total", job="test", stream="in", system="log") == produced
    assert total(series, "millstream_bytes_read_total") > 0
    assert total(series, "millstream_user_enriched_total") == produced
    assert present(series, "millstream_process_seconds_count")
    assert total(series, "millstream_container_attempt") >= 1
    assert total(series, "millstream_container_generation") >= 1
    assert total(series, "millstream_dead_lettered_total") == 0
    assert 0 < total(series, "millstream_batches_total") <= produced  # a batch holds one message or more
    assert total(series, "millstream_polls_total") > 0
    timed = wait_until(lambda: _with(scrape(port), "millstream_commit_seconds_count"), timeout, "a timed commit")
    assert timed is not None
    assert total(timed, "millstream_commits_total") > 0
    assert present(timed, "millstream_commits_skipped_total") and present(timed, "millstream_commits_blocked_total")
    document = wait_until(lambda: _caught_up(port, produced), timeout, "the status document to show every partition")
    assert document is not None
    return document


def _with(series: Series, name: str) -> Series | None:
    return series if total(series, name) > 0 else None


def _caught_up(port: int, produced: int) -> dict[str, Any] | None:
    document = status_json(port)
    rows = document["partitions"]
    if rows and sum(row["processed"] or 0 for row in rows) == produced and all(row["lag"] == 0 for row in rows):
        return document
    return None
