"""Run a job under ``spark-submit``: ``spark-submit [options] millstream/spark/submit.py job.yaml [--stage N]``.

``millstream run`` builds its own SparkSession (a ``local[N]`` master unless told otherwise, the driver's
interpreter for the Python workers). Under ``spark-submit`` the session is the user's: its master, deploy mode,
``--py-files``, ``--archives`` and ``spark.pyspark.python`` (a packed venv) come from the submit command and the
cluster's defaults, and are used as they are. What the runner relies on is verified instead of set, because a
running SparkContext cannot change it: no speculation (a speculative copy would run a container twice) and
``spark.task.maxFailures`` matching the job's container retries. Those checks, and every other one the conf and
the job's config alone decide (host-local state on several hosts, container memory, dynamic allocation sizing),
run on the submitted conf before the session is created: creating it on a cluster registers the application and
waits for executors, a minute and more spent on a job that is then refused.
"""

from __future__ import annotations

import argparse
import logging
import sys

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from millstream.config import Config
from millstream.config.settings import Settings
from millstream.coordinator.prepare import load_job_config
from millstream.errors import FORCED_STOP_EXIT_CODE, SUPERSEDED_EXIT_CODE, ConfigError, MillstreamError
from millstream.log_context import configure_logging
from millstream.spark.run.multi_host import refuse_host_local_state
from millstream.spark.run.resources import check_container_memory, check_dynamic_allocation_sizing
from millstream.spark.run.runner import SparkJobRunner
from millstream.spark.run.session import local_slots, set_failed_attempt_logging
from millstream.spark.run.shutdown_hook import graceful_stop_on_jvm_shutdown


def check_submitted_conf(conf: SparkConf, config: Config) -> None:
    """Refuse, naming the ``--conf`` to pass, a submitted session the runner cannot run this job in safely
    (``config``: the job's ``Settings``, or a loaded ``Config``, read as settings: it is exported to users)."""
    if (conf.get("spark.speculation") or "false").lower() != "false":
        raise ConfigError(
            "spark.speculation is enabled in the submitted session: a speculative copy would run a container "
            "twice; submit with --conf spark.speculation=false"
        )
    master = conf.get("spark.master") or ""
    if local_slots(master) is not None:
        return  # local masters retry through local[N,F], not spark.task.maxFailures
    needed = Settings.of(config).job.container_max_attempts
    submitted = int(conf.get("spark.task.maxFailures") or "4")
    if submitted != needed:
        raise ConfigError(
            f"the submitted session has spark.task.maxFailures={submitted}, but the job allows {needed} attempt(s) "
            f"per container (job.container.retry.count / job.container.restart.failure.rate.max): submit with "
            f"--conf spark.task.maxFailures={needed}"
        )


def submitted_conf() -> SparkConf:
    """The conf spark-submit gave this driver (master, ``--conf``, the cluster's defaults), read before any
    SparkContext exists: spark-submit started the JVM first and set them as its system properties, which a
    ``SparkConf`` with defaults reads. Joining that JVM creates no SparkContext and asks for no executors."""
    SparkContext._ensure_initialized()
    return SparkConf()


def refuse_before_session(conf: SparkConf, config: Settings) -> None:
    """Everything the submitted conf and the job's config alone can refuse, before the session exists: on a
    cluster, creating it registers the application and waits for executors (a minute and more), only for the
    job to be refused afterwards. The runner checks the same again against the running session."""
    check_submitted_conf(conf, config)
    refuse_host_local_state(config, conf.get("spark.master") or "")
    check_container_memory(config)
    check_dynamic_allocation_sizing(conf, config)


def submit(config: Config, spark: SparkSession, runner: SparkJobRunner | None = None) -> int:
    """Run ``config`` in the submitted session; the exit code ``millstream run`` would give. ``config``: the job's
    ``Settings``, or a loaded ``Config`` (read as settings: users call this from ``millstream.spark.submit``)."""
    config = Settings.of(config)
    check_submitted_conf(spark.sparkContext.getConf(), config)
    set_failed_attempt_logging(spark.sparkContext, "OFF")
    result = (runner or SparkJobRunner(config, spark=spark)).run(handle_signals=True)
    name = config.job.name
    if result.outcome == "failed":
        print(f"job failed: {result.error}", file=sys.stderr)
        return 1
    if result.outcome == "superseded":
        print(f"job {name} {result.error}, by another run of the same job", file=sys.stderr)
        return SUPERSEDED_EXIT_CODE
    print(f"job {name} generation {result.generation}: {result.outcome} on {spark.sparkContext.master}")
    for container in result.containers:
        print(f"  container {container.container_id}: {container.messages} message(s), {container.commits} commit(s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="submit.py", description="Run a millstream job under spark-submit.")
    parser.add_argument("config", help="the job's config file (YAML or properties)")
    parser.add_argument("--stage", type=int, default=None, help="run only this stage of the application (app.stage)")
    args = parser.parse_args(argv)
    try:
        config = load_job_config(args.config, {"app.stage": str(args.stage)} if args.stage is not None else None)
        configure_logging("WARNING", job=config.job.name)
        refuse_before_session(submitted_conf(), config)
        spark = SparkSession.builder.getOrCreate()  # the session spark-submit configured, as it is
        runner = SparkJobRunner(config, spark=spark)
        stop_timeout = config.job.stop_timeout_ms / 1000
        # a signal to the JVM (spark-submit) stops as one to this process does: the containers commit first
        with graceful_stop_on_jvm_shutdown(spark.sparkContext, runner.request_stop, stop_timeout):
            try:
                return submit(config, spark, runner)
            finally:
                spark.stop()
    except MillstreamError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2 if getattr(error, "exit_code", 1) == 2 else 1
    except KeyboardInterrupt:  # a second signal: stopped without waiting for the final commits
        logging.disable(logging.CRITICAL)
        return FORCED_STOP_EXIT_CODE


if __name__ == "__main__":
    sys.exit(main())
