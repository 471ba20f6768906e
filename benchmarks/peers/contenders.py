"""Who runs, with what: each contender's command, its pinned venv (peers) and the workloads it runs.

The peers run in their own venvs under ``~/.cache/millstream/peers/<name>`` (``MILLSTREAM_PEERS_CACHE``
overrides), created on first use from the pinned requirements below and re-created when the pins
change, so their dependencies never meet ours. The limits, millstream and Spark Structured Streaming
run on this checkout's interpreter (Spark Structured Streaming uses our pyspark).
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


class NotRunnableError(RuntimeError):
    """A contender cannot be installed or started here; the benchmark reports it as not run, with this."""


@dataclass(frozen=True)
class Contender:
    name: str
    command: tuple[str, ...]
    """Arguments after the interpreter; the common arguments (``scripts/common.py``) follow them."""
    workloads: tuple[str, ...] = ("w1", "w2")
    requirements: tuple[str, ...] = ()
    """Pinned requirements of the contender's own venv; empty: runs on this checkout's interpreter."""
    venv_name: str = ""
    verified_output: bool = True
    """False for the read loop, which writes nothing: its count and rate come from its own report."""
    prepare: Callable[[], dict[str, str]] | None = None
    """Fetches what the contender needs beyond its venv; returns environment variables for its runs."""


def spark_structured_streaming_env() -> dict[str, str]:
    """The Kafka connector's JARs for ``scripts/spark_ss_job.py``, fetched first if need be."""
    from benchmarks.peers.spark_connector import connector_jars

    version, jars = connector_jars()
    print(f"  Spark's Kafka connector: spark-sql-kafka-0-10 {version}", flush=True)
    return {"MILLSTREAM_PEERS_SPARK_JARS": ",".join(map(str, jars)), "MILLSTREAM_PEERS_SPARK_KAFKA": version}


CONTENDERS = (  # Faust last: it is the slowest by far, and results are written after each contender
    Contender("raw read (limit)", (str(SCRIPTS / "raw_job.py"), "--read-only"), ("w1",), verified_output=False),
    Contender("raw copy (limit)", (str(SCRIPTS / "raw_job.py"),), ("w1",)),
    Contender("millstream, 1 container", ("-m", "benchmarks.peers.millstream_job")),
    Contender("millstream, 1 container, metrics on", ("-m", "benchmarks.peers.millstream_job", "--metrics")),
    Contender("millstream batch API, 1 container", ("-m", "benchmarks.peers.millstream_job", "--batch")),
    Contender(
        "millstream Spark, 2 containers", ("-m", "benchmarks.peers.millstream_job", "--spark", "--containers", "2")
    ),
    Contender(
        "Quix Streams", (str(SCRIPTS / "quix_job.py"),), requirements=("quixstreams==3.28.1",), venv_name="quixstreams"
    ),
    Contender(
        "Bytewax",
        (str(SCRIPTS / "bytewax_job.py"),),
        requirements=("bytewax==0.21.1", "confluent-kafka==2.16.1"),
        venv_name="bytewax",
    ),
    Contender(
        "Spark Structured Streaming", (str(SCRIPTS / "spark_ss_job.py"),), prepare=spark_structured_streaming_env
    ),
    Contender("Faust", (str(SCRIPTS / "faust_job.py"),), requirements=("faust-streaming==0.15.3",), venv_name="faust"),
)


def peers_cache() -> Path:
    return Path(os.environ.get("MILLSTREAM_PEERS_CACHE", Path.home() / ".cache" / "millstream" / "peers"))


def interpreter(contender: Contender) -> Path:
    """The Python that runs ``contender``: its own venv's, created or updated to the pins first."""
    if not contender.requirements:
        return Path(sys.executable)
    home = peers_cache() / contender.venv_name
    python = home / "bin" / "python"
    stamp = home / ".requirements"
    wanted = "\n".join(contender.requirements)
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    if not python.exists():
        venv.create(home, with_pip=True)
    completed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *contender.requirements],
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        tail = (completed.stdout + completed.stderr).strip().splitlines()[-3:]
        raise NotRunnableError(f"pip install {' '.join(contender.requirements)} failed: {' / '.join(tail)}")
    stamp.write_text(wanted)
    return python
