"""On a master other than local[N], the embedded defaults that keep shared state in host-local files are refused
before anything starts, each named with its value and fix, unless ``job.shared.filesystem`` declares the paths
shared; the CLI (``millstream run --master``, ``millstream adstore build``) refuses them before Spark's JVM starts."""

from __future__ import annotations

import pytest
from pyspark import SparkConf

from millstream.config import Config
from millstream.config.settings import Settings
from millstream.coordinator.prepare import prepare
from millstream.errors import ConfigError
from millstream.spark.run.multi_host import HostLocalStateError, refuse_host_local_blobs, refuse_host_local_state
from millstream.spark.run.submit import check_submitted_conf
from tests.cli.test_main import millstream, write_config
from tests.helpers import create_stream, job_config

CLUSTER = "spark://cluster.example:7077"
KAFKA = {
    "systems__kafka__samza__factory": "kafka",
    "systems__kafka__bootstrap.servers": "127.0.0.1:9",
    "task__inputs": "kafka.in",
}
BLOBS = {"stores__counts__backup__factories": "blobstore", "task__checkpoint__read__versions": "2,1"}
MULTI_HOST_RECIPE = {**KAFKA, "metadata__store__factory": "kafka", "task__checkpoint__factory": "kafka"}


def refusal(config: Config, master: str = CLUSTER) -> HostLocalStateError:
    with pytest.raises(HostLocalStateError) as refused:
        refuse_host_local_state(prepare(config), master)
    assert refused.value.exit_code == 2
    return refused.value


def test_the_embedded_log_system_is_refused_on_a_cluster_naming_the_key_its_value_and_the_fix(tmp_path):
    error = refusal(job_config(tmp_path, **{**MULTI_HOST_RECIPE, "task__inputs": "kafka.in,log.side"}))
    assert [setting.key for setting in error.settings] == ["task.inputs"]
    message = str(error)
    assert f"Spark master '{CLUSTER}' runs containers on several hosts" in message
    assert "task.inputs=kafka.in,log.side: the embedded log system keeps stream(s) log.side in files on each host" in (
        message
    )
    assert "move these streams to Kafka" in message and "job.shared.filesystem=true" in message


def test_a_changelog_on_the_log_system_and_a_system_configured_as_log_are_refused(tmp_path):
    config = job_config(
        tmp_path,
        **MULTI_HOST_RECIPE,
        stores__counts__factory="inmemory",
        stores__counts__changelog="counts-changelog",
        systems__local__samza__factory="log",
        task__dead__letter__stream="local.dead",
    )
    keys = [setting.key for setting in refusal(config).settings]
    assert keys == ["task.dead.letter.stream", "stores.counts.changelog", "systems.local.samza.factory"]


def test_the_sqlite_metadata_store_is_refused_on_a_cluster_even_as_the_default(tmp_path):
    error = refusal(job_config(tmp_path, **KAFKA, task__checkpoint__factory="kafka"))
    assert [str(setting) for setting in error.settings] == [
        "metadata.store.factory=sqlite (the default): the SQLite metadata store (job model, epochs, checkpoints, "
        "stop signals) is a file each host would create for itself; use metadata.store.factory=kafka (the "
        "coordinator stream on the job's Kafka system)"
    ]


def test_the_local_blob_store_is_refused_on_a_cluster_when_a_store_backs_up_to_it(tmp_path):
    config = job_config(
        tmp_path,
        **MULTI_HOST_RECIPE,
        stores__counts__backup__factories="blobstore",
        task__checkpoint__read__versions="2,1",
        task__checkpoint__write__versions="1,2",
    )
    (setting,) = refusal(config).settings
    assert setting.key == "blob.store.manager.factory" and setting.value == "local (the default)"
    assert "store 'counts'" in setting.why and "s3 or azure" in setting.fix
    refuse_host_local_state(prepare(job_config(tmp_path, **MULTI_HOST_RECIPE)), CLUSTER)  # no store uses blobs


def test_the_multi_host_recipe_and_s3_blobs_pass_and_every_local_master_passes_the_defaults(tmp_path):
    recipe = job_config(
        tmp_path,
        **MULTI_HOST_RECIPE,
        stores__counts__backup__factories="blobstore",
        task__checkpoint__read__versions="2,1",
        task__checkpoint__write__versions="1,2",
        blob__store__manager__factory="s3",
        blob__store__s3__bucket="b",
    )
    refuse_host_local_state(prepare(recipe), CLUSTER)
    defaults = prepare(
        job_config(
            tmp_path,
            stores__counts__backup__factories="blobstore",
            task__checkpoint__read__versions="2,1",
            task__checkpoint__write__versions="1,2",
        )
    )
    for master in ("local", "local[2]", "local[*]", "local[4,3]"):
        refuse_host_local_state(defaults, master)
    with pytest.raises(HostLocalStateError):
        refuse_host_local_state(defaults, "local-cluster[2,1,1024]")  # several executor JVMs, maybe hosts


def test_job_shared_filesystem_true_declares_the_paths_shared_and_lets_every_default_run(tmp_path):
    config = prepare(
        job_config(
            tmp_path,
            stores__counts__backup__factories="blobstore",
            task__checkpoint__read__versions="2,1",
            task__checkpoint__write__versions="1,2",
            job__shared__filesystem="true",
        )
    )
    refuse_host_local_state(config, CLUSTER)
    refuse_host_local_blobs(config, CLUSTER)
    with pytest.raises(ConfigError, match=r"config key 'job\.shared\.filesystem' has invalid value 'maybe'"):
        prepare(job_config(tmp_path, job__shared__filesystem="maybe"))


def test_the_checks_exported_at_old_paths_read_a_loaded_config_that_is_not_settings(tmp_path):
    """Users' code imports these from ``millstream.spark.multi_host`` / ``millstream.spark.submit`` and passes
    the ``Config`` it loaded; they read it as settings rather than failing on a missing view."""
    loaded = Config(job_config(tmp_path, **KAFKA, task__checkpoint__factory="kafka", job__container__retry__count=5))
    assert not isinstance(loaded, Settings)
    with pytest.raises(HostLocalStateError, match=r"metadata\.store\.factory=sqlite"):
        refuse_host_local_state(loaded, CLUSTER)
    with pytest.raises(HostLocalStateError, match=r"blob\.store\.manager\.factory=local"):
        refuse_host_local_blobs(loaded.with_overrides({"stores.geo.adstore.versioned": "true"}), CLUSTER)
    with pytest.raises(ConfigError, match=r"--conf spark\.task\.maxFailures=6"):
        check_submitted_conf(SparkConf(loadDefaults=False).set("spark.master", CLUSTER), loaded)


def test_millstream_run_on_a_cluster_master_exits_2_naming_each_key_before_spark_starts(tmp_path):
    path = write_config(
        tmp_path,
        {
            "stores.counts.backup.factories": "blobstore",
            "task.checkpoint.read.versions": "2,1",
            "task.checkpoint.write.versions": "1,2",
        },
    )
    from millstream.coordinator.prepare import load_job_config

    create_stream(load_job_config(path), "in", 1)
    result = millstream("run", path, "--master", "spark://127.0.0.1:9", "-q", timeout=60)
    assert result.returncode == 2, result.stderr
    text = " ".join(result.stderr.split())  # the console wraps long lines
    for shown in ("task.inputs=log.in", "metadata.store.factory=sqlite (the default)", "blob.store.manager.factory"):
        assert shown in text
    assert "job.shared.filesystem=true" in text
    assert "Traceback" not in result.stderr and "collectAndServe" not in result.stderr


def test_millstream_adstore_build_with_the_local_blob_store_on_a_cluster_exits_2_before_spark_starts(tmp_path):
    from tests.cli.test_adstore import setup

    path, dataset = setup(tmp_path)
    result = millstream(
        "adstore", "build", path, "--store", "geo", "--from", dataset, "--format", "json",
        "--master", "spark://127.0.0.1:9", timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    text = " ".join(result.stderr.split())
    assert "blob.store.manager.factory=local (the default): the local blob store writes the snapshots and files of" in (
        text
    )
    assert "the bulk build" in text and "job.shared.filesystem=true" in text
    assert "published version" not in result.stdout
