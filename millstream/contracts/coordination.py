"""The records the coordinator and the containers share through the metadata store.

* ``job-coordinator/generation``: the job model generation the driver has published. A container
  started for an older generation is a zombie; its fenced writes are refused.
* ``generation-started/<generation>``: when the generation was published (ISO 8601, UTC), written before it
  becomes current, so a superseded run can say which run took over: "superseded by generation N started at …".
* ``container-epoch/<container id>``: how many attempts of the container have started. Each new
  attempt increments it, which fences every earlier attempt of the same container.
* ``job-coordinator/stop``: a request that containers of a generation (and older ones) stop.
* ``container-status/<container id>``: what the container's latest attempt last reported about itself (JSON),
  fenced by generation and attempt: a zombie attempt's late report never replaces the live attempt's.
* ``container-heartbeat/<container id>``: the latest attempt's last heartbeat (JSON: generation, attempt, a beat
  counter), fenced like the status; the driver replaces a running container whose heartbeat stopped changing.
* ``container-placement/<container id>``: where the driver last saw the container run (JSON: host, executor id,
  Spark application id): its local state is there, so its next launch prefers that place.
* ``drain/<run id>``: a request that the containers of that run drain (``millstream job drain``): stop
  reading their inputs, pass a drain through the intermediate streams, commit and stop. Cleared when a
  new generation is published, so a run that reuses ``app.run.id`` is not drained by an old request.
* ``failures/<container id>``: the user-code failures of the container's attempts in the current generation
  (JSON: the last one's task, stream, partition, offset, exception type and digest, its attempt, and how often
  each distinct failure happened).
* ``job-coordinator/failed``: a failure found deterministic (it repeated ``job.container.failure.repeat.limit``
  times): the driver ends the job with its message, and retries of the container do not start. Both are
  cleared when a new generation is published, so a fixed and restarted job is not failed by an old record.

Numbers are stored as their decimal text, so a fenced write compares exact bytes.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

from millstream.config.settings import Settings
from millstream.contracts.metadata import FencedError, MetadataStore
from millstream.errors import MillstreamError
from millstream.job_model import JOB_MODEL_NAMESPACE, JobModel

logger = logging.getLogger(__name__)

JOB_COORDINATOR_NAMESPACE = "job-coordinator"
GENERATION_KEY = "generation"
STOP_KEY = "stop"
CONTAINER_EPOCH_NAMESPACE = "container-epoch"
CONTAINER_STATUS_NAMESPACE = "container-status"
CONTAINER_HEARTBEAT_NAMESPACE = "container-heartbeat"
CONTAINER_PLACEMENT_NAMESPACE = "container-placement"
GENERATION_STARTED_NAMESPACE = "generation-started"


class CoordinationRecordError(MillstreamError):
    """A coordination record holds something other than what this module writes; names the record."""


def _encode(number: int) -> bytes:
    return str(number).encode()


def _decode(raw: bytes | None, where: str) -> int | None:
    if raw is None:
        return None
    try:
        return int(raw.decode())
    except (UnicodeDecodeError, ValueError):
        raise CoordinationRecordError(f"metadata record '{where}' holds {raw!r}, not a number") from None


def writer_expectation(generation: int, container_id: str, epoch: int) -> dict[tuple[str, str], bytes | None]:
    """What ``compare_and_put`` must find for a write by this container attempt to be accepted:
    the job still at ``generation`` and the container still at attempt ``epoch``."""
    return {
        (JOB_COORDINATOR_NAMESPACE, GENERATION_KEY): _encode(generation),
        (CONTAINER_EPOCH_NAMESPACE, container_id): _encode(epoch),
    }


def publish_generation(store: MetadataStore, generation: int) -> None:
    """Make ``generation`` the job's current generation, fencing writers of every older one.

    Generations only move forward: publishing one older than the current raises ``FencedError``
    (a stale driver must not revive its zombies). Republishing the current one is a no-op.
    """
    where = f"{JOB_COORDINATOR_NAMESPACE}/{GENERATION_KEY}"
    while True:
        raw = store.get(JOB_COORDINATOR_NAMESPACE, GENERATION_KEY)
        current = _decode(raw, where)
        if current is not None and current > generation:
            raise FencedError(f"cannot publish generation {generation}: generation {current} is already published")
        if current == generation:
            return
        started = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        store.put(GENERATION_STARTED_NAMESPACE, str(generation), started.encode())
        expected = {(JOB_COORDINATOR_NAMESPACE, GENERATION_KEY): raw}
        if store.compare_and_put(JOB_COORDINATOR_NAMESPACE, GENERATION_KEY, _encode(generation), expected):
            return


def current_generation(store: MetadataStore) -> int:
    """The published generation; 0 when none has been published yet."""
    current = _decode(
        store.get(JOB_COORDINATOR_NAMESPACE, GENERATION_KEY), f"{JOB_COORDINATOR_NAMESPACE}/{GENERATION_KEY}"
    )
    return current or 0


def generation_started(store: MetadataStore, generation: int) -> str | None:
    """When ``generation`` was published (ISO 8601, UTC); None for a generation published before this was kept."""
    raw = store.get(GENERATION_STARTED_NAMESPACE, str(generation))
    return raw.decode(errors="replace") if raw is not None else None


def superseded_message(store: MetadataStore, generation: int, newer: int) -> str:
    """What a run of ``generation`` says when another run of the job published ``newer``."""
    started = generation_started(store, newer)
    return f"generation {generation} was superseded by generation {newer} started at {started or 'an unknown time'}"


def start_container_attempt(store: MetadataStore, container_id: str) -> int:
    """Start a new attempt of ``container_id`` and return its epoch (1 for the first attempt).

    The increment is a compare-and-put loop, so concurrent starts get distinct epochs, and every
    earlier attempt's fenced writes are refused from now on. The store then names its writes as this
    attempt's (``MetadataStore.set_writer``).
    """
    where = f"{CONTAINER_EPOCH_NAMESPACE}/{container_id}"
    while True:
        raw = store.get(CONTAINER_EPOCH_NAMESPACE, container_id)
        epoch = (_decode(raw, where) or 0) + 1
        if store.compare_and_put(
            CONTAINER_EPOCH_NAMESPACE, container_id, _encode(epoch), {(CONTAINER_EPOCH_NAMESPACE, container_id): raw}
        ):
            store.set_writer(f"container {container_id} attempt {epoch}")
            return epoch


def container_epoch(store: MetadataStore, container_id: str) -> int:
    """The epoch of the latest attempt of ``container_id``; 0 if none has started."""
    raw = store.get(CONTAINER_EPOCH_NAMESPACE, container_id)
    return _decode(raw, f"{CONTAINER_EPOCH_NAMESPACE}/{container_id}") or 0


def request_stop(store: MetadataStore, generation: int) -> None:
    """Ask the containers of ``generation`` and of every older generation to stop.

    A request never narrows an earlier one: the recorded generation only grows.
    """
    where = f"{JOB_COORDINATOR_NAMESPACE}/{STOP_KEY}"
    while True:
        raw = store.get(JOB_COORDINATOR_NAMESPACE, STOP_KEY)
        current = _decode(raw, where)
        if current is not None and current >= generation:
            return
        if store.compare_and_put(
            JOB_COORDINATOR_NAMESPACE, STOP_KEY, _encode(generation), {(JOB_COORDINATOR_NAMESPACE, STOP_KEY): raw}
        ):
            return


def stop_requested(store: MetadataStore, generation: int) -> bool:
    """True when a stop was requested for ``generation`` or a newer one."""
    requested = _decode(store.get(JOB_COORDINATOR_NAMESPACE, STOP_KEY), f"{JOB_COORDINATOR_NAMESPACE}/{STOP_KEY}")
    return requested is not None and generation <= requested


def clear_stop(store: MetadataStore) -> None:
    store.delete(JOB_COORDINATOR_NAMESPACE, STOP_KEY)


DRAIN_NAMESPACE = "drain"


def job_run_id(config: Settings, generation: int) -> str:
    """The run a container of ``generation`` belongs to: ``app.run.id``, else one per generation — every
    ``millstream run`` publishes a new one, so a restarted job is a new run that old drains do not reach."""
    return config.app.run_id or f"generation-{generation}"


def request_drain(store: MetadataStore, run_id: str) -> None:
    """Ask the containers of run ``run_id`` to drain (Samza's drain notification)."""
    store.put(DRAIN_NAMESPACE, run_id, orjson.dumps({"run-id": run_id, "requested-at": int(time.time() * 1000)}))
    store.flush()


def drain_requested(store: MetadataStore, run_id: str) -> bool:
    return store.get(DRAIN_NAMESPACE, run_id) is not None


def clear_drains(store: MetadataStore) -> None:
    store.delete_all(DRAIN_NAMESPACE, list(store.all(DRAIN_NAMESPACE)))


RESTART_KEY = "restart"


def request_restart(store: MetadataStore, reason: str) -> None:
    """Ask a running job's driver to stop its containers gracefully, re-plan and start them again
    (a new generation), e.g. to apply new startpoints. Idempotent until the driver acts on it."""
    store.put(JOB_COORDINATOR_NAMESPACE, RESTART_KEY, reason.encode())


def restart_requested(store: MetadataStore) -> str | None:
    raw = store.get(JOB_COORDINATOR_NAMESPACE, RESTART_KEY)
    return raw.decode(errors="replace") if raw is not None else None


def clear_restart(store: MetadataStore) -> None:
    store.delete(JOB_COORDINATOR_NAMESPACE, RESTART_KEY)


FAILURES_NAMESPACE = "failures"
FAILED_KEY = "failed"


def _failure_key(failure: Mapping[str, Any]) -> str:
    """The identity of a failure: where it happened and the exception's type (the message text may differ)."""
    where = ("task", "callback", "stream", "partition", "offset", "type")
    return "|".join(f"{name}={failure[name]}" for name in where if name in failure)


def _json_object(raw: bytes | None, where: str) -> dict[str, Any] | None:
    """A JSON object record, or None when absent or unreadable (logged): a failure record is advisory and
    must never be what fails a container or the driver."""
    if raw is None:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        logger.warning("metadata record '%s' is unreadable (%s): %r", where, error, raw[:200])
        return None
    return value if isinstance(value, dict) else None


def record_container_failure(
    store: MetadataStore, container_id: str, generation: int, epoch: int, failure: Mapping[str, Any]
) -> int:
    """Count ``failure`` for the attempt ``epoch`` of ``container_id`` and return how often this same failure
    has now ended an attempt of the container in ``generation``.

    The write is fenced like a checkpoint's: a zombie attempt, or one of an older generation, raises
    ``FencedError`` and counts nothing. Records of an older generation start the count again.
    """
    where = f"{FAILURES_NAMESPACE}/{container_id}"
    expected = writer_expectation(generation, container_id, epoch)
    identity = _failure_key(failure)
    while True:
        raw = store.get(FAILURES_NAMESPACE, container_id)
        prior = _json_object(raw, where) or {}
        seen = prior.get("seen") if prior.get("generation") == generation else None
        counts = {str(k): int(v) for k, v in seen.items()} if isinstance(seen, dict) else {}
        counts[identity] = counts.get(identity, 0) + 1
        record = {**failure, "generation": generation, "attempt": epoch, "count": counts[identity], "seen": counts}
        if store.compare_and_put(
            FAILURES_NAMESPACE,
            container_id,
            orjson.dumps(record),
            {**expected, (FAILURES_NAMESPACE, container_id): raw},
        ):
            store.flush()
            return counts[identity]
        if current_generation(store) != generation or container_epoch(store, container_id) != epoch:
            raise FencedError(f"container {container_id} attempt {epoch} of generation {generation} was fenced")


def record_deterministic_failure(
    store: MetadataStore, container_id: str, generation: int, epoch: int, message: str
) -> bool:
    """Declare the job's ``generation`` failed for good with ``message``; fenced like
    :func:`record_container_failure`. False when the write was refused (the attempt is a zombie)."""
    record = {"generation": generation, "container": container_id, "attempt": epoch, "message": message}
    written = store.compare_and_put(
        JOB_COORDINATOR_NAMESPACE, FAILED_KEY, orjson.dumps(record), writer_expectation(generation, container_id, epoch)
    )
    store.flush()
    return written


def deterministic_failure(store: MetadataStore, generation: int) -> str | None:
    """The message of the failure that ended ``generation`` for good, if one did."""
    where = f"{JOB_COORDINATOR_NAMESPACE}/{FAILED_KEY}"
    record = _json_object(store.get(JOB_COORDINATOR_NAMESPACE, FAILED_KEY), where)
    if record is None or record.get("generation") != generation:
        return None
    return str(record.get("message", ""))


def container_failures(store: MetadataStore) -> dict[str, dict[str, Any]]:
    """Each container's failure record (see the module docstring); unreadable ones are left out."""
    raws = store.all(FAILURES_NAMESPACE)
    records = {cid: _json_object(raw, f"{FAILURES_NAMESPACE}/{cid}") for cid, raw in raws.items()}
    return {cid: record for cid, record in records.items() if record is not None}


def clear_failures(store: MetadataStore) -> None:
    """Forget every failure: a new generation (often fixed code) starts counting again."""
    store.delete(JOB_COORDINATOR_NAMESPACE, FAILED_KEY)
    store.delete_all(FAILURES_NAMESPACE, list(store.all(FAILURES_NAMESPACE)))


def report_container_status(
    store: MetadataStore,
    container_id: str,
    generation: int,
    epoch: int,
    status: Mapping[str, Any],
    *,
    handing_over: bool = False,
) -> bool:
    """Record what attempt ``epoch`` of ``container_id`` in ``generation`` reports about itself (state,
    executor...); False, and nothing written, when the write is fenced.

    Fenced like a checkpoint: accepted only while ``epoch`` is the container's latest attempt and the job is at
    ``generation``, in one atomic ``compare_and_put``. An old attempt cut off by a partition that writes its
    last status ("failed") after a newer attempt started therefore never replaces the live attempt's record,
    whatever the order the writes arrive in. ``handing_over``: the attempt stops because a newer generation was
    published (state ``superseded``); that record is accepted while no newer attempt of the container started,
    since it is then the truth about the container's latest attempt.

    Stamped with ``generation``, ``attempt``, ``updated-at`` (epoch milliseconds) and, unless given, the ``pid``
    and ``host`` of the calling process, which is the container itself.
    """
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        **status,
        "generation": generation,
        "attempt": epoch,
        "updated-at": int(time.time() * 1000),
    }
    expected = writer_expectation(generation, container_id, epoch)
    if handing_over:
        expected = {(CONTAINER_EPOCH_NAMESPACE, container_id): _encode(epoch)}
    value = orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS)
    if store.compare_and_put(CONTAINER_STATUS_NAMESPACE, container_id, value, expected):
        return True
    logger.info(
        "container %s attempt %s of generation %s: status '%s' not recorded, the record belongs to attempt %s of "
        "generation %s",
        container_id, epoch, generation, status.get("state"), container_epoch(store, container_id),
        current_generation(store),
    )  # fmt: skip
    return False


def record_heartbeat(store: MetadataStore, container_id: str, generation: int, epoch: int, beat: int) -> bool:
    """Record that attempt ``epoch`` of ``container_id`` is alive (its ``beat``-th heartbeat); False when fenced
    (a newer attempt or generation owns the container: this attempt was replaced and should stop beating).

    The driver judges liveness by whether the record changes, on its own clock, so hosts' clocks never matter."""
    record = {"generation": generation, "attempt": epoch, "beat": beat, "at": int(time.time() * 1000)}
    return store.compare_and_put(
        CONTAINER_HEARTBEAT_NAMESPACE,
        container_id,
        orjson.dumps(record),
        writer_expectation(generation, container_id, epoch),
    )


DRIVER_KEY = "driver"


def record_driver_heartbeat(store: MetadataStore, generation: int, beat: int, *, ended: bool = False) -> bool:
    """Record that the driver of ``generation`` is alive (its ``beat``-th heartbeat), or that its run ``ended``;
    False when a newer generation was published (a newer run owns the job: this driver stops beating).

    Containers judge the driver's liveness by whether the record changes, on their own clock; ``job status``
    reads ``at`` (epoch milliseconds) to say since when a driver is lost."""
    record = {
        "generation": generation, "beat": beat, "ended": ended, "at": int(time.time() * 1000),
        "pid": os.getpid(), "host": socket.gethostname(),
    }  # fmt: skip
    return store.compare_and_put(
        JOB_COORDINATOR_NAMESPACE,
        DRIVER_KEY,
        orjson.dumps(record),
        {(JOB_COORDINATOR_NAMESPACE, GENERATION_KEY): _encode(generation)},
    )


def driver_heartbeat(store: MetadataStore) -> dict[str, Any] | None:
    """The driver's last heartbeat record, None when no driver recorded one (or it is unreadable)."""
    raw = store.get(JOB_COORDINATOR_NAMESPACE, DRIVER_KEY)
    return _json_object(raw, f"{JOB_COORDINATOR_NAMESPACE}/{DRIVER_KEY}") if raw else None


def container_heartbeats(store: MetadataStore) -> dict[str, dict[str, Any]]:
    """Each container's last heartbeat record; unreadable ones are logged and left out."""
    raws = store.all(CONTAINER_HEARTBEAT_NAMESPACE)
    records = {cid: _json_object(raw, f"{CONTAINER_HEARTBEAT_NAMESPACE}/{cid}") for cid, raw in raws.items()}
    return {cid: record for cid, record in records.items() if record is not None}


def container_statuses(store: MetadataStore) -> dict[str, dict[str, Any]]:
    """The last status each container reported. An unreadable record is logged and left out:
    a status is informational and must not stop the coordinator that watches it."""
    statuses: dict[str, dict[str, Any]] = {}
    for container_id, raw in store.all(CONTAINER_STATUS_NAMESPACE).items():
        try:
            status = orjson.loads(raw)
        except orjson.JSONDecodeError as error:
            logger.warning("container %s: unreadable status record %r: %s", container_id, raw[:200], error)
            continue
        if not isinstance(status, dict):
            logger.warning("container %s: status record is not a JSON object: %r", container_id, raw[:200])
            continue
        statuses[container_id] = status
    return statuses


def record_container_placement(store: MetadataStore, container_id: str, placement: Mapping[str, str]) -> None:
    """Record where a container runs (host, executor id, application id). Last write wins."""
    store.put(CONTAINER_PLACEMENT_NAMESPACE, container_id, orjson.dumps(dict(placement)))


def container_placements(store: MetadataStore) -> dict[str, dict[str, str]]:
    """Where each container last ran; an unreadable record is logged and left out (it only guides placement)."""
    placements: dict[str, dict[str, str]] = {}
    for container_id, raw in store.all(CONTAINER_PLACEMENT_NAMESPACE).items():
        placement = _json_object(raw, f"container {container_id}'s placement record")
        if placement is not None:
            placements[container_id] = {key: str(value) for key, value in placement.items()}
    return placements


def latest_job_model(store: MetadataStore) -> JobModel | None:
    """The JobModel the coordinator published last, or None before the first ``millstream run``."""
    data = store.get(JOB_MODEL_NAMESPACE, "latest")
    return JobModel.from_bytes(data) if data else None
