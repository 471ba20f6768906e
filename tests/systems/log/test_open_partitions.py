"""The admin's open partition files: a task's commit asks for its changelog partition's newest offset without
opening the file again (opening cost more the more files the process held: issue 40), within a bound, and
never answers from a file that was deleted or re-created since."""

from __future__ import annotations

from pathlib import Path

from millstream.systems.base import StreamSpec, SystemStreamPartitionMetadata
from millstream.systems.log.admin import LogSystemAdmin
from millstream.systems.log.factory import LogSystemFactory
from millstream.systems.log.producer import LogSystemProducer

from .conftest import SYSTEM, create, log_config, ssp, write


def admin_of(root: Path, **settings: object) -> LogSystemAdmin:
    """An admin of the log at ``root`` (the ``producer`` fixture's root is ``tmp_path / "log"``)."""
    admin = LogSystemFactory().get_admin(SYSTEM, log_config(root, **settings))
    admin.start()
    return admin


def test_repeated_newest_offset_queries_open_each_partition_file_once(root: Path, producer: LogSystemProducer) -> None:
    admin = admin_of(root)
    create(admin, "changelog", 3)
    ssps = [ssp("changelog", p) for p in range(3)]
    for _ in range(5):
        for one in ssps:
            admin.get_written_ssp_metadata([one])
    assert admin.open_partitions.opened == 3
    write(producer, "changelog", [b"a", b"b"], partition=1)
    assert admin.get_written_ssp_metadata([ssps[1]])[ssps[1]].newest_offset == "1", "a kept file sees new appends"
    admin.stop()


def test_no_more_files_stay_open_than_admin_open_partitions(root: Path) -> None:
    admin = admin_of(root, admin__open__partitions=2)
    create(admin, "changelog", 3)
    for partition in (0, 1, 2, 0):
        admin.get_ssp_metadata([ssp("changelog", partition)])
    assert len(admin.open_partitions._open) == 2
    assert admin.open_partitions.opened == 4, "partition 0 was closed as the least recently used, then reopened"
    admin.stop()
    assert len(admin.open_partitions._open) == 0


def test_zero_open_partitions_opens_and_closes_a_file_per_query(root: Path) -> None:
    admin = admin_of(root, admin__open__partitions=0)
    create(admin, "changelog", 1)
    admin.get_ssp_metadata([ssp("changelog")])
    admin.get_ssp_metadata([ssp("changelog")])
    assert admin.open_partitions.opened == 2 and len(admin.open_partitions._open) == 0


def test_a_kept_partition_of_a_stream_re_created_since_answers_for_the_new_stream(
    root: Path, producer: LogSystemProducer
) -> None:
    admin = admin_of(root)
    create(admin, "changelog", 2)
    write(producer, "changelog", [b"a", b"b", b"c"], partition=0)
    assert admin.get_ssp_metadata([ssp("changelog")])[ssp("changelog")].newest_offset == "2"
    producer.stop()
    other = admin_of(root)  # another process deletes the stream and creates it again
    other.clear_stream(StreamSpec(SYSTEM, "changelog", 2))
    create(other, "changelog", 2)
    assert admin.get_ssp_metadata([ssp("changelog")])[ssp("changelog")] == SystemStreamPartitionMetadata(
        None, None, "0"
    )
    other.clear_stream(StreamSpec(SYSTEM, "changelog", 2))
    assert admin.get_ssp_metadata([ssp("changelog")]) == {}, (
        "a deleted stream is left out, not answered from the kept file"
    )
    admin.stop()
    other.stop()
