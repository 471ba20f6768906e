"""The directory tree: what makes a stream exist, and clear errors when its files are damaged."""

from __future__ import annotations

from pathlib import Path

import pytest

from millstream.contracts.systems import StreamOwnedError, StreamOwner, StreamSpec
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.consumer import LogSystemConsumer
from millstream.embedded.log.errors import CorruptStreamError, LogStorageError
from millstream.embedded.log.layout import LogLayout
from millstream.errors import StreamNotFoundError

from .conftest import SYSTEM, create, ssp


def test_a_directory_without_stream_json_is_not_a_stream(root: Path, consumer: LogSystemConsumer) -> None:
    (root / "half").mkdir(parents=True)
    assert not LogLayout(root).exists("half")
    with pytest.raises(StreamNotFoundError, match=r"'log.half'.*stream.json"):
        consumer.register(ssp("half"), "0")


def test_an_unreadable_stream_json_is_reported_with_its_path(admin: LogSystemAdmin, root: Path) -> None:
    create(admin, "events")
    (root / "events" / "stream.json").write_text("{not json")
    with pytest.raises(CorruptStreamError, match=r"'events' at '.*stream\.json' is corrupt"):
        admin.get_system_stream_metadata(["events"])


def test_a_missing_partition_file_is_reported_not_silently_recreated(
    admin: LogSystemAdmin, root: Path, consumer: LogSystemConsumer
) -> None:
    create(admin, "events", 2)
    (root / "events" / "p1.db").unlink()
    with pytest.raises(LogStorageError, match=r"'events' partition 1 \(file '.*p1\.db'\)"):
        consumer.register(ssp("events", 1), "0")
    assert not (root / "events" / "p1.db").exists()


def test_creating_a_stream_over_a_foreign_directory_fails_naming_it(admin: LogSystemAdmin, root: Path) -> None:
    (root / "events").mkdir(parents=True)
    (root / "events" / "someone-elses-file").write_text("x")
    with pytest.raises(CorruptStreamError, match=r"'events'.*cannot create the stream directory"):
        create(admin, "events")
    assert [path.name for path in root.iterdir()] == ["events"]


def test_creating_streams_leaves_no_staging_directories_behind(admin: LogSystemAdmin, root: Path) -> None:
    create(admin, "a")
    assert not admin.create_stream(StreamSpec(SYSTEM, "a", 1))
    assert sorted(path.name for path in root.iterdir()) == ["a"]


def test_a_stream_owner_is_kept_in_the_streams_directory_and_refuses_another(admin: LogSystemAdmin, root: Path) -> None:
    create(admin, "counts-changelog")
    first, second = StreamOwner("a-1", "counts"), StreamOwner("b-1", "counts")
    assert admin.claim_stream("counts-changelog", first) is None
    assert admin.claim_stream("counts-changelog", first) == first
    with pytest.raises(StreamOwnedError, match=r"owned by store 'counts' of job 'a-1'.*'the-key=true'"):
        admin.claim_stream("counts-changelog", second, takeover_key="the-key")
    assert admin.claim_stream("counts-changelog", second, takeover=True) == first
    assert (root / "counts-changelog" / "owner.json").read_text() == '{"job": "b-1", "store": "counts"}'


def test_an_unreadable_owner_record_counts_as_unowned(admin: LogSystemAdmin, root: Path) -> None:
    """What a crash while writing it leaves: the next claim writes a whole record."""
    create(admin, "counts-changelog")
    (root / "counts-changelog" / "owner.json").write_text('{"job": "a-')
    assert admin.claim_stream("counts-changelog", StreamOwner("b-1", "counts")) is None


def test_claiming_a_stream_that_does_not_exist_names_it(admin: LogSystemAdmin) -> None:
    with pytest.raises(StreamNotFoundError, match=r"'log.missing'"):
        admin.claim_stream("missing", StreamOwner("a-1", "counts"))
