"""The StartpointManager: startpoints in the metadata store, and their fan-out to tasks.

Two namespaces, as in Samza: the read-write one where operators write startpoints keyed by SSP
(``system.stream.partition``) or SSP + task (``system.stream.partition.Task Name``), and the fan-out
one, keyed by task name, where the job coordinator moves them when a job model is published. A task
applies its fanned-out startpoints at start and deletes each only after a checkpoint commit that
followed at least one processed message of that partition, so a crash before that commit applies it
again, and an idle partition keeps it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from millstream.contracts.metadata import MetadataStore
from millstream.contracts.startpoints import Startpoint, now_ms
from millstream.model import SystemStreamPartition, TaskName
from millstream.startpoint.errors import StartpointError, StartpointFormatError, StartpointManagerStoppedError
from millstream.startpoint.serde import (
    fan_out_from_bytes,
    fan_out_to_bytes,
    startpoint_from_bytes,
    startpoint_to_bytes,
)

log = logging.getLogger(__name__)

READ_WRITE_NAMESPACE = "samza-startpoint-v1"
FAN_OUT_NAMESPACE = "samza-startpoint-v1-fan-out"
STARTPOINT_STATUS_NAMESPACE = "startpoint-status"
"""Per task, the startpoints its last start could not resolve (shown by ``millstream job status``)."""
DEFAULT_MAX_AGE_MS = 12 * 60 * 60 * 1000

_KEY = re.compile(r"^(?P<system>[^.]+)\.(?P<stream>.+?)\.(?P<partition>\d+)(?:\.(?P<task>.+))?$")


def read_write_key(ssp: SystemStreamPartition, task_name: str | None = None) -> str:
    return ssp.key() if task_name is None else f"{ssp.key()}.{task_name}"


def parse_read_write_key(key: str) -> tuple[SystemStreamPartition, TaskName | None]:
    match = _KEY.match(key)
    if not match:
        raise StartpointFormatError(f"startpoint key '{key}' is not system.stream.partition[.task]")
    ssp = SystemStreamPartition(match["system"], match["stream"], int(match["partition"]))
    return ssp, TaskName(match["task"]) if match["task"] else None


@dataclass(frozen=True)
class StoredStartpoint:
    """A read-write entry as listed by tools: where it applies, what it is, and whether it is stale."""

    ssp: SystemStreamPartition
    task_name: TaskName | None
    startpoint: Startpoint
    stale: bool


class StartpointManager:
    def __init__(self, store: MetadataStore, max_age_ms: int = DEFAULT_MAX_AGE_MS) -> None:
        self.store = store
        self.max_age_ms = max_age_ms
        self._stopped = False

    def start(self) -> None:
        """Idempotent; kept for symmetry with Samza's lifecycle."""

    def stop(self) -> None:
        """Idempotent; every later operation raises."""
        self._stopped = True

    def _check(self) -> None:
        if self._stopped:
            raise StartpointManagerStoppedError("the StartpointManager was used after stop()")

    # read-write namespace -------------------------------------------------------------------------

    def write_startpoint(
        self, ssp: SystemStreamPartition, startpoint: Startpoint, task_name: str | None = None
    ) -> None:
        self._check()
        self.store.put(READ_WRITE_NAMESPACE, read_write_key(ssp, task_name), startpoint_to_bytes(startpoint))
        self.store.flush()

    def read_startpoint(self, ssp: SystemStreamPartition, task_name: str | None = None) -> Startpoint | None:
        """The startpoint for the key, or None if absent or stale (stale ones are kept, not deleted)."""
        self._check()
        key = read_write_key(ssp, task_name)
        data = self.store.get(READ_WRITE_NAMESPACE, key)
        if data is None:
            return None
        startpoint = startpoint_from_bytes(data, f"startpoint '{key}'")
        if self.is_stale(startpoint):
            log.warning("ignoring stale startpoint %s for %s (older than %d ms)", startpoint, key, self.max_age_ms)
            return None
        return startpoint

    def delete_startpoint(self, ssp: SystemStreamPartition, task_name: str | None = None) -> None:
        self._check()
        self.store.delete(READ_WRITE_NAMESPACE, read_write_key(ssp, task_name))

    def delete_all_startpoints(self) -> None:
        self._check()
        self.store.delete_all(READ_WRITE_NAMESPACE, list(self.store.all(READ_WRITE_NAMESPACE)))

    def list_startpoints(self) -> list[StoredStartpoint]:
        """Every read-write entry, stale ones included and marked."""
        self._check()
        entries = []
        for key, data in sorted(self.store.all(READ_WRITE_NAMESPACE).items()):
            ssp, task_name = parse_read_write_key(key)
            startpoint = startpoint_from_bytes(data, f"startpoint '{key}'")
            entries.append(StoredStartpoint(ssp, task_name, startpoint, self.is_stale(startpoint)))
        return entries

    def is_stale(self, startpoint: Startpoint) -> bool:
        return now_ms() - startpoint.creation_timestamp > self.max_age_ms

    # fan-out ---------------------------------------------------------------------------------------

    def fan_out(
        self, task_to_ssps: Mapping[TaskName, Iterable[SystemStreamPartition]]
    ) -> dict[TaskName, dict[SystemStreamPartition, Startpoint]]:
        """Move read-write startpoints to the tasks that consume their SSPs; returns what each task got.

        Precedence between an SSP-only and an SSP+task startpoint: the newer wins, a tie goes to
        SSP+task. A startpoint already fanned out to a task stays unless a newer one replaces it.
        Consumed read-write keys are deleted afterwards; keys of SSPs no task owns stay.
        """
        self._check()
        if not task_to_ssps:
            raise StartpointError("fan_out needs at least one task")
        fanned: dict[TaskName, dict[SystemStreamPartition, Startpoint]] = {}
        consumed: set[str] = set()
        for task_name, ssps in task_to_ssps.items():
            for ssp in ssps:
                for_ssp = self.read_startpoint(ssp)
                for_task = self.read_startpoint(ssp, task_name)
                if for_ssp is not None:
                    consumed.add(read_write_key(ssp))
                if for_task is not None:
                    consumed.add(read_write_key(ssp, task_name))
                chosen = _newer(for_ssp, for_task)
                if chosen is not None:
                    fanned.setdefault(task_name, {})[ssp] = chosen
        for task_name, startpoints in fanned.items():
            merged = dict(self.get_fan_out_for_task(task_name))
            for ssp, startpoint in startpoints.items():
                existing = merged.get(ssp)
                if existing is None or startpoint.creation_timestamp >= existing.creation_timestamp:
                    merged[ssp] = startpoint
            self.store.put(FAN_OUT_NAMESPACE, str(task_name), fan_out_to_bytes(now_ms(), merged))
        self.store.flush()
        self.store.delete_all(READ_WRITE_NAMESPACE, sorted(consumed))
        if fanned:
            log.info("fanned out startpoints to %d task(s)", len(fanned))
        return fanned

    def get_fan_out_for_task(self, task_name: str) -> dict[SystemStreamPartition, Startpoint]:
        self._check()
        data = self.store.get(FAN_OUT_NAMESPACE, str(task_name))
        if data is None:
            return {}
        return fan_out_from_bytes(data, f"fan-out of task '{task_name}'")[1]

    def fan_outs_for_tasks(self, task_names: Iterable[str]) -> dict[str, dict[SystemStreamPartition, Startpoint]]:
        """``get_fan_out_for_task`` of each of ``task_names`` (an empty fan-out for a task without one), read in
        one query of the namespace rather than one per task: a container starting a thousand tasks reads it once.
        Only the named tasks' records are parsed, so another container's damaged record fails only its owner."""
        self._check()
        stored = self.store.all(FAN_OUT_NAMESPACE)
        result: dict[str, dict[SystemStreamPartition, Startpoint]] = {}
        for task_name in task_names:
            data = stored.get(str(task_name))
            fan_out = {} if data is None else fan_out_from_bytes(data, f"fan-out of task '{task_name}'")[1]
            result[str(task_name)] = fan_out
        return result

    def all_fan_outs(self) -> dict[TaskName, dict[SystemStreamPartition, Startpoint]]:
        self._check()
        return {
            TaskName(task): fan_out_from_bytes(data, f"fan-out of task '{task}'")[1]
            for task, data in sorted(self.store.all(FAN_OUT_NAMESPACE).items())
        }

    def remove_fan_out_for_task_ssps(self, task_name: str, ssps: Iterable[SystemStreamPartition]) -> None:
        """Drop the task's startpoints for ``ssps``; the record goes when it is empty."""
        self._check()
        current = self.get_fan_out_for_task(task_name)
        remaining = {ssp: sp for ssp, sp in current.items() if ssp not in set(ssps)}
        if remaining == current:
            return
        if remaining:
            self.store.put(FAN_OUT_NAMESPACE, str(task_name), fan_out_to_bytes(now_ms(), remaining))
        else:
            self.store.delete(FAN_OUT_NAMESPACE, str(task_name))
        self.store.flush()

    def remove_all_fan_outs(self) -> None:
        self._check()
        self.store.delete_all(FAN_OUT_NAMESPACE, list(self.store.all(FAN_OUT_NAMESPACE)))


def _newer(for_ssp: Startpoint | None, for_task: Startpoint | None) -> Startpoint | None:
    if for_ssp is None or for_task is None:
        return for_task or for_ssp
    return for_ssp if for_ssp.creation_timestamp > for_task.creation_timestamp else for_task
