"""Intermediate streams end to end on the in-process runner: nothing can trim what a later stage has not
read, the consuming stage purges what it checkpointed, and a stage that finds records gone refuses to
start instead of giving wrong windows."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from millstream.composition.systems import system_factory
from millstream.config.settings import Settings
from millstream.contracts.systems import SystemStreamPartitionMetadata
from millstream.control.framing import MessageType
from millstream.control.sender import aggregate_partition
from millstream.model import SystemStream, SystemStreamPartition
from millstream.testing import InProcessRunner, iter_stream
from tests.api.apps import app_config, messages, reference_counts
from tests.api.test_in_process import output, setup

INTERMEDIATE = "test-1-by-user"


def staged(tmp_path: Path, **extra: object) -> tuple[Settings, Settings, dict[int, list]]:
    data = {p: messages(p, 40) for p in range(2)}
    upstream, downstream = (
        app_config(tmp_path, "tests.api.apps:WindowedCount", app__stage=stage, **extra) for stage in (0, 1)
    )
    setup(upstream, data)
    assert InProcessRunner(upstream).run(timeout=60).outcome == "finished"
    return upstream, downstream, data


def intermediate_partitions(config: Settings) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
    with system_factory(config, "log").get_admin("log", config) as admin:
        admin.start()
        partitions = admin.get_system_stream_metadata([INTERMEDIATE])[INTERMEDIATE].partitions
        return {SystemStreamPartition("log", INTERMEDIATE, p): meta for p, meta in partitions.items()}


def window_counts(config: Settings) -> dict[tuple[str, int], int]:
    counted = Counter({(r["user"], r["start"]): r["count"] for r in output(config) if "count" in r})
    return dict(counted)


def test_the_consuming_stage_deletes_the_intermediate_records_it_checkpointed(tmp_path):
    _, downstream, data = staged(tmp_path)
    written = intermediate_partitions(downstream)
    assert all(meta.oldest_offset == "0" for meta in written.values()), "nothing is deleted before stage 1 reads"

    assert InProcessRunner(downstream).run(timeout=60).outcome == "finished"
    assert window_counts(downstream) == reference_counts(data)
    purged = intermediate_partitions(downstream)
    assert {ssp: meta.oldest_offset for ssp, meta in purged.items()} == dict.fromkeys(written, None)
    forwarded = {ssp: int(ssp.partition != aggregate_partition(INTERMEDIATE, len(written))) for ssp in written}
    assert {ssp: int(meta.upcoming_offset) for ssp, meta in purged.items()} == {
        ssp: int(meta.upcoming_offset) + forwarded[ssp] for ssp, meta in written.items()
    }, "the only record stage 1 writes is the end-of-stream the aggregate partition's task forwards to the others"


def test_turning_delete_committed_messages_off_keeps_the_intermediate_records(tmp_path):
    key = f"systems__log__streams__{INTERMEDIATE}__samza__delete__committed__messages"
    _, downstream, _ = staged(tmp_path, **{key: "false"})
    assert InProcessRunner(downstream).run(timeout=60).outcome == "finished"
    assert all(meta.oldest_offset == "0" for meta in intermediate_partitions(downstream).values())


def test_a_fresh_stage_on_an_intermediate_stream_that_lost_records_fails_naming_them(tmp_path):
    _, downstream, _ = staged(tmp_path)
    lost = SystemStreamPartition("log", INTERMEDIATE, 1)
    with system_factory(downstream, "log").get_admin("log", downstream) as admin:
        admin.delete_messages({lost: "3"})  # what retention did to a backfill's old records before this was fixed

    result = InProcessRunner(downstream).run(timeout=60)
    assert result.outcome == "failed"
    assert result.error is not None
    assert (
        f"stream 'log.{INTERMEDIATE}' partition 1: reading the intermediate stream from its start, but offsets 0 up "
        "to 3 (exclusive) were already deleted" in result.error
    )
    assert not [r for r in output(downstream) if "count" in r], "no window was emitted from the partial stream"


def test_accepting_the_loss_by_policy_lets_the_fresh_stage_start_at_the_oldest_remaining_record(tmp_path):
    key = f"systems__log__streams__{INTERMEDIATE}__samza__trimmed__offset__policy"
    _, downstream, data = staged(tmp_path, **{key: "oldest"})
    first = [e for p, batch in iter_stream(downstream, SystemStream("log", INTERMEDIATE)) if p == 1 for e in batch]
    # the first three records: user messages, and control ones wherever a watermark went out between them
    lost = sum(1 for envelope in first[:3] if envelope.message[0] == MessageType.USER_MESSAGE)
    assert lost > 0
    with system_factory(downstream, "log").get_admin("log", downstream) as admin:
        admin.delete_messages({SystemStreamPartition("log", INTERMEDIATE, 1): "3"})

    assert InProcessRunner(downstream).run(timeout=60).outcome == "finished"
    assert sum(window_counts(downstream).values()) == sum(reference_counts(data).values()) - lost
