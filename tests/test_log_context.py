"""The documented log format: every line names its job, container and task, whichever runner logs it."""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Iterator

import pytest

from millstream.log_context import (
    LOG_FORMAT,
    LogContextFilter,
    container_log_context,
    in_task_log_context,
    task_log_context,
)
from millstream.testing import InProcessRunner
from tests.helpers import create_stream, fill, job_config, seal


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """Root records at INFO in :data:`LOG_FORMAT`, as ``millstream run -v`` writes them."""
    text = io.StringIO()
    handler = logging.StreamHandler(text)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.addFilter(LogContextFilter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield text
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def test_a_line_outside_any_job_shows_a_dash_for_each_field(captured) -> None:
    logging.getLogger("x").warning("hello")
    assert "WARNING [- - -] x: hello" in captured.getvalue()


def test_the_fields_belong_to_the_thread_that_set_them(captured) -> None:
    class Task:
        task_name = "Partition 7"

        @in_task_log_context
        def process(self) -> None:
            logging.getLogger("t").info("processing")

    def other() -> None:
        logging.getLogger("t").info("elsewhere")

    with container_log_context("wordcount", "3"):
        Task().process()
        with task_log_context("Partition 1"):
            thread = threading.Thread(target=other)
            thread.start()
            thread.join()
        logging.getLogger("t").info("between tasks")
    lines = captured.getvalue().splitlines()
    assert lines[0].endswith("INFO [wordcount 3 Partition 7] t: processing")
    assert lines[1].endswith("INFO [- - -] t: elsewhere")
    assert lines[2].endswith("INFO [wordcount 3 -] t: between tasks")


def test_an_in_process_containers_lines_carry_its_job_container_and_task(tmp_path, captured) -> None:
    config = job_config(tmp_path, task="tests.jobs:LoggingPassThrough", job__container__count=2)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    fill(config, "in", 2, 5)
    seal(config, "in")

    assert InProcessRunner(config).run(timeout=60).outcome == "finished"

    text = captured.getvalue()
    assert "INFO [test 0 Partition 0] tests.jobs: first message of partition 0" in text
    assert "INFO [test 1 Partition 1] tests.jobs: first message of partition 1" in text
    assert "INFO [test 1 -] millstream.runtime.container: container 1 (generation 1, attempt 1) starting" in text
