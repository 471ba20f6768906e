"""The JARs of Spark's Kafka connector (``spark-sql-kafka-0-10``) for Spark Structured Streaming.

Fetched with Maven (``spark_kafka/pom.xml``, Maven Central through ~/.m2, as the test broker's JARs are)
into the peers cache, and handed to Spark as ``spark.jars``: Spark's own Ivy resolution does not get
through to Maven Central from here. Our pyspark's version is wanted; when Maven Central does not serve
it yet, the newest earlier patch or minor release of the same major version is taken and named in the
benchmark's output, since a connector of another version is a caveat on the figures.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pyspark

from benchmarks.peers.contenders import NotRunnableError, peers_cache

POM = Path(__file__).resolve().parent / "spark_kafka" / "pom.xml"
ARTIFACTS = "spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2"
"""What pyspark does not ship already (Scala, Hadoop, compression libraries come with it)."""


def candidate_versions(version: str) -> list[str]:
    """``version`` first, then earlier releases of the same major version, newest first."""
    major, minor, patch = (int(part) for part in version.split(".")[:3])
    earlier = [f"{major}.{minor}.{p}" for p in range(patch - 1, -1, -1)]
    earlier += [f"{major}.{m}.0" for m in range(minor - 1, -1, -1)]
    return [version, *earlier]


def connector_jars() -> tuple[str, list[Path]]:
    """The connector version found and its JARs; :class:`NotRunnableError` naming every version tried."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise NotRunnableError("Maven ('mvn') is not on PATH: it fetches spark-sql-kafka-0-10 from Maven Central")
    tried = []
    for version in candidate_versions(pyspark.__version__):
        target = peers_cache() / "spark-kafka" / version
        if (target / ".complete").exists():
            return version, sorted(target.glob("*.jar"))
        staging = Path(tempfile.mkdtemp(prefix="spark-kafka-"))
        command = [mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies", f"-Dspark.kafka.version={version}"]
        command += [f"-DincludeArtifactIds={ARTIFACTS}", f"-DoutputDirectory={staging}"]
        if subprocess.run(command, capture_output=True, check=False).returncode == 0:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(target, ignore_errors=True)
            shutil.move(staging, target)
            (target / ".complete").touch()
            return version, sorted(target.glob("*.jar"))
        shutil.rmtree(staging, ignore_errors=True)
        tried.append(version)
    raise NotRunnableError(f"spark-sql-kafka-0-10_2.13 not on Maven Central for {', '.join(tried)}")
