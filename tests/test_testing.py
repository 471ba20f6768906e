"""``millstream.testing.TestRunner``: a test job ends at end-of-stream with all its output, or raises naming
what it still waited for — never partial output as if it had finished."""

from __future__ import annotations

import pytest

from millstream.testing import EndOfStreamNotReachedError, TestRunner
from tests.helpers import create_stream, job_config


def test_a_job_that_does_not_reach_end_of_stream_raises_naming_the_partition_it_waited_for(tmp_path):
    create_stream(job_config(tmp_path), "feed", 2)  # an input nobody seals
    runner = TestRunner("tests.jobs:PassThrough", {"task.inputs": "log.in,log.feed", "job.container.count": 1})
    with pytest.raises(EndOfStreamNotReachedError) as raised:
        runner.add_input("in", [("a", 1)]).add_output("out").run(timeout=2, data_dir=tmp_path)
    message = str(raised.value)
    assert "within 2 s" in message and "stopped" in message
    assert "log.feed partition 0" in message and "log.feed partition 1" in message
    assert "log.in" not in message, "the sealed input reached end-of-stream"
    assert raised.value.job.waiting_for, "the job's result says what each task waited for"
