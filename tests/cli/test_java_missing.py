"""Without Java, ``millstream run`` on Spark says so in one line instead of pyspark's gateway traceback.

No JVM starts here: the check runs before Spark's launcher, so these tests belong with the fast ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from millstream.coordinator.prepare import load_job_config
from millstream.spark.run.session import JavaNotFoundError, find_java
from tests.cli.test_main import REPO, write_config
from tests.helpers import create_stream


def test_find_java_refuses_a_java_home_without_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(JavaNotFoundError, match=f"JAVA_HOME={tmp_path} has no executable bin/java"):
        find_java()


def test_find_java_refuses_a_path_without_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaNotFoundError, match="no java on PATH and JAVA_HOME is not set"):
        find_java()


def test_run_without_java_fails_with_one_line_and_exit_code_2(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"job.container.count": 1})
    create_stream(load_job_config(config), "in", 1)
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "JAVA_HOME"}
    env["PATH"] = str(empty)
    result = subprocess.run(
        [sys.executable, "-m", "millstream.cli.main", "run", str(config)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: Spark needs Java 17 to start")
    assert "Traceback" not in result.stderr
