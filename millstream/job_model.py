"""The JobModel: which tasks exist, which partitions each consumes, and which container hosts each.

The coordinator computes it on the driver, stores it in the metadata store under a generation
number, and ships it to the containers. A container of an older generation is fenced off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from millstream.model import SystemStreamPartition, TaskName

JOB_MODEL_NAMESPACE = "job-model"
"""Where published models live in the metadata store: by generation, and the latest under ``latest``."""


@dataclass(frozen=True)
class TaskModel:
    task_name: TaskName
    ssps: frozenset[SystemStreamPartition]


@dataclass(frozen=True)
class ContainerModel:
    container_id: str
    tasks: Mapping[TaskName, TaskModel]


@dataclass(frozen=True)
class JobModel:
    generation: int
    containers: Mapping[str, ContainerModel]

    @property
    def tasks(self) -> dict[TaskName, TaskModel]:
        return {name: task for container in self.containers.values() for name, task in container.tasks.items()}

    def task_to_ssps(self) -> dict[TaskName, frozenset[SystemStreamPartition]]:
        return {name: task.ssps for name, task in self.tasks.items()}

    def container_of(self, task_name: TaskName) -> str:
        for container in self.containers.values():
            if task_name in container.tasks:
                return container.container_id
        raise KeyError(task_name)

    def to_bytes(self) -> bytes:
        document = {
            "generation": self.generation,
            "containers": {
                cid: {
                    "tasks": {
                        str(name): {"ssps": [ssp.key() for ssp in sorted(task.ssps)]}
                        for name, task in sorted(container.tasks.items(), key=lambda kv: kv[0].sort_key())
                    }
                }
                for cid, container in sorted(self.containers.items(), key=lambda kv: int(kv[0]))
            },
        }
        return orjson.dumps(document)

    @classmethod
    def from_bytes(cls, data: bytes) -> JobModel:
        document = orjson.loads(data)
        containers = {}
        for cid, container in document["containers"].items():
            tasks = {}
            for name, task in container["tasks"].items():
                task_name = TaskName(name)
                ssps = frozenset(SystemStreamPartition.parse_key(key) for key in task["ssps"])
                tasks[task_name] = TaskModel(task_name, ssps)
            containers[cid] = ContainerModel(cid, tasks)
        return cls(int(document["generation"]), containers)
