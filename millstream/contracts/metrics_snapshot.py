"""A container's metrics as the driver reads them: one JSON record per container in the metadata store.

Containers run in Spark's Python workers, on hosts and ports nobody scrapes; the metadata store is the
one place every container and the driver already share. Each container overwrites its record every
``metrics.snapshot.interval.ms`` (and once more when it stops), so the driver serves the whole job from
one port, and a record names the generation and attempt that wrote it so a stale one can be left out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import orjson

from millstream.contracts.metadata import MetadataStore
from millstream.contracts.metrics import Sample

log = logging.getLogger(__name__)

METRICS_NAMESPACE = "metrics"


@dataclass(frozen=True)
class ContainerSnapshot:
    container_id: str
    generation: int
    attempt: int
    written_ms: int
    state: str
    """``running`` while the container runs; ``stopped`` in the record it writes last."""
    samples: list[Sample] = field(default_factory=list)

    def to_bytes(self) -> bytes:
        return orjson.dumps(
            {
                "container": self.container_id,
                "generation": self.generation,
                "attempt": self.attempt,
                "written_ms": self.written_ms,
                "state": self.state,
                "samples": [_encode(sample) for sample in self.samples],
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> ContainerSnapshot:
        document = orjson.loads(data)
        return cls(
            str(document["container"]),
            int(document["generation"]),
            int(document["attempt"]),
            int(document["written_ms"]),
            str(document.get("state", "running")),
            [_decode(sample) for sample in document["samples"]],
        )


def _encode(sample: Sample) -> dict[str, Any]:
    encoded: dict[str, Any] = {"n": sample.name, "k": sample.kind, "l": dict(sample.labels), "v": sample.value}
    if sample.kind == "timer":
        encoded.update(c=sample.count, m=sample.max)
    return encoded


def _decode(encoded: dict[str, Any]) -> Sample:
    labels = tuple(sorted((str(k), str(v)) for k, v in encoded["l"].items()))
    return Sample(
        encoded["n"], encoded["k"], labels, float(encoded["v"]), int(encoded.get("c", 0)), encoded.get("m", 0)
    )


def write_snapshot(store: MetadataStore, snapshot: ContainerSnapshot) -> None:
    store.put(METRICS_NAMESPACE, snapshot.container_id, snapshot.to_bytes())


def read_snapshots(store: MetadataStore) -> dict[str, ContainerSnapshot]:
    """Every container's last record; an unreadable one is logged and left out (metrics are informational)."""
    snapshots: dict[str, ContainerSnapshot] = {}
    for container_id, data in store.all(METRICS_NAMESPACE).items():
        try:
            snapshots[container_id] = ContainerSnapshot.from_bytes(data)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            log.warning("container %s: unreadable metrics record: %s", container_id, error)
    return snapshots


def current_snapshots(store: MetadataStore, generation: int) -> list[ContainerSnapshot]:
    """The records of ``generation``'s containers, in container order: after a restart with fewer
    containers, or a new generation, the old records are not the job's any more."""
    records = [s for s in read_snapshots(store).values() if s.generation == generation]
    return sorted(records, key=lambda s: (len(s.container_id), s.container_id))
