"""A Kafka → Kafka job on a Spark standalone cluster (a master and two workers on 127.0.0.1) with
checkpoints and metadata in Kafka only: containers in different executors share nothing but Kafka.

Each worker has a "local disk" of its own (``$MILLSTREAM_TEST_HOST_DISK``, set in the worker's environment, which
its executors and Python workers inherit), as separate hosts would: a container that moves to the other worker
finds none of its local state there."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import orjson
import pytest
from pyspark.sql import SparkSession

from millstream.composition.metadata import metadata_store
from millstream.contracts import coordination
from millstream.spark.run.session import build_session
from tests.helpers import wait_until
from tests.integration.kafka.helpers import (
    TopicTail,
    create_topic,
    job_config,
    produce,
    produce_numbers,
    read_all,
)
from tests.integration.kafka.test_spark_local import RunningJob, checkpointed_offsets, no_sqlite_files
from tests.spark.standalone import StandaloneCluster

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

DISK = "MILLSTREAM_TEST_HOST_DISK"
CORES = 2
"""Per worker: two containers start one on each worker (Spark spreads tasks over executors), and either worker
alone still has a slot for both."""


def host_disk(root: Path, worker: int) -> Path:
    return root / f"host-{worker}-disk"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()  # one SparkContext per process: the local-mode session goes first
    root = tmp_path_factory.mktemp("spark-standalone-kafka")
    cluster = StandaloneCluster(root, workers=2, cores=CORES, worker_env=lambda i: {DISK: str(host_disk(root, i))})
    cluster.start()
    yield cluster
    cluster.stop()


def test_kafka_job_on_a_standalone_cluster_with_containers_in_different_executors(
    cluster, bootstrap, topic_name, tmp_path
):
    source, sink = topic_name("in"), topic_name("out")
    create_topic(bootstrap, source, 4)
    create_topic(bootstrap, sink, 4)
    config = job_config(
        bootstrap,
        tmp_path,
        source,
        sink,
        job__container__count=2,
        # One core per executor, so an executor holds one container: the slot check counts an executor once it
        # registered, but Spark offers its cores only once it launched, so two-core executors could both take
        # the first to launch. Each worker runs two executors of 512m; the job starts once all four registered,
        # which took 43 s in one CI run (four executor JVMs starting at once beside the other tests): up to 180 s.
        job__coordinator__slots__headroom=2,
        job__coordinator__slots__wait__ms=180_000,
        spark__executor__cores="1",
        spark__driver__host="127.0.0.1",
        spark__driver__bindAddress="127.0.0.1",
        spark__executor__memory="512m",
    )
    written = produce_numbers(bootstrap, source, 4, 250)
    tail = TopicTail(bootstrap, sink, 4)
    spark = build_session(config, master=cluster.master_url)
    try:
        job = RunningJob(config, spark)
        try:
            tail.wait_for(written, timeout=180)
        finally:
            result = job.stop(timeout=180)
    finally:
        spark.stop()
    assert result.outcome == "stopped", result.error
    assert sorted(tail.origins()) == sorted(written)
    executors = {c.container_id: (c.executor["executor_pid"], c.executor["cwd"]) for c in result.containers}
    assert executors["0"] != executors["1"], executors
    assert all("/worker-" in cwd for _, cwd in executors.values())
    assert checkpointed_offsets(config) == {(p, p): 249 for p in range(4)}
    no_sqlite_files(tmp_path)
    tail.close()


RESTORED = re.compile(r"restored from .+? in [\d.]+s: (\d+) record\(s\) replayed( after local checkpoint \S+)?")


def _restores(cluster: StandaloneCluster) -> dict[Path, list[tuple[int, bool]]]:
    """Per executor directory (``<worker dir>/<application>/<executor>``), each store restore its log shows: the
    records replayed from the changelog, and whether a local checkpoint was copied into place first."""
    return {
        log.parent: [(int(match.group(1)), match.group(2) is not None) for match in RESTORED.finditer(log.read_text())]
        for log in cluster.work_dir.glob("worker-*/*/*/stderr")
    }


def _new_restores(before: dict[Path, list[tuple[int, bool]]], cluster: StandaloneCluster) -> dict[Path, list]:
    """The restores logged since ``before``, per executor directory that logged any."""
    after = _restores(cluster)
    new = {path: entries[len(before.get(path, [])) :] for path, entries in after.items()}
    return {path: entries for path, entries in new.items() if entries}


def executor_on_another_worker(executor_dir: Path, live: set[str]) -> str:
    """A live executor of the same application on a worker other than the one of ``executor_dir``
    (``<work dir>/worker-<n>/<application>/<executor>``): an executor that died and was replaced leaves the
    application more executors than workers, so "not this executor" may be on the same worker."""
    worker, application = executor_dir.parent.parent, executor_dir.parent.name
    found = sorted(
        path.name
        for path in worker.parent.glob(f"worker-*/{application}/*")
        if path.parent.parent != worker and path.name in live
    )
    assert found, f"no live executor of {application} outside {worker.name}: {sorted(live)}"
    return found[0]


def test_a_stateful_container_launched_again_returns_to_its_executor_and_restores_from_its_local_checkpoint(
    cluster, bootstrap, topic_name, tmp_path
):
    """Host affinity measured: a stateful container stopped and launched again (a new generation of the job, in the
    same Spark application) is placed on the executor where it last ran, whose disk holds its local checkpoint, and
    each store restores from that checkpoint with 0 records replayed from the changelog. The control launch is sent
    to the other worker, whose disk has none of its state: it replays the changelog. Counts stay exact throughout."""
    source, sink, changelog = topic_name("in"), topic_name("out"), topic_name("counts")
    partitions, keys, batch = 2, 3, 60
    create_topic(bootstrap, source, partitions)
    create_topic(bootstrap, sink, partitions)
    config = job_config(
        bootstrap,
        tmp_path,
        source,
        sink,
        task__class="tests.integration.kafka.jobs:KafkaCountPerKey",
        stores__counts__factory="rocksdb",
        stores__counts__key__serde="string",
        stores__counts__msg__serde="json",
        stores__counts__changelog=f"kafka.{changelog}",
        job__logged__store__base__dir=f"${DISK}/affinity/logged",  # apart from the other tests' stores
        **{"job__non-logged__store__base__dir": f"${DISK}/affinity/non-logged"},
        job__container__count=1,
        job__coordinator__slots__headroom=2 * CORES - 1,  # every slot: both executors registered before the launch
        job__coordinator__slots__wait__ms=120_000,
        spark__driver__host="127.0.0.1",
        spark__driver__bindAddress="127.0.0.1",
        spark__executor__memory="512m",
    )
    tail = TopicTail(bootstrap, sink, partitions)
    store = metadata_store(config)
    spark = build_session(config, master=cluster.master_url)

    def run_once(launch: int) -> tuple[str, dict[Path, list[tuple[int, bool]]]]:
        """Launch the job, count one more batch of every partition, stop it: where it ran and its restores."""
        before = _restores(cluster)
        values = range(launch * batch, (launch + 1) * batch)
        for partition in range(partitions):
            produce(bootstrap, source, [(f"k{v % keys}".encode(), b"%d" % v) for v in values], partition=partition)
        job = RunningJob(config, spark)
        try:
            tail.wait_for({(p, v) for p in range(partitions) for v in values}, timeout=180)
        finally:
            result = job.stop(timeout=180)
        assert result.outcome == "stopped", result.error
        (container,) = result.containers
        return str(container.executor["cwd"]).rstrip("/"), _new_restores(before, cluster)

    try:
        first, _ = run_once(0)
        again, restores = run_once(1)
        placement = coordination.container_placements(store)["0"]
        ids = spark.sparkContext._jsc.sc().getExecutorIds()
        other = executor_on_another_worker(Path(first), {str(ids.apply(n)) for n in range(ids.size())})
        coordination.record_container_placement(store, "0", {**placement, "executor_id": other})
        moved, control = run_once(2)
    finally:
        spark.stop()
        store.close()
    assert again == first, "the container launched again left the executor holding its local state"
    assert restores == {Path(first): [(0, True)] * partitions}, restores  # each task's store: its local checkpoint
    assert moved.rsplit("/", 1)[-1] == other and moved.split("/worker-")[1][0] != first.split("/worker-")[1][0]
    (entries,) = control.values()
    assert len(entries) == partitions and all(replayed > 0 and not local for replayed, local in entries), control
    wrong = [r for r in tail.values if r["count"] != int(r["v"]) // keys + 1]
    assert not wrong, f"{len(wrong)} count(s) wrong after a restore, e.g. {wrong[:3]}"
    tail.close()


def worker_and_executors(cluster: StandaloneCluster, worker: int) -> list[int]:
    """The pids of worker ``worker``'s JVM and of the executor JVMs it launched (its children)."""
    pid = cluster.processes[1 + worker].pid
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                children.append(int(entry.name))
    return [pid, *children]


def test_a_stateful_multi_host_job_that_loses_a_worker_ends_with_exact_state_restored_on_the_other_host(
    cluster, bootstrap, topic_name, tmp_path
):
    """The multi-host recipe (Kafka inputs, changelog, checkpoints and metadata; stores on each host's own disk):
    a worker and its executor are killed while both containers run; its container restarts on the other worker,
    where no local state of it exists, restores from the Kafka changelog, and every count and the final state are
    exact.
    Runs last in the module: the cluster has one worker left afterwards."""
    source, sink, changelog = topic_name("in"), topic_name("out"), topic_name("counts")
    partitions, per_partition, keys = 4, 300, 3
    create_topic(bootstrap, source, partitions)
    create_topic(bootstrap, sink, partitions)
    half = per_partition // 2

    def produce_values(values: range) -> None:
        for partition in range(partitions):
            records = [(f"k{v % keys}".encode(), b"%d" % v) for v in values]
            produce(bootstrap, source, records, partition=partition)

    produce_values(range(half))  # the second half comes after the kill: its counts build on the restored state
    config = job_config(
        bootstrap,
        tmp_path,
        source,
        sink,
        task__class="tests.integration.kafka.jobs:KafkaCountPerKey",
        stores__counts__factory="rocksdb",
        stores__counts__key__serde="string",
        stores__counts__msg__serde="json",
        stores__counts__changelog=f"kafka.{changelog}",
        job__logged__store__base__dir=f"${DISK}/stores/logged",
        **{"job__non-logged__store__base__dir": f"${DISK}/stores/non-logged"},
        job__container__count=2,
        job__coordinator__slots__headroom=2,  # the job starts once both executors registered: one container on each
        job__coordinator__slots__wait__ms=120_000,
        test__delay__seconds="0.01",
        spark__driver__host="127.0.0.1",
        spark__driver__bindAddress="127.0.0.1",
        spark__executor__memory="512m",
    )
    disks = [host_disk(cluster.work_dir, worker) for worker in range(2)]
    tail = TopicTail(bootstrap, sink, partitions)
    spark = build_session(config, master=cluster.master_url)
    try:
        job = RunningJob(config, spark)
        try:
            # every task's stores on the disk of the worker that runs its container
            wait_until(lambda: len(_stores(disks[0]) | _stores(disks[1])) == partitions, 180, "every task's stores")
            wait_until(lambda: len(tail.poll()) >= partitions * per_partition // 4, 120, "a quarter processed")
            lost, kept = (0, 1) if _stores(disks[0]) else (1, 0)
            moved = _stores(disks[lost])
            assert not moved & _stores(disks[kept]), "each task's stores on one worker's disk only"
            for pid in worker_and_executors(cluster, lost):
                os.kill(pid, signal.SIGKILL)
            produce_values(range(half, per_partition))
            expected = {(p, v) for p in range(partitions) for v in range(per_partition)}
            tail.wait_for(expected, timeout=300)
        finally:
            result = job.stop(timeout=180)
    finally:
        spark.stop()
    assert result.outcome == "stopped", result.error
    wrong = [r for r in tail.values if r["count"] != int(r["v"]) // keys + 1]
    assert not wrong, f"{len(wrong)} count(s) wrong after the restore, e.g. {wrong[:3]}"
    assert all(f"/worker-{kept}/" in container.executor["cwd"] for container in result.containers), result.containers
    assert moved <= _stores(disks[kept]), "the moved container's stores were rebuilt on the other worker's own disk"
    final = {}
    for message in read_all(bootstrap, changelog, partitions):
        final[(message.partition(), message.key().decode())] = orjson.loads(message.value())
    assert final == {(p, f"k{k}"): per_partition // keys for p in range(partitions) for k in range(keys)}
    tail.close()


def _stores(disk: Path) -> set[str]:
    """The tasks whose store ``counts`` has directories on one worker's disk (an attempt's ``<task>@<g>.<e>``, the
    owner's ``<task>@owner``, checkpoints ``<task>-<checkpoint id>``)."""
    base = disk / "stores" / "logged" / "counts"
    if not base.is_dir():
        return set()
    return {match.group(0) for path in base.iterdir() if (match := re.match(r"Partition_\d+", path.name))}
