"""Restore time of one store from the blob store vs. from its changelog, in one run.

    python -m benchmarks.state_restore [--keys 5000000] [--value-size 16] [--blob-store local|s3]

One task's RocksDB store is filled through the store API, so every write also goes to its changelog
on the embedded log, then committed once: the snapshot is uploaded to the local blob store and the
checkpoint names both the blob snapshot and the changelog offset (``--blob-store s3``: the S3 API of a
moto server the benchmark starts on 127.0.0.1 instead of the local directory). The same checkpoint is then
restored on a "new host" (empty store directories) twice: once by downloading and verifying the
snapshot (``stores.restore.factories=blobstore``), once by replaying the changelog
(``stores.restore.factories=changelog``). Both restores are checked to hold every key.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.state_common import StateJob, bench_config, fill_store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--keys", type=int, default=5_000_000)
    parser.add_argument("--value-size", type=int, default=16)
    parser.add_argument("--blob-store", choices=["local", "s3"], default="local")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="millstream-bench-restore-"))
    server = None
    try:
        blob: dict[str, str] = {}
        if args.blob_store == "s3":
            from tests.integration.blob_emulators import MotoS3Server

            server = MotoS3Server(root / "moto").start()
            blob = {
                "blob.store.manager.factory": "s3",
                "blob.store.s3.bucket": "bench",
                "blob.store.s3.endpoint.url": server.endpoint_url,
                "sensitive.blob.store.s3.access.key.id": "bench",
                "sensitive.blob.store.s3.secret.access.key": "bench",
            }
        config = bench_config(root, **blob)
        job = StateJob(config)
        state, _ = job.open(None)
        where = f"the S3 API of moto at {server.endpoint_url}" if server else "a local directory"
        started = time.perf_counter()
        fill_store(state, args.keys, args.value_size)
        state.producers.flush("Partition 0")
        written = time.perf_counter() - started
        started = time.perf_counter()
        checkpoint = job.commit(state, args.keys)
        committed = time.perf_counter() - started
        manager = next(
            m for k, m in state.storage.backup_managers.items() if k.endswith("BlobStoreStateBackendFactory")
        )
        snapshot_bytes = sum(
            f.metadata.size
            for _, index in manager.previous.values()  # type: ignore[attr-defined]
            for f in index.dir_index.files_present
        )
        state.close()
        print(
            f"{args.keys:,} keys ({args.value_size} B values) written in {written:.1f}s through the store and its "
            f"changelog; first commit (snapshot + upload of {snapshot_bytes / 1e6:,.0f} MB) {committed:.1f}s"
        )
        timings = {}
        for source in ("blobstore", "changelog"):
            host = root / f"host-{source}"
            restore_config = config.with_overrides(
                {
                    "stores.restore.factories": source,
                    "job.logged.store.base.dir": str(host / "logged"),
                    "job.non-logged.store.base.dir": str(host / "non-logged"),
                }
            )
            restored, seconds = job.open(checkpoint, restore_config)
            engine = restored.storage.engines["counts"]
            assert restored.storage.restored_by["counts"].endswith(
                "BlobStoreStateBackendFactory" if source == "blobstore" else "KafkaChangelogStateBackendFactory"
            )
            count = sum(1 for _ in engine.all())
            assert count == args.keys, f"{source} restore holds {count:,} keys, expected {args.keys:,}"
            restored.close()
            timings[source] = seconds
            print(f"restore from {source:<10} {seconds:>8.2f}s  ({args.keys / seconds:>12,.0f} keys/s)")
        print(
            f"blob store restore ({where}) is {timings['changelog'] / timings['blobstore']:.1f}x faster "
            "than the changelog replay"
        )
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
