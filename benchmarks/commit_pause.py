"""The longest processing pause a commit causes, with the upload asynchronous (the default) vs. synchronous.

    python -m benchmarks.commit_pause [--seconds 60] [--commit-ms 5000] [--keys 2000000] [--write-buffer-mb 8]
                                      [--blob-store local|s3] [--blob-mbps 50] [--blob-latency-ms 20]

A task writes random keys (random, incompressible 100 B values) into a RocksDB store backed up to the
blob store, as fast as it can, for ``--seconds``, and commits every ``--commit-ms``. The store's
memtable is ``--write-buffer-mb`` (``stores.<s>.container.write.buffer.size.bytes``; Samza's default
32 MB per container is 8 MB per task with four tasks): full memtables flush in the background, so a
commit's snapshot only flushes the current one. The same run is made twice: once with
commits as containers make them (snapshot on the task's thread, upload on a commit thread), once
with the whole commit on the task's thread (``TaskInstance`` without a commit executor: what a
synchronous upload costs). Reported: the longest time a commit held processing, and the slowest
batch of 1,000 messages (uploads running beside processing must not slow it much).

The blob store is the local one made to behave like a remote object store: ``--blob-latency-ms`` per
request and ``--blob-mbps`` MB/s over one link (0 and 0: plain local disk); or, with
``--blob-store s3``, the S3 API of a moto server the benchmark starts on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

from benchmarks.state_common import INPUT, TASK, StateJob, bench_config
from millstream.config import Config
from millstream.contracts.blobstore import BlobStore, BlobStoreFactory
from millstream.embedded.local_blobstore import LocalBlobStore, LocalBlobStoreFactory
from millstream.model import IncomingMessageEnvelope
from millstream.runtime.task_committer import CommitSettings
from millstream.runtime.task_instance import ContainerContext, TaskInstance

BATCH = 1000
MBPS_ENV = "MILLSTREAM_BENCH_BLOB_MBPS"
LATENCY_ENV = "MILLSTREAM_BENCH_BLOB_LATENCY_MS"


class RemoteLikeBlobStore(LocalBlobStore):
    """The local blob store with a request latency and a bandwidth shared by every upload (one link)."""

    lock = threading.Lock()

    def __init__(self, root: Path, bytes_per_second: float, latency: float) -> None:
        super().__init__(root)
        self.bytes_per_second = bytes_per_second
        self.latency = latency

    def put(self, name: str, source: BinaryIO, size: int) -> str:
        time.sleep(self.latency)
        if self.bytes_per_second > 0:
            with RemoteLikeBlobStore.lock:
                time.sleep(size / self.bytes_per_second)
        return super().put(name, source, size)


class RemoteLikeBlobStoreFactory(BlobStoreFactory):
    def get_blob_store(self, config: Config) -> BlobStore:
        local = LocalBlobStoreFactory().get_blob_store(config)
        assert isinstance(local, LocalBlobStore)
        mbps = float(os.environ.get(MBPS_ENV, "0"))
        latency_ms = float(os.environ.get(LATENCY_ENV, "0"))
        return RemoteLikeBlobStore(local.root, mbps * 1e6, latency_ms / 1000)


class RandomWriter:
    def __init__(self, store: Any) -> None:
        self.store = store

    def process(self, envelope: IncomingMessageEnvelope, collector: Any, coordinator: Any) -> None:
        self.store.put(envelope.key, envelope.message)


class NoProducers:
    def flush(self, source: str) -> None:
        pass


def run(
    root: Path,
    asynchronous: bool,
    seconds: float,
    commit_ms: int,
    keys: int,
    write_buffer: int,
    blob: dict[str, str],
) -> dict[str, float]:
    config = bench_config(
        root,
        **{
            "stores.counts.backup.factories": "blobstore",
            "stores.counts.container.write.buffer.size.bytes": str(write_buffer),
            **blob,
        },
    )
    config = config.without("stores.counts.changelog")
    job = StateJob(config)
    state, _ = job.open(None)
    store = state.storage.stores["counts"]
    executor = ThreadPoolExecutor(2, thread_name_prefix="commit") if asynchronous else None
    instance = TaskInstance(
        TASK,
        RandomWriter(store),
        frozenset({INPUT}),
        ContainerContext(TASK, config, frozenset({INPUT}), "0", state.storage.stores),
        NoProducers(),
        None,  # type: ignore[arg-type]
        _NullCheckpoints(),
        {},
        {},
        storage=state.storage,
        commit_settings=CommitSettings.of(config),
        commit_executor=executor,
    )
    rng = random.Random(7)
    values = [rng.randbytes(100) for _ in range(4096)]
    pauses: list[float] = []
    batches: list[float] = []
    offset = 0
    started = time.perf_counter()
    next_commit = started + commit_ms / 1000
    while (now := time.perf_counter()) - started < seconds:
        batch = [
            IncomingMessageEnvelope(INPUT, str(offset + i), b"key%010d" % rng.randrange(keys), values[i & 4095])
            for i in range(BATCH)
        ]
        offset += BATCH
        before = time.perf_counter()
        instance.process(INPUT, batch)
        batches.append(time.perf_counter() - before)
        if now >= next_commit:
            before = time.perf_counter()
            instance.commit()
            pauses.append(time.perf_counter() - before)
            next_commit = time.perf_counter() + commit_ms / 1000
    elapsed = time.perf_counter() - started
    instance.finish_commits()
    if executor is not None:
        executor.shutdown()
    uploaded = sum(file.metadata.size for file in _uploaded_files(state))
    state.close()
    return {
        "max_pause": max(pauses),
        "median_pause": statistics.median(pauses),
        "commits": instance.committer.commits,
        "skipped": instance.committer.commits_skipped,
        "blocked": instance.committer.commits_blocked,
        "slowest_batch": max(batches),
        "median_batch": statistics.median(batches),
        "rate": offset / elapsed,
        "uploaded_mb": uploaded / 1e6,
    }


def _uploaded_files(state: Any) -> list[Any]:
    manager = next(iter(state.storage.backup_managers.values()))
    return [file for _, index in manager.previous.values() for file in index.dir_index.files_present]


class _NullCheckpoints:
    def write_checkpoint(self, task_name: str, checkpoint: Any) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--commit-ms", type=int, default=5000)
    parser.add_argument("--write-buffer-mb", type=float, default=8.0)
    parser.add_argument("--keys", type=int, default=2_000_000)
    parser.add_argument("--blob-store", choices=["local", "s3"], default="local")
    parser.add_argument("--blob-mbps", type=float, default=50.0)
    parser.add_argument("--blob-latency-ms", type=float, default=20.0)
    args = parser.parse_args()
    os.environ[MBPS_ENV] = str(args.blob_mbps)
    os.environ[LATENCY_ENV] = str(args.blob_latency_ms)
    blob = {"blob.store.manager.factory": f"{__name__}:RemoteLikeBlobStoreFactory"}
    link = f"local blob store with {args.blob_latency_ms:g} ms per request at {args.blob_mbps:g} MB/s"
    server = None
    if args.blob_store == "s3":
        from tests.integration.blob_emulators import MotoS3Server

        server = MotoS3Server(Path(tempfile.mkdtemp(prefix="millstream-bench-moto-"))).start()
        blob = {
            "blob.store.manager.factory": "s3",
            "blob.store.s3.bucket": "bench",
            "blob.store.s3.endpoint.url": server.endpoint_url,
            "sensitive.blob.store.s3.access.key.id": "bench",
            "sensitive.blob.store.s3.secret.access.key": "bench",
        }
        link = f"S3 API of a moto server at {server.endpoint_url}"
    results = {}
    try:
        for asynchronous in (True, False):
            root = Path(tempfile.mkdtemp(prefix="millstream-bench-pause-"))
            try:
                results[asynchronous] = run(
                    root,
                    asynchronous,
                    args.seconds,
                    args.commit_ms,
                    args.keys,
                    int(args.write_buffer_mb * 1024 * 1024),
                    blob,
                )
            finally:
                shutil.rmtree(root, ignore_errors=True)
    finally:
        if server is not None:
            server.stop()
    print(
        f"{args.seconds:g}s of random writes over {args.keys:,} keys, a commit every {args.commit_ms} ms, "
        f"{args.write_buffer_mb:g} MB memtable, {link}"
    )
    for asynchronous, name in ((True, "async upload"), (False, "sync upload")):
        r = results[asynchronous]
        print(
            f"{name:<13} longest pause {r['max_pause'] * 1000:>8.1f} ms  (median {r['median_pause'] * 1000:6.1f} ms)  "
            f"slowest batch of {BATCH} {r['slowest_batch'] * 1000:7.1f} ms (median {r['median_batch'] * 1000:5.1f})  "
            f"{r['rate']:>9,.0f} writes/s  commits {r['commits']:.0f} (skipped {r['skipped']:.0f}, "
            f"blocked {r['blocked']:.0f})  last snapshot {r['uploaded_mb']:,.0f} MB"
        )
    ratio = results[True]["max_pause"] / results[False]["max_pause"]
    print(f"longest pause, async / sync: {ratio:.3f} (1/{1 / ratio:.0f})")


if __name__ == "__main__":
    main()
