"""``/status.json``: what ``millstream job status`` reports, as JSON, with the containers' live figures.

The checkpointed lag of :func:`job_status` trails by up to a commit interval; the containers' metrics
snapshots add what each partition has processed and its lag as of the last snapshot. Every string
goes through :func:`mask_secrets`: a container's error message may quote a ``sensitive.*`` value.
"""

from __future__ import annotations

from typing import Any

import orjson

from millstream.config import Config, JobConfig
from millstream.config.core import mask_secrets
from millstream.coordinator.status import JobStatus, job_status
from millstream.metadata.factory import metadata_store
from millstream.metrics.snapshot import ContainerSnapshot, current_snapshots
from millstream.startpoint.manager import StartpointManager

_CONTAINER_FIELDS = (
    "state",
    "attempt",
    "generation",
    "run-id",
    "host",
    "pid",
    "error",
    "executor_pid",
    "spark_attempt",
    "restarts",
    "backoff-ms",
    "backoff-until",
)


def status_document(config: Config) -> dict[str, Any]:
    """The job's status as a JSON-ready document, with ``sensitive.*`` values masked."""
    status = job_status(config)
    with metadata_store(config) as store:
        snapshots = current_snapshots(store, status.generation)
        pending = StartpointManager(store).all_fan_outs()
    job = JobConfig.of(config)
    document = {
        "job": {"name": job.name, "id": job.id},
        "generation": status.generation,
        "containers": _containers(status, snapshots),
        "partitions": _partitions(status, snapshots),
        "adjunct": [
            {"store": a.store, "owner": a.owner, "ssp": a.ssp.key(), "position": a.position, "lag": a.lag}
            for a in status.adjunct
        ],
        "startpoints": {
            "pending": [
                {"task": str(task), "ssp": ssp.key(), "startpoint": str(startpoint)}
                for task, by_ssp in sorted(pending.items(), key=lambda item: str(item[0]))
                for ssp, startpoint in sorted(by_ssp.items())
            ],
            "failures": status.startpoint_failures,
        },
        "watermarks": None,
    }
    return orjson.loads(mask_secrets(orjson.dumps(document).decode(), config))


def _containers(status: JobStatus, snapshots: list[ContainerSnapshot]) -> dict[str, dict[str, Any]]:
    reported = {s.container_id: s for s in snapshots}
    containers: dict[str, dict[str, Any]] = {}
    for container_id, record in sorted(status.containers.items()):
        shown = {key: record[key] for key in _CONTAINER_FIELDS if key in record}
        snapshot = reported.get(container_id)
        if snapshot is not None:
            shown["metrics_written_ms"] = snapshot.written_ms
        containers[container_id] = shown
    return containers


def _partitions(status: JobStatus, snapshots: list[ContainerSnapshot]) -> list[dict[str, Any]]:
    live: dict[tuple[str, str], dict[str, float]] = {}
    for snapshot in snapshots:
        for sample in snapshot.samples:
            if sample.name in ("processed", "lag"):
                labels = dict(sample.labels)
                key = (
                    labels.get("task", ""),
                    f"{labels.get('system')}.{labels.get('stream')}.{labels.get('partition')}",
                )
                live.setdefault(key, {})[sample.name] = sample.value
    rows = []
    for lag in status.lag:
        figures = live.get((lag.task, f"{lag.ssp.system}.{lag.ssp.stream}.{lag.ssp.partition}"), {})
        rows.append(
            {
                "task": lag.task,
                "system": lag.ssp.system,
                "stream": lag.ssp.stream,
                "partition": lag.ssp.partition,
                "checkpointed": lag.checkpointed,
                "upcoming": lag.upcoming,
                "checkpoint_lag": lag.lag,
                "processed": int(figures["processed"]) if "processed" in figures else None,
                "lag": int(figures["lag"]) if "lag" in figures else None,
            }
        )
    return rows
