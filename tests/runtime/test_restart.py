"""The restart strategy decides each attempt's delay and the failure-rate limit from the previous attempts'
record and a clock: tested here with a fake clock and no jitter unless a test is about jitter."""

from __future__ import annotations

import pytest

from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.contracts.metadata import FencedError
from millstream.embedded.sqlite import SqliteMetadataStore
from millstream.errors import ConfigError
from millstream.runtime.restart import (
    RestartRecord,
    RestartSettings,
    RestartStrategy,
    read_restarts,
    write_restarts,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def no_jitter(low: float, high: float) -> float:
    return 0.0


def attempts(strategy: RestartStrategy, clock: Clock, run_ms: list[int]) -> list[tuple[int, str | None]]:
    """Start an attempt, let it run ``run_ms[i]`` ms after its delay, fail, and start the next: the delays and
    limit messages of each attempt after the first."""
    decision = strategy.on_attempt("0", 1, None)
    seen = []
    for ran in run_ms:
        clock.now += decision.delay_ms + ran
        decision = strategy.on_attempt("0", 1, decision.record)
        seen.append((decision.delay_ms, decision.exceeded))
    return seen


def test_the_first_attempt_of_a_generation_runs_at_once_and_counts_no_restart() -> None:
    clock = Clock()
    strategy = RestartStrategy(RestartSettings(initial_ms=1000), clock, no_jitter)
    decision = strategy.on_attempt("0", 1, None)
    assert (decision.delay_ms, decision.record.restarts, decision.exceeded) == (0, 0, None)
    older = RestartRecord(generation=1, restarts=5, failures=[clock.now], backoff_ms=8000)
    assert strategy.on_attempt("0", 2, older).delay_ms == 0, "a new generation starts the count again"


def test_the_delay_grows_by_the_multiplier_up_to_the_maximum() -> None:
    clock = Clock()
    settings = RestartSettings(initial_ms=1000, max_ms=5000, multiplier=2.0, jitter=0.0)
    strategy = RestartStrategy(settings, clock, no_jitter)
    delays = [delay for delay, _ in attempts(strategy, clock, [100] * 5)]
    assert delays == [1000, 2000, 4000, 5000, 5000]


def test_an_attempt_that_ran_for_the_reset_period_starts_the_delay_again_from_the_initial_one() -> None:
    clock = Clock()
    settings = RestartSettings(initial_ms=1000, max_ms=60_000, multiplier=3.0, reset_ms=30_000)
    strategy = RestartStrategy(settings, clock, no_jitter)
    delays = [delay for delay, _ in attempts(strategy, clock, [10, 10, 30_000, 10])]
    assert delays == [1000, 3000, 1000, 3000]


def test_jitter_spreads_the_delay_within_its_share() -> None:
    clock = Clock()
    settings = RestartSettings(initial_ms=1000, jitter=0.25)
    low = RestartStrategy(settings, clock, lambda a, b: a)
    high = RestartStrategy(settings, clock, lambda a, b: b)
    first = low.on_attempt("0", 1, None).record
    assert low.on_attempt("0", 1, first).delay_ms == 750
    assert high.on_attempt("0", 1, first).delay_ms == 1250
    assert high.on_attempt("0", 1, first).record.backoff_ms == 1000, "the next delay grows from the one before jitter"


def test_no_initial_delay_restarts_at_once_as_before() -> None:
    clock = Clock()
    strategy = RestartStrategy(RestartSettings(), clock, no_jitter)
    assert attempts(strategy, clock, [10, 10, 10]) == [(0, None)] * 3


def test_more_failures_than_the_rate_allows_within_the_interval_fail_naming_the_limit() -> None:
    clock = Clock()
    settings = RestartSettings(initial_ms=100, multiplier=1.0, rate_max=3, rate_interval_ms=10_000)
    strategy = RestartStrategy(settings, clock, no_jitter)
    seen = attempts(strategy, clock, [1000, 1000, 1000, 1000])
    assert [exceeded for _, exceeded in seen[:3]] == [None, None, None]
    assert seen[3][1] == (
        "container 0 failed 4 times within 10000 ms, more than job.container.restart.failure.rate.max=3 allows "
        "(job.container.restart.failure.rate.interval.ms=10000)"
    )


def test_failures_older_than_the_interval_no_longer_count_against_the_rate() -> None:
    clock = Clock()
    settings = RestartSettings(rate_max=2, rate_interval_ms=10_000)
    strategy = RestartStrategy(settings, clock, no_jitter)
    seen = attempts(strategy, clock, [6000] * 8)
    assert all(exceeded is None for _, exceeded in seen), "one failure every 6 s is at most 2 per 10 s"
    fast = attempts(RestartStrategy(settings, clock, no_jitter), clock, [4000] * 3)
    assert fast[2][1] is not None, "one every 4 s is 3 per 10 s"


def test_settings_come_from_the_job_restart_keys_and_bad_values_name_the_key() -> None:
    config = Settings(
        {
            "job.container.restart.backoff.initial.ms": "500",
            "job.container.restart.backoff.max.ms": "8000",
            "job.container.restart.backoff.multiplier": "1.5",
            "job.container.restart.backoff.jitter": "0",
            "job.container.restart.backoff.reset.ms": "9000",
            "job.container.restart.failure.rate.max": "4",
            "job.container.restart.failure.rate.interval.ms": "20000",
        }
    )
    assert RestartSettings.of(config) == RestartSettings(500, 8000, 1.5, 0.0, 9000, 4, 20_000)
    with pytest.raises(ConfigError, match=r"job\.container\.restart\.backoff\.multiplier"):
        RestartSettings.of(Settings({"job.container.restart.backoff.multiplier": "0.5"}))


def test_the_record_round_trips_and_only_the_current_attempt_may_write_it(tmp_path) -> None:
    store = SqliteMetadataStore(tmp_path / "metadata.db")
    coordination.publish_generation(store, 1)
    first = coordination.start_container_attempt(store, "0")
    record = RestartRecord(1, restarts=2, failures=[5, 6], backoff_ms=400, running_from_ms=7)
    write_restarts(store, "0", first, record)
    assert read_restarts(store, "0") == record
    coordination.start_container_attempt(store, "0")
    with pytest.raises(FencedError, match="container 0 attempt 1"):
        write_restarts(store, "0", first, record)
    store.put("restarts", "0", b"not json")
    assert read_restarts(store, "0") is None, "an unreadable record starts the count again"
    store.close()
