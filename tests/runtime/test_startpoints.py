"""Startpoints applied by containers, in-process: precedence, deletion after commit, crash before commit."""

import threading
import time

from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts.startpoints import StartpointSpecific, StartpointUpcoming
from millstream.startpoint.manager import StartpointManager
from millstream.startpoint.tools import set_startpoints
from millstream.testing import InProcessRunner
from tests.helpers import create_stream, fill, job_config, output_origins, seal


def fan_outs(config: Settings) -> dict:
    return StartpointManager(metadata_store(config)).all_fan_outs()


def run_until_read(config: Settings, total: int) -> None:
    """Run an unbounded job until its checkpoints cover ``total`` messages, then stop it gracefully."""
    from millstream.checkpoint.factory import checkpoint_manager

    runner = InProcessRunner(config)
    store = metadata_store(config)

    covered = threading.Event()

    def stop_when_done() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            checkpoints = checkpoint_manager(config, store).read_all()
            if sum(int(o) + 1 for c in checkpoints.values() for o in c.offsets.values() if o is not None) >= total:
                covered.set()
                break
            time.sleep(0.05)
        runner.request_stop()

    threading.Thread(target=stop_when_done, daemon=True).start()
    assert runner.run(timeout=60).outcome == "stopped"
    assert covered.is_set(), f"the checkpoints never covered {total} messages within 30 s"


def test_processed_partitions_drop_their_startpoint_after_commit_idle_ones_keep_it(tmp_path):
    config = job_config(tmp_path, job__container__count=1)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    fill(config, "in", 2, 5)
    run_until_read(config, 10)

    set_startpoints(config, "log.in", StartpointSpecific("1"), partitions=[0])
    set_startpoints(config, "log.in", StartpointUpcoming(), partitions=[1])
    seal(config, "in")
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished"

    origins = output_origins(config)
    assert sorted(v for p, v in origins if p == 0) == [0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert sorted(v for p, v in origins if p == 1) == [0, 1, 2, 3, 4]
    remaining = fan_outs(config)
    # partition 1 reached end-of-stream, which counts as an update (as in Samza): nothing stays
    assert remaining == {}


def test_an_idle_partition_keeps_its_startpoint_across_commits_and_restarts(tmp_path):
    config = job_config(tmp_path, job__container__count=1)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    fill(config, "in", 2, 3)
    run_until_read(config, 6)
    set_startpoints(config, "log.in", StartpointUpcoming(), partitions=[1])
    fill(config, "in", 1, 2, start=3)  # partition 0 gets data; partition 1 stays idle
    run_until_read(config, 8)
    assert [str(ssp) for f in fan_outs(config).values() for ssp in f] == ["SystemStreamPartition [log, in, 1]"]
    run_until_read(config, 8)
    assert len(fan_outs(config)) == 1


def test_a_crash_before_the_first_commit_applies_the_startpoint_again(tmp_path):
    config = job_config(tmp_path, task="tests.jobs:FailsOnPoison", task__commit__ms=3_600_000)
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    from millstream.model import SystemStream
    from millstream.testing import write_stream

    write_stream(config, SystemStream("log", "in"), [("k", 0), ("k", 1), ("k", 2)])
    run_until_read(job_config(tmp_path, task="tests.jobs:FailsOnPoison"), 3)  # committing on its timer meanwhile
    set_startpoints(config, "log.in", StartpointSpecific("0"))
    write_stream(config, SystemStream("log", "in"), [("k", "poison")])
    failed = InProcessRunner(config).run(timeout=30)
    assert failed.outcome == "failed"
    assert len(fan_outs(config)) == 1, "the startpoint must survive a crash before any commit"
    before = len(output_origins(config))
    assert InProcessRunner(config).run(timeout=30).outcome == "failed"
    assert len(output_origins(config)) == before + 3  # replayed 0, 1, 2 from the startpoint again


def test_a_commit_the_task_requests_on_the_first_message_removes_the_startpoint_it_covers(tmp_path):
    """The startpoint goes with the first commit whose checkpoint covers a processed message of its partition,
    also when the task requests that commit in the middle of a batch: a crash right after must not apply it again."""
    config = job_config(tmp_path, task="tests.jobs:CommitsEachMessageFailsOnPoison", task__commit__ms=3_600_000)
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    from millstream.model import SystemStream
    from millstream.testing import write_stream

    write_stream(config, SystemStream("log", "in"), [("k", 0), ("k", 1), ("k", 2)])
    run_until_read(config, 3)
    set_startpoints(config, "log.in", StartpointSpecific("2"))
    write_stream(config, SystemStream("log", "in"), [("k", "poison")])
    assert InProcessRunner(config).run(timeout=30).outcome == "failed"
    assert fan_outs(config) == {}, "the commit covering offset 2 must have removed the startpoint"
    before = len(output_origins(config))
    assert InProcessRunner(config).run(timeout=30).outcome == "failed"
    assert len(output_origins(config)) == before, "resumed after the checkpoint: nothing replayed"
