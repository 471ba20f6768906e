"""What running a job produced, whichever runner ran it."""

from __future__ import annotations

from dataclasses import dataclass, field

from millstream.contracts import coordination
from millstream.contracts.metadata import MetadataStore
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
    """Why it failed; for ``superseded``, which generation took over and when it started."""

    @property
    def messages(self) -> int:
        return sum(container.messages for container in self.containers)

    @property
    def waiting_for(self) -> dict[str, list[str]]:
        """Per task that had not ended when the job returned, the partitions it still waited for end-of-stream
        of (``system.stream partition N``); empty when every task ended by itself."""
        return {task: ssps for container in self.containers for task, ssps in container.waiting_for.items()}

    @property
    def succeeded(self) -> bool:
        return self.outcome in ("finished", "stopped", "drained")


def combined_outcome(containers: list[ContainerResult]) -> str:
    """The job's outcome from its containers': superseded over stopped over drained over finished."""
    outcomes = {container.outcome for container in containers}
    return next((outcome for outcome in ("superseded", "stopped", "drained") if outcome in outcomes), "finished")


def generation_result(store: MetadataStore, generation: int, containers: list[ContainerResult]) -> JobResult:
    """The result of a generation whose containers all returned; a superseded one says who took over and when."""
    outcome = combined_outcome(containers)
    if outcome != "superseded":
        return JobResult(generation, outcome, containers)
    newer = coordination.current_generation(store)
    return JobResult(generation, outcome, containers, coordination.superseded_message(store, generation, newer))
