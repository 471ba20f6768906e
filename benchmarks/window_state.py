"""Window state at scale: a tumbling count over N distinct keys, run by the in-process runner.

    python -m benchmarks.window_state [--keys 1000000] [--backend changelog|blobstore] [--commit-ms 10000]

One input partition holds ``--keys`` messages, one per key, every one in the same 60 s window, and the
input stays open, so the window never fires: at every commit the task holds one accumulator per key
(the count and the last message's 100 B payload: about 150 B of state per key, ≥ 100 MB at 1M keys).
The job runs until a checkpoint covers the whole input, then stops (a final commit). Reported:

* **commit pause**: the longest and the last ``TaskInstance.commit`` on the task's thread (the time a
  commit holds processing; an asynchronous upload is not part of it);
* **metadata bytes**: what the metadata store holds (SQLite, sum of value sizes), and of it the
  ``control-state`` and ``checkpoint`` entries;
* **restore**: the job started again on a "new host" (its local store directories deleted first), from
  the runner's start until the task's ``init`` returned: the stores restored (from the changelog or the
  blob store) and the window's index rebuilt;
* the process's peak RSS.

The same script runs on a version that kept window state in the metadata store (``--backend`` is then
irrelevant: the state is pickled into ``control-state/<task>``), for the before/after table of
``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from millstream.api.application import InputDescriptor, OutputDescriptor, StreamApplication, StreamApplicationDescriptor
from millstream.api.windows import Aggregator, TumblingWindow
from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.composition.systems import system_factory
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.contracts.systems import StreamSpec
from millstream.coordinator.prepare import prepare
from millstream.model import SystemStream
from millstream.operators.graph_task import OperatorGraphTask
from millstream.runtime.task_instance import TaskInstance
from millstream.testing import InProcessRunner, write_stream

WINDOW_MS = 60_000
PAD = "x" * 100
IN = SystemStream("log", "in")


class CountAndLast(Aggregator):
    """A count that also keeps the last message's payload, so each key holds some real state."""

    def initial(self) -> Any:
        return [0, ""]

    def add(self, accumulator: Any, message: Any) -> Any:
        return [accumulator[0] + 1, message["pad"]]

    def result(self, accumulator: Any) -> Any:
        return accumulator[0]


class DistinctKeyWindow(StreamApplication):
    def describe(self, app: StreamApplicationDescriptor) -> None:
        (
            app.input(InputDescriptor("log.in", key_serde="string", msg_serde="json", timestamp=lambda m: m["ts"]))
            .window(TumblingWindow(WINDOW_MS), key=lambda m: m["key"], aggregate=CountAndLast(), name="per-key")
            .map(lambda pane: {"key": pane.key, "count": pane.value})
            .send_to(OutputDescriptor("log.out", msg_serde="json"))
        )


def job_config(root: Path, backend: str, commit_ms: int) -> Config:
    values = {
        "job.name": "window-state",
        "job.data.dir": str(root),
        "app.class": "benchmarks.window_state:DistinctKeyWindow",
        "task.commit.ms": str(commit_ms),
        "systems.log.samza.offset.default": "oldest",
        "systems.log.producer.batch.size": "5000",
    }
    if backend == "blobstore":
        values.update({"stores.backup.factories": "blobstore", "task.checkpoint.read.versions": "2,1"})
    return prepare(Settings(values))


class Timings:
    """Wraps ``TaskInstance.commit`` and ``OperatorGraphTask.init`` to time them (both versions have them)."""

    def __init__(self) -> None:
        self.commits: list[float] = []
        self.init_done: float | None = None
        commit, init = TaskInstance.commit, OperatorGraphTask.init
        timings = self

        def timed_commit(instance: TaskInstance) -> None:
            started = time.perf_counter()
            commit(instance)
            timings.commits.append(time.perf_counter() - started)

        def timed_init(task: OperatorGraphTask, context: Any) -> None:
            init(task, context)
            timings.init_done = time.perf_counter()

        TaskInstance.commit = timed_commit  # type: ignore[method-assign]
        OperatorGraphTask.init = timed_init  # type: ignore[method-assign]


def run_until(config: Config, done: Callable[[], bool]) -> None:
    """Run the job until ``done()``, then stop it (the containers commit)."""
    runner = InProcessRunner(config)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        while not done():
            if not thread.is_alive():
                raise SystemExit("the job ended before it was done")
            time.sleep(0.1)
    finally:
        runner.request_stop()
        thread.join()


def covered(config: Config, last_offset: int) -> Callable[[], bool]:
    """Whether a checkpoint covers ``last_offset`` of the input."""

    def probe() -> bool:
        store = metadata_store(config)
        store.init()
        try:
            checkpoint = next(iter(checkpoint_manager(config, store).read_all().values()), None)
        finally:
            store.close()
        offset = None if checkpoint is None else checkpoint.offsets.get(IN.partition(0))
        return offset is not None and int(offset) >= last_offset

    return probe


def create_stream(config: Config, stream: str) -> None:
    admin = system_factory(config, "log").get_admin("log", config)
    admin.start()
    try:
        admin.create_stream(StreamSpec("log", stream, 1))
    finally:
        admin.stop()


def metadata_bytes(root: Path) -> dict[str, int]:
    (path,) = root.glob("jobs/*/metadata.db")
    with sqlite3.connect(path) as connection:
        rows = connection.execute("SELECT namespace, SUM(LENGTH(value)) FROM metadata GROUP BY namespace").fetchall()
    sizes = {namespace: int(size) for namespace, size in rows}
    return {
        "total": sum(sizes.values()),
        "control-state": sizes.get("control-state", 0),
        "checkpoint": sum(size for namespace, size in sizes.items() if "checkpoint" in namespace),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--backend", choices=["changelog", "blobstore"], default="changelog")
    parser.add_argument("--commit-ms", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, default=None, help="where the job's data goes (default: a temp dir)")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="window-state-"))
    config = job_config(root, args.backend, args.commit_ms)
    create_stream(config, "in")
    create_stream(config, "out")
    started = time.perf_counter()
    write_stream(config, IN, ((f"k{i}", {"key": f"key-{i:08d}", "ts": i % 1000, "pad": PAD}) for i in range(args.keys)))
    written = time.perf_counter() - started
    timings = Timings()
    started = time.perf_counter()
    run_until(config, covered(config, args.keys - 1))
    processed = time.perf_counter() - started
    commits = list(timings.commits)
    sizes = metadata_bytes(root)
    for stores in root.glob("jobs/*/stores"):
        shutil.rmtree(stores)  # a new host: restore from the backup, not from local files
    timings.init_done = None
    started = time.perf_counter()
    run_until(config, lambda: timings.init_done is not None)
    assert timings.init_done is not None
    restore = timings.init_done - started
    result = {
        "keys": args.keys,
        "backend": args.backend,
        "write_s": round(written, 1),
        "process_s": round(processed, 1),
        "commits": len(commits),
        "commit_pause_max_ms": round(max(commits) * 1000, 1),
        "commit_pause_last_ms": round(commits[-1] * 1000, 1),
        "metadata_bytes": sizes,
        "restore_s": round(restore, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }
    print(json.dumps(result))
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
