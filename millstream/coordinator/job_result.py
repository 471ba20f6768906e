"""What running a job produced, whichever runner ran it."""

from __future__ import annotations

from dataclasses import dataclass, field

from millstream.runtime.container import ContainerResult


@dataclass
class JobResult:
    generation: int
    outcome: str
    """``finished`` (every container ended by itself), ``stopped`` (stop requested), ``drained`` (a drain
    request — or an upstream stage's drain — stopped it cleanly: the CLI exits 0), ``superseded`` (another
    run of the same job started a newer generation, and this run's containers handed over to it: the CLI
    exits 3) or ``failed``."""
    containers: list[ContainerResult] = field(default_factory=list)
    error: str | None = None

    @property
    def messages(self) -> int:
        return sum(container.messages for container in self.containers)

    @property
    def succeeded(self) -> bool:
        return self.outcome in ("finished", "stopped", "drained")


def combined_outcome(containers: list[ContainerResult]) -> str:
    """The job's outcome from its containers': superseded over stopped over drained over finished."""
    outcomes = {container.outcome for container in containers}
    return next((outcome for outcome in ("superseded", "stopped", "drained") if outcome in outcomes), "finished")
