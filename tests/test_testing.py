"""``millstream.testing.TestRunner``: a test job ends at end-of-stream with all its output, or raises naming
what it still waited for — never partial output as if it had finished."""

from __future__ import annotations

import time

import pytest

import tests.api.apps  # noqa: F401 - TestRunner's caller imports the application it names
from millstream.config import load_config
from millstream.model import SystemStream
from millstream.testing import (
    EndOfStreamNotReachedError,
    InProcessRunner,
    TestRunner,
    iter_stream,
    read_stream,
    write_stream,
)
from tests.api.apps import messages, reference_stateful, stateful_records, user_messages
from tests.helpers import create_stream, job_config, seal


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


def test_a_job_whose_end_of_stream_commit_waits_for_an_upload_still_ends_with_all_output_long_before_task_commit_ms(
    tmp_path,
):
    """The first commit's upload is held for 2 s (the testing pause) while the inputs end: the end-of-stream
    commits the tasks ask for are skipped meanwhile and made once it ended. Were they left to the commit
    timer (task.commit.ms = 600 s), the job would not end within the run's timeout and the runner would
    raise; the join, the sessions and the running counts must all be there."""
    data = {p: user_messages(p, 40) for p in range(2)}
    config = {
        "job.container.count": 2,
        "task.commit.ms": 600_000,
        "test.delay.seconds": 0.02,  # the input lasts past the first timer commit, whose upload pauses
        "task.commit.testing.pause.at": "after-upload",
        "task.commit.testing.pause.ms": 2000,
        "task.commit.testing.marker.dir": str(tmp_path / "pause"),
        "systems.log.samza.key.serde": "string",
    }
    runner = TestRunner("tests.api.apps:SessionsJoinAndCounts", config).add_input("in", data).add_output("out")
    result = runner.run(timeout=120)
    values = [value for _, value in result.output("out")]
    assert result.job.outcome == "finished"
    assert (tmp_path / "pause" / "after-upload").exists(), "an upload was in flight at the end, as intended"
    assert stateful_records(values) == reference_stateful(data)
    assert len(values) == len(reference_stateful(data)), "every record exactly once"


def test_the_in_process_runner_prepares_a_loaded_config_so_a_high_level_application_runs_from_its_file(tmp_path):
    """A user's ``InProcessRunner(load_config(path))``: the runner expands the application itself (the config
    file names ``app.class``, not the task config the planner derives)."""
    path = tmp_path / "job.yaml"
    path.write_text(
        "job.name: from-file\n"
        f"job.data.dir: {tmp_path / 'data'}\n"
        "app.class: tests.api.apps:RepartitionPassThrough\n"
        "systems.log.samza.offset.default: oldest\n"
        "systems.log.samza.key.serde: string\n"
        "systems.log.samza.msg.serde: json\n"
    )
    config = load_config(path)
    for stream in ("in", "out"):
        create_stream(config, stream, 1)
    write_stream(config, SystemStream("log", "in"), messages(0, 20))
    seal(config, "in")
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished", result.error
    (received,) = read_stream(config, SystemStream("log", "out")).values()
    assert sorted(value["n"] for _, value in received) == list(range(20))


def test_iter_stream_hands_a_slow_caller_every_record_however_long_it_takes_over_each_batch(tmp_path):
    """A CI run's YARN test read half a partition: decoding a batch of 10,000 on a loaded machine outlasted the
    idle timeout, which counted the caller's time as the stream's silence, and the read ended early."""
    config = job_config(tmp_path, systems__log__poll__batch__size=10)
    stream = SystemStream("log", "in")
    create_stream(config, "in", 1)
    write_stream(config, stream, [("k", i) for i in range(30)], partition=0)
    seen = 0
    for _, batch in iter_stream(config, stream, idle_timeout=0.05):
        seen += len(batch)
        if batch:
            time.sleep(0.1)  # the caller's work with a batch, twice the idle timeout
    assert seen == 30
