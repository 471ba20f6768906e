"""Published versions: the record containers poll, its history, downloads of its files, and retention."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from millstream.adjunct.published import (
    ADSTORE_VERSIONS_NAMESPACE,
    AdjunctVersionError,
    PublishedVersion,
    download_version,
    latest_version,
    list_versions,
    new_version_id,
    publish_version,
    retire_versions,
    store_blob_prefix,
    version_blob_name,
)
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts.blobstore import blob_store
from millstream.contracts.metadata import MetadataStore
from tests.helpers import job_config


@pytest.fixture
def config(tmp_path: Path) -> Settings:
    return Settings.of(
        job_config(tmp_path / "data", **{"blob.store.prefix": "team/", "blob.store.transfer.threads": "3"})
    )


@pytest.fixture
def metadata(config: Settings) -> Iterator[MetadataStore]:
    store = metadata_store(config)
    store.init()
    yield store
    store.close()


def uploaded(config: Settings, version: str, files: dict[str, bytes], store: str = "geo") -> dict[str, str]:
    """Put ``files`` (name → bytes) in the blob store as files of ``version``; returns name → blob id."""
    blobs = blob_store(config)
    ids = {}
    for name, data in files.items():
        ids[name] = blobs.put(version_blob_name(config, store, version, name), io.BytesIO(data), len(data))
    return ids


def partitioned(config: Settings, version: str, store: str = "geo") -> PublishedVersion:
    ids = uploaded(config, version, {"part-00000.sst": b"zero", "part-00002.sst": b"two"}, store)
    return PublishedVersion(
        store=store,
        version=version,
        created_ms=1_700_000_000_000,
        layout="partitioned",
        files={"0": [ids["part-00000.sst"]], "2": [ids["part-00002.sst"]]},
        records=7,
        source="/data/geo.parquet",
        partition_count=3,
    )


def test_a_record_round_trips_through_bytes_and_keeps_fields_it_does_not_know(config):
    record = partitioned(config, new_version_id())
    assert PublishedVersion.from_bytes(record.to_bytes()) == record
    newer = record.to_bytes().replace(b'{"created_ms"', b'{"checksum":"abc","created_ms"')
    read = PublishedVersion.from_bytes(newer)
    assert read == record and read.extra == {"checksum": "abc"}
    assert b'"checksum":"abc"' in read.to_bytes()


def test_a_corrupt_record_is_an_error_naming_where_it_was_found():
    with pytest.raises(AdjunctVersionError, match=r"store 'geo'.*corrupt"):
        PublishedVersion.from_bytes(b'{"store": "geo"}', "store 'geo'")
    with pytest.raises(AdjunctVersionError, match="corrupt"):
        PublishedVersion.from_bytes(b"not json")


def test_version_ids_are_unique_and_sort_by_creation_time():
    earlier = [new_version_id(1_795_000_000_000 + i) for i in range(50)]
    assert earlier == sorted(earlier) and len(set(earlier)) == 50
    assert new_version_id(1_795_230_556_007).startswith("20261121T030916007Z-")
    same_ms = {new_version_id(1_795_000_000_000) for _ in range(100)}
    assert len(same_ms) == 100


def test_blobs_for_gives_a_readers_partitions_files_and_every_file_of_a_broadcast_version(config):
    record = PublishedVersion("geo", "v", 0, "partitioned", {"10": ["c"], "2": ["b"], "0": ["a"]}, 3, "s")
    assert record.blobs_for([10, 2]) == ["b", "c"]
    assert record.blobs_for([1]) == []  # a partition without records has no file
    assert record.blobs_for(None) == ["a", "b", "c"]
    broadcast = PublishedVersion("geo", "v", 0, "broadcast", {"*": ["r0", "r1", "r2"]}, 3, "s")
    assert broadcast.blobs_for([5]) == ["r0", "r1", "r2"]  # key order, as listed


def test_the_latest_version_is_the_last_published_and_the_history_lists_every_kept_one(config, metadata):
    assert latest_version(metadata, "geo") is None and list_versions(metadata, "geo") == []
    first, second = partitioned(config, new_version_id(1000)), partitioned(config, new_version_id(2000))
    publish_version(metadata, first)
    assert latest_version(metadata, "geo") == first
    publish_version(metadata, second)
    publish_version(metadata, second)  # publishing again changes nothing
    other = partitioned(config, new_version_id(1500), store="other")
    publish_version(metadata, other)
    assert latest_version(metadata, "geo") == second
    assert list_versions(metadata, "geo") == [first, second]
    assert set(metadata.all(ADSTORE_VERSIONS_NAMESPACE)) == {
        "geo",
        f"geo/{first.version}",
        f"geo/{second.version}",
        "other",
        f"other/{other.version}",
    }


def test_a_version_older_than_the_latest_is_refused_and_the_latest_stays(config, metadata):
    newer, older = partitioned(config, new_version_id(2000)), partitioned(config, new_version_id(1000))
    publish_version(metadata, newer)
    with pytest.raises(AdjunctVersionError, match=f"'{older.version}'.*newer version '{newer.version}'"):
        publish_version(metadata, older)
    assert latest_version(metadata, "geo") == newer
    assert list_versions(metadata, "geo") == [newer]


def test_download_fetches_a_readers_files_in_ingestion_order(config, tmp_path):
    record = partitioned(config, new_version_id())
    paths = download_version(config, record, [2, 0, 1], tmp_path / "dl")
    assert [path.name for path in paths] == ["part-00000.sst", "part-00002.sst"]
    assert [path.read_bytes() for path in paths] == [b"zero", b"two"]
    assert download_version(config, record, [1], tmp_path / "none") == []
    assert sorted(p.name for p in (tmp_path / "dl").iterdir()) == ["part-00000.sst", "part-00002.sst"]


def test_downloading_a_missing_blob_is_an_error_naming_store_version_and_blob(config, tmp_path):
    record = partitioned(config, new_version_id())
    missing = record.files["2"][0]
    blob_store(config).delete(missing)
    with pytest.raises(AdjunctVersionError) as raised:
        download_version(config, record, None, tmp_path / "dl")
    message = str(raised.value)
    assert f"adjunct store 'geo' version '{record.version}'" in message and f"blob '{missing}'" in message
    assert not (tmp_path / "dl" / "part-00002.sst").exists()
    assert not list((tmp_path / "dl").glob("*.partial"))


def test_blob_names_live_under_the_configured_prefix_and_the_job(config):
    assert store_blob_prefix(config, "geo") == "team/adstore/test-1/geo/"
    assert version_blob_name(config, "geo", "V", "part-00003.sst") == "team/adstore/test-1/geo/V/part-00003.sst"


def test_retention_keeps_the_files_of_the_latest_two_versions_only(config, metadata):
    versions = [partitioned(config, new_version_id(1000 * i)) for i in range(1, 4)]
    failed_build = new_version_id(1500)  # uploaded, never published
    uploaded(config, failed_build, {"part-00001.sst": b"orphan"})
    newer_build = new_version_id(10_000)  # still running: not touched
    uploaded(config, newer_build, {"part-00001.sst": b"building"})
    publish_version(metadata, versions[0])
    assert retire_versions(config, metadata, "geo") == []  # one version: nothing to retire
    publish_version(metadata, versions[1])
    publish_version(metadata, versions[2])
    assert retire_versions(config, metadata, "geo") == sorted([versions[0].version, failed_build])
    remaining = blob_store(config).list(store_blob_prefix(config, "geo"))
    kept = {v.version for v in versions[1:]} | {newer_build}
    assert {blob_id.split("/")[4] for blob_id in remaining} == kept
    assert list_versions(metadata, "geo") == versions[1:]
    assert download_version(config, versions[1], None, config_dir(config) / "dl")  # the previous one is whole
    assert retire_versions(config, metadata, "geo") == []


def config_dir(config: Settings) -> Path:
    return Path(config["job.data.dir"])
