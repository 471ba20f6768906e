"""``/status.json``: what ``millstream job status`` reports, as JSON, with the containers' live figures.

The checkpointed lag of :func:`job_status` trails by up to a commit interval; the containers' metrics
snapshots add what each partition has processed and its lag as of the last snapshot. Every string
goes through :func:`mask_secrets`: a container's error message may quote a ``sensitive.*`` value.
"""

from __future__ import annotations

from typing import Any

import orjson

from millstream.config.secrets import mask_secrets
from millstream.config.settings import Settings
from millstream.contracts.metrics_snapshot import ContainerSnapshot, current_snapshots
from millstream.coordinator.services import DriverServices, driver_services
from millstream.coordinator.status import JobStatus, job_status
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
_EXECUTOR_FIELDS = ("executor_pid", "worker_pid", "stage", "partition", "spark_attempt", "task_attempt_id")
"""Where a Spark runner's container runs; absent for the in-process runner, whose containers are threads."""
_PROGRESS = ("restore", "bootstrap")
"""Series whose name has one of these words are a container's start-up progress (stores, adjunct stores)."""
_FAILURES = ("dead_lettered", "process_errors_skipped", "commit_failures_skipped", "commits_timed_out")


def status_document(config: Settings, services: DriverServices | None = None) -> dict[str, Any]:
    """The job's status as a JSON-ready document, with ``sensitive.*`` values masked; read with the driver's
    ``services`` (the status server calls it from its request thread, which gets a connection of its own)."""
    with driver_services(config, services) as driver:
        status = job_status(config, driver)
        store = driver.store()
        snapshots = current_snapshots(store, status.generation)
        pending = StartpointManager(store).all_fan_outs()
    job = config.job
    document = {
        "job": {"name": job.name, "id": job.id},
        "generation": status.generation,
        "driver": {"state": status.driver.state, "at-ms": status.driver.at_ms, "where": status.driver.where},
        "model": _model(status),
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
        "watermarks": _watermarks(snapshots),
    }
    return orjson.loads(mask_secrets(orjson.dumps(document).decode(), config))


def _model(status: JobStatus) -> dict[str, Any] | None:
    """The published job model: which container runs which tasks over which partitions."""
    if status.model is None:
        return None
    return {
        "generation": status.model.generation,
        "containers": {
            cid: {
                "tasks": {
                    str(name): sorted(ssp.key() for ssp in container.tasks[name].ssps)
                    for name in sorted(container.tasks, key=lambda n: n.sort_key())
                }
            }
            for cid, container in sorted(status.model.containers.items(), key=lambda item: int(item[0]))
        },
    }


def _containers(status: JobStatus, snapshots: list[ContainerSnapshot]) -> dict[str, dict[str, Any]]:
    reported = {s.container_id: s for s in snapshots}
    containers: dict[str, dict[str, Any]] = {}
    for container_id, record in sorted(status.containers.items()):
        shown = {key: record[key] for key in _CONTAINER_FIELDS if key in record}
        executor = {key: record[key] for key in _EXECUTOR_FIELDS if key in record}
        if executor:
            shown["executor"] = executor
        snapshot = reported.get(container_id)
        if snapshot is not None:
            shown.update(_live(snapshot))
        containers[container_id] = shown
    return containers


def _live(snapshot: ContainerSnapshot) -> dict[str, Any]:
    """A container's figures from its last snapshot: per task, progress of its start-up, failures so far."""
    tasks: dict[str, dict[str, Any]] = {}
    progress = []
    failures: dict[str, float] = {}
    for sample in snapshot.samples:
        labels = dict(sample.labels)
        task = labels.get("task")
        if any(word in sample.name for word in _PROGRESS):
            progress.append({"name": sample.name, "labels": labels, "value": sample.value, "count": sample.count})
        elif sample.name in _FAILURES:
            failures[sample.name] = failures.get(sample.name, 0) + sample.value
        if task is None:
            continue
        figures = tasks.setdefault(task, {"processed": 0, "lag": None, "commits": 0})
        if sample.name == "processed":
            figures["processed"] += int(sample.value)
        elif sample.name == "lag":
            figures["lag"] = int(sample.value) + (figures["lag"] or 0)
        elif sample.name == "commits":
            figures["commits"] = int(sample.value)
        elif sample.name == "commit" and sample.kind == "timer" and sample.count:
            figures["commit_seconds"] = {"count": sample.count, "mean": sample.value / sample.count, "max": sample.max}
    return {
        "metrics_written_ms": snapshot.written_ms,
        "processed": sum(t["processed"] for t in tasks.values()),
        "tasks": tasks,
        "progress": progress,
        "failures": failures,
    }


def _watermarks(snapshots: list[ContainerSnapshot]) -> list[dict[str, Any]]:
    """Every watermark series the containers report (per input partition or operator), as of their snapshot."""
    return [
        {"container": snapshot.container_id, "name": sample.name, "labels": dict(sample.labels), "value": sample.value}
        for snapshot in snapshots
        for sample in snapshot.samples
        if "watermark" in sample.name
    ]


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
