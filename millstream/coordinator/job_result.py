"""What running a job produced, whichever runner ran it."""

from __future__ import annotations

from dataclasses import dataclass, field

from millstream.runtime.container import ContainerResult


@dataclass
class JobResult:
    generation: int
    outcome: str
    """``finished`` (every container ended by itself), ``stopped`` (stop requested) or ``failed``."""
    containers: list[ContainerResult] = field(default_factory=list)
    error: str | None = None

    @property
    def messages(self) -> int:
        return sum(container.messages for container in self.containers)

    @property
    def succeeded(self) -> bool:
        return self.outcome in ("finished", "stopped")
