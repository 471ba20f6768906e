"""librdkafka's log lines are rate-limited to one line per condition: a broker restart once logged 15,094 ERROR
lines, the same few conditions repeated by every broker thread and retry."""

from __future__ import annotations

import logging

import pytest

from millstream.connectors.kafka.logs import RateLimitedLog, condition_of

LIBRDKAFKA_FORMAT = "%s [%s] %s"
"""What confluent-kafka hands a client's ``logger``: facility, client name, line."""


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def connect_failure(port: int, after_ms: int) -> str:
    return (
        f"[thrd:127.0.0.1:{port}/bootstrap]: 127.0.0.1:{port}/bootstrap: Connect to ipv4#127.0.0.1:{port} failed: "
        f"Connection refused (after {after_ms}ms in state CONNECT)"
    )


@pytest.fixture
def limited(caplog: pytest.LogCaptureFixture) -> tuple[RateLimitedLog, FakeClock]:
    clock = FakeClock()
    caplog.set_level(logging.DEBUG, logger="test.librdkafka")
    return RateLimitedLog(logging.getLogger("test.librdkafka"), interval_s=30, clock=clock), clock


def test_one_line_per_condition_is_logged_within_the_interval_and_the_rest_are_counted_in_the_next(
    limited: tuple[RateLimitedLog, FakeClock], caplog: pytest.LogCaptureFixture
) -> None:
    log, clock = limited
    for attempt in range(1000):  # every broker thread and reconnect: ports and delays differ, the cause does not
        log.log(
            logging.ERROR, LIBRDKAFKA_FORMAT, "FAIL", f"rdkafka#producer-{attempt % 7}", connect_failure(9092, attempt)
        )
    assert [record.levelno for record in caplog.records] == [logging.ERROR]
    assert "Connection refused" in caplog.records[0].getMessage()

    clock.now = 31.0
    log.log(logging.ERROR, LIBRDKAFKA_FORMAT, "FAIL", "rdkafka#producer-1", connect_failure(9092, 5))
    assert len(caplog.records) == 2, "a condition that persists is logged again after the interval"
    assert "999 more line(s) of this condition in the last 30s not logged" in caplog.records[1].getMessage()


def test_different_conditions_are_each_logged(
    limited: tuple[RateLimitedLog, FakeClock], caplog: pytest.LogCaptureFixture
) -> None:
    log, _ = limited
    log.log(logging.ERROR, LIBRDKAFKA_FORMAT, "FAIL", "rdkafka#producer-1", connect_failure(9092, 0))
    log.log(logging.ERROR, LIBRDKAFKA_FORMAT, "REQTMOUT", "rdkafka#producer-1", "Timed out 3 in-flight requests")
    log.log(logging.WARNING, LIBRDKAFKA_FORMAT, "TXNERR", "rdkafka#producer-1", "Current transaction failed: fenced")
    log.log(logging.ERROR, LIBRDKAFKA_FORMAT, "REQTMOUT", "rdkafka#producer-2", "Timed out 12 in-flight requests")
    assert [record.getMessage().split(" [")[0] for record in caplog.records] == ["FAIL", "REQTMOUT", "TXNERR"]


def test_lines_below_the_loggers_level_are_neither_logged_nor_counted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="test.quiet")
    log = RateLimitedLog(logging.getLogger("test.quiet"), interval_s=30, clock=FakeClock())
    log.log(logging.DEBUG, LIBRDKAFKA_FORMAT, "BROKER", "rdkafka#producer-1", "debug chatter")
    log.log(logging.WARNING, LIBRDKAFKA_FORMAT, "BROKER", "rdkafka#producer-1", "debug chatter")
    assert [record.levelno for record in caplog.records] == [logging.WARNING]


def test_a_condition_masks_numbers_and_the_broker_thread() -> None:
    assert condition_of("FAIL", connect_failure(9092, 1)) == condition_of("FAIL", connect_failure(19093, 2500))
    assert condition_of("FAIL", "Connection refused") != condition_of("FAIL", "Connection reset by peer")
