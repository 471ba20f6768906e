"""Host affinity: a container launched again prefers the executor (or host) where it last ran, where its local
state is, so its restore reuses the local checkpoint instead of downloading or replaying its stores.

PySpark's ``parallelize`` has no location preferences, but the JVM's ``SparkContext.makeRDD`` takes one list
of preferred locations per element, one element per partition. The container RDD is built there from the
pickled container ids and wrapped as a Python RDD, so the task of partition ``i`` (container ``i``) asks Spark
for the recorded place. Spark waits ``spark.locality.wait`` (3 s) for it, then takes any free slot: a lost host
delays a container by that wait, never more.

Where a container runs is seen from the driver: while the containers' job runs, the driver reads its running
tasks from Spark's status store (partition, executor, host) and records each in the metadata store
(``container-placement/<id>``). Within the same Spark application the preference is the executor itself
(``executor_<host>_<id>``, Spark's executor-cache location: several executors can share a host); in a new
application executor ids start again, so only the host is preferred. Local masters have one executor: nothing
is recorded or preferred there.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark import RDD, SparkContext
from pyspark.serializers import CPickleSerializer

from millstream.contracts import coordination
from millstream.contracts.metadata import MetadataStore
from millstream.spark.run.running_tasks import running_tasks
from millstream.spark.run.session import local_slots

log = logging.getLogger(__name__)


def affinity_applies(sc: SparkContext) -> bool:
    """Only a cluster has several places to choose from."""
    return local_slots(str(sc.master)) is None


def preferred_locations(
    placements: Mapping[str, Mapping[str, str]], application_id: str, count: int
) -> dict[int, list[str]]:
    """Each container's preferred Spark location from its recorded placement: its executor in the same
    application, else its host."""
    locations: dict[int, list[str]] = {}
    for index in range(count):
        placement = placements.get(str(index))
        if not placement or not placement.get("host"):
            continue
        host = placement["host"]
        if placement.get("application_id") == application_id and placement.get("executor_id"):
            locations[index] = [f"executor_{host}_{placement['executor_id']}"]
        else:
            locations[index] = [host]
    return locations


def container_rdd(sc: SparkContext, count: int, locations: Mapping[int, Sequence[str]]) -> RDD[int]:
    """``count`` partitions, partition ``i`` holding ``i``, each preferring ``locations[i]`` (if any)."""
    if not any(locations.get(index) for index in range(count)):
        return sc.parallelize(range(count), count)
    jvm: Any = sc._jvm
    serializer = CPickleSerializer()
    utils = jvm.org.apache.spark.api.python.PythonUtils
    elements = jvm.java.util.ArrayList()
    for index in range(count):
        hosts = jvm.java.util.ArrayList()
        for location in locations.get(index, ()):
            hosts.add(location)
        elements.add(jvm.scala.Tuple2(bytearray(serializer.dumps(index)), utils.toSeq(hosts)))
    byte_array = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("[B"))
    java_rdd = sc._jsc.sc().makeRDD(utils.toSeq(elements), byte_array)
    return RDD(java_rdd.toJavaRDD(), sc, serializer)


def rdd_preferred_locations(rdd: RDD[Any]) -> list[list[str]]:
    """What Spark's scheduler sees as each partition's preferred locations (for logs and tests)."""
    java_rdd = rdd._jrdd.rdd()
    partitions = java_rdd.partitions()
    result = []
    for partition in partitions:
        seq = java_rdd.preferredLocations(partition)
        result.append([str(seq.apply(i)) for i in range(seq.size())])
    return result


class PlacementRecorder:
    """Records where the running containers of a job group are, from Spark's status store, as they start."""

    def __init__(self, sc: SparkContext, store: MetadataStore, group: str) -> None:
        self._sc = sc
        self._store = store
        self._group = group
        self._seen: dict[int, tuple[str, str]] = {}
        self._enabled = affinity_applies(sc)

    def poll(self) -> None:
        """Record containers seen on a new executor since the last poll; never fails the job (advisory)."""
        if not self._enabled:
            return
        try:
            running = running_tasks(self._sc, self._group)
        except Exception as error:  # py4j or a status store without the stage yet: the next poll tries again
            log.debug("cannot read the containers' placements from Spark's status store: %s", error)
            return
        for index, task in running.items():
            executor_id, host = task.executor_id, task.host
            if self._seen.get(index) == (executor_id, host):
                continue
            self._seen[index] = (executor_id, host)
            placement = {"host": host, "executor_id": executor_id, "application_id": str(self._sc.applicationId)}
            coordination.record_container_placement(self._store, str(index), placement)
            log.info("container %s runs on executor %s (host %s)", index, executor_id, host)


def launch_locations(sc: SparkContext, store: MetadataStore, count: int) -> dict[int, list[str]]:
    """The containers' preferred locations for this launch (none on a local master)."""
    if not affinity_applies(sc):
        return {}
    locations = preferred_locations(coordination.container_placements(store), str(sc.applicationId), count)
    if locations:
        log.info("containers prefer where they last ran: %s", locations)
    return locations
