"""The package works on the oldest pyspark it allows: the built wheel, installed into a venv with that pyspark
(``tests/packaging/oldest_pyspark.py``; ``make oldest-pyspark``), runs the example job through the Spark runner
and reads its input as a DataFrame; the streaming source, which needs a newer pyspark, names the version it
needs. The newest allowed pyspark is the one the rest of the suite runs on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.packaging.conftest import clean_environment
from tests.packaging.oldest_pyspark import ensure_venv, oldest_pyspark

pytestmark = [pytest.mark.spark, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pageviews"
EVENTS = 2_000


@pytest.fixture(scope="module")
def oldest_venv(wheel: Path) -> Path:
    venv = ensure_venv()
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
        check=True,
        capture_output=True,
        env=clean_environment(),
    )
    return venv


@pytest.fixture
def example(oldest_venv: Path, tmp_path: Path) -> Path:
    job = tmp_path / "pageviews"
    shutil.copytree(EXAMPLE, job, ignore=shutil.ignore_patterns(".millstream", "__pycache__"))
    _run(oldest_venv, job, "python", "generate.py", "--events", str(EVENTS))
    return job


def _run(venv: Path, cwd: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = clean_environment()
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{' '.join(command)} exited {result.returncode}:\n{result.stderr[-3000:]}"
    return result


def test_the_venv_has_the_oldest_pyspark_and_millstream_from_the_wheel(oldest_venv: Path, tmp_path: Path) -> None:
    script = "import millstream, pyspark; print(pyspark.__version__, millstream.__file__)"
    version, location = _run(oldest_venv, tmp_path, "python", "-c", script).stdout.split()
    assert version == oldest_pyspark()
    assert location.startswith(str(oldest_venv))


def test_the_example_job_runs_through_the_spark_runner_on_the_oldest_pyspark(oldest_venv: Path, example: Path) -> None:
    _run(oldest_venv, example, "millstream", "run", "job.yaml")
    shown = _run(oldest_venv, example, "python", "show.py").stdout
    assert shown.splitlines()[-1].split() == ["total", str(EVENTS)]


def test_batch_reads_work_and_the_streaming_source_names_the_pyspark_it_needs_on_the_oldest_pyspark(
    oldest_venv: Path, example: Path
) -> None:
    (example / "frames.py").write_text(
        textwrap.dedent(
            """
            from millstream.config import load_config
            from millstream.spark.run.session import build_session

            spark = build_session(load_config("job.yaml"))
            reader = spark.read.format("millstream").option("config", "job.yaml").option("stream", "log.page-views")
            print("rows", reader.load().count())
            stream = spark.readStream.format("millstream").option("config", "job.yaml")
            query = stream.option("stream", "log.page-views").load().writeStream.format("memory")
            try:
                query.queryName("views").start().processAllAvailable()
                print("streamed")
            except Exception as error:
                print("refused", [line for line in str(error).splitlines() if "errors.MillstreamError:" in line][0])
            spark.stop()
            """
        )
    )
    printed = _run(oldest_venv, example, "python", "frames.py").stdout.splitlines()
    assert printed[0] == f"rows {EVENTS}"
    if tuple(int(part) for part in oldest_pyspark().split(".")[:2]) >= (4, 2):
        assert printed[1] == "streamed"
    else:
        assert "needs pyspark 4.2 or newer" in printed[1] and f"this is pyspark {oldest_pyspark()}" in printed[1]
