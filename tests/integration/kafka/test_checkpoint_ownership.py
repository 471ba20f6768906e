"""The Kafka checkpoint topic is owned by one job, recorded on the cluster: a copied config keeping
``task.checkpoint.topic`` under another ``job.name`` is refused at start naming both jobs (it would resume
from the other job's offsets); the owner restarting is accepted; ``task.checkpoint.owner.takeover`` hands
the topic over on purpose."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.contracts.systems import StreamOwnedError
from millstream.testing import InProcessRunner
from tests.storage.backends.changelog.test_ownership import TASK_CLASS, prepare_input, run_to_end
from tests.storage.harness import state_config

pytestmark = pytest.mark.integration


def job(tmp_path: Path, bootstrap: str, topic: str, name: str) -> Settings:
    """A job of the log's ``in`` checkpointing to Kafka topic ``topic``; its store has no backup."""
    return state_config(
        tmp_path,
        "none",
        task=TASK_CLASS,
        task__commit__ms=50,
        job__name=name,
        task__checkpoint__factory="kafka",
        task__checkpoint__topic=topic,
        systems__kafka__samza__factory="kafka",
        systems__kafka__bootstrap__servers=bootstrap,
    )


def test_a_second_job_on_the_checkpoint_topic_is_refused_and_a_takeover_hands_it_over(
    tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    topic = topic_name("checkpoints")
    name = f"counts-{uuid.uuid4().hex[:8]}"
    original = job(tmp_path, bootstrap, topic, name)
    prepare_input(original)
    run_to_end(original)
    run_to_end(original)  # the owner restarting is accepted
    copy = job(tmp_path, bootstrap, topic, f"{name}-copy")
    with pytest.raises(StreamOwnedError) as refused:
        InProcessRunner(copy).run(timeout=90)
    message = str(refused.value)
    assert f"stream 'kafka.{topic}' is owned by job '{name}-1'; job '{name}-copy-1' cannot write it too" in message
    assert "task.checkpoint.owner.takeover=true" in message
    assert coordination.latest_job_model(metadata_store(copy)) is None

    run_to_end(copy.with_overrides({"task.checkpoint.owner.takeover": "true"}))
    with pytest.raises(StreamOwnedError, match=f"owned by job '{name}-copy-1'"):
        InProcessRunner(original).run(timeout=90)
