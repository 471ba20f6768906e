"""``task.checkpoint.validation.enabled`` as a job sees it with the default (metadata-store) checkpoints:
a corrupt last checkpoint stops the job naming the task, or, with validation off, the job resumes from
the checkpoint before it — reprocessing, never losing, what lies between."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from millstream.checkpoint.metadata_store import CHECKPOINT_V1_NAMESPACE
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.testing import InProcessRunner
from tests.helpers import create_stream, fill, job_config, output_origins, seal


def run_batches(config: Settings) -> set[tuple[int, int]]:
    """Two runs over two batches, so the task's checkpoint was written twice; then the last one is corrupted."""
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    written = fill(config, "in", 1, 50)
    assert InProcessRunner(config).run(timeout=3).outcome == "stopped"
    written |= fill(config, "in", 1, 50, start=50)
    seal(config, "in")
    assert InProcessRunner(config).run(timeout=60).outcome == "finished"
    store = metadata_store(config)
    store.init()
    store.put(CHECKPOINT_V1_NAMESPACE, "Partition 0", b"{not json")
    store.close()
    return written


def test_a_corrupt_checkpoint_fails_the_job_naming_the_task_when_validation_is_on(tmp_path: Path) -> None:
    config = job_config(tmp_path)
    run_batches(config)
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "failed"
    assert "Partition 0" in (result.error or "") and "task.checkpoint.validation.enabled=false" in (result.error or "")


def test_without_validation_a_job_resumes_from_the_checkpoint_before_the_corrupt_one(tmp_path: Path) -> None:
    config = job_config(tmp_path, task__checkpoint__validation__enabled="false")
    written = run_batches(config)
    before = Counter(output_origins(config))
    assert InProcessRunner(config).run(timeout=60).outcome == "finished"
    after = Counter(output_origins(config))
    assert set(after) == written, "nothing lost"
    replayed = after - before
    assert replayed and all(value >= 50 for _, value in replayed), "only what followed the previous checkpoint"
