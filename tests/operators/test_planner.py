"""Planning a high-level application: stages, intermediate streams, the expanded job config."""

from __future__ import annotations

from pathlib import Path

import pytest

from millstream.api.application import StreamApplicationDescriptor
from millstream.api.errors import ApplicationError
from millstream.api.windows import Count, SessionWindow, SlidingWindow, TumblingWindow
from millstream.config.settings import Settings
from millstream.contracts.systems import StreamOwnedError
from millstream.coordinator.prepare import prepare
from millstream.coordinator.services import DriverServices
from millstream.errors import ConfigError, StreamNotFoundError
from millstream.model import SystemStream
from millstream.operators.planner import (
    GRAPH_TASK_CLASS,
    expand_application,
    feeding_streams,
    intermediate_owner,
    plan_stages,
    require_expanded,
    watermark_boundary_ms,
)
from millstream.operators.planner import (
    ensure_intermediate_streams as ensure_streams,
)
from tests.helpers import create_stream


def ensure_intermediate_streams(config: Settings) -> dict[SystemStream, int]:
    """The planner's step with the driver's services, as the job coordinator takes it."""
    with DriverServices(config) as services:
        return ensure_streams(config, services.admin)


def planned(describe, **names):
    descriptor = StreamApplicationDescriptor()
    describe(descriptor)
    return plan_stages(descriptor, **names)


def ids(run) -> list[str]:
    return [spec.op_id for spec in run.operators]


def test_the_graph_is_cut_into_stages_at_each_partition_by():
    def describe(app):
        app.input("log.in").map(str).partition_by(len, name="by-len").map(str).partition_by(len, name="again").send_to(
            "log.out"
        )

    graph = planned(describe, app_name="wc", app_id="2")
    assert graph.stage_count == 3
    stage0, stage1, stage2 = graph.stages()
    assert ids(stage0) == ["map-0", "by-len"]
    assert ids(stage1) == ["map-1", "again"]
    assert ids(stage2) == ["send_to-0"]
    assert [str(s) for s in stage0.input_streams] == ["log.in"]
    assert [str(s) for s in stage1.input_streams] == ["log.wc-2-by-len"]
    assert [str(s.system_stream) for s in stage1.intermediate_outputs] == ["log.wc-2-again"]
    assert [str(o.system_stream) for o in stage2.outputs] == ["log.out"]
    whole = graph.run_set()
    assert ids(whole) == ["map-0", "by-len", "map-1", "again", "send_to-0"]
    assert {str(s) for s in whole.input_streams} == {"log.in", "log.wc-2-by-len", "log.wc-2-again"}


def test_operators_upstream_of_a_later_stage_run_in_that_stage_too():
    def describe(app):
        side = app.input("log.side").map(str, name="side-map")
        side.send_to("log.side-copy")
        app.input("log.in").partition_by(len, name="by-len").merge(side).send_to("log.out")

    graph = planned(describe)
    stage0, stage1 = graph.stages()
    assert ids(stage0) == ["side-map", "send_to-0", "by-len"]
    assert ids(stage1) == ["side-map", "merge-0", "send_to-1"]
    assert [str(s) for s in stage1.input_streams] == ["log.side", "log.millstream-job-1-by-len"]


def test_intermediate_streams_live_on_the_configured_system():
    graph = planned(lambda app: app.input("kafka.in").partition_by(len, name="p"), intermediate_system="kafka")
    (stream,) = graph.intermediates.values()
    assert stream.system_stream == SystemStream("kafka", "millstream-job-1-p")
    assert (stream.producer_stage, stream.consumer_stages) == (0, ())


def test_a_partition_by_may_not_write_one_of_the_applications_inputs():
    with pytest.raises(ApplicationError, match="which is an input"):
        planned(lambda app: app.input("log.a-1-x").partition_by(len, name="x"), app_name="a", app_id="1")


def test_producers_of_a_partition_by_are_the_tasks_reading_the_streams_feeding_it():
    def describe(app):
        merged = app.input("log.a").merge(app.input("log.b").map(str))
        merged.partition_by(len, name="first").map(str).partition_by(len, name="second")

    graph = planned(describe, app_name="x", app_id="1")
    first, second = graph.descriptor.graph.partition_bys
    assert feeding_streams(graph, first) == {SystemStream("log", "a"), SystemStream("log", "b")}
    assert feeding_streams(graph, second) == {SystemStream("log", "x-1-first")}


def test_a_stage_outside_the_application_is_a_config_error():
    graph = planned(lambda app: app.input("log.in").partition_by(len, name="p").send_to("log.out"), app_class="m:App")
    with pytest.raises(ConfigError, match=r"'app\.stage' is 2, but application m:App has stages 0\.\.1"):
        graph.run_set([2])


def test_the_watermark_boundary_period_divides_every_window_end_of_every_stage():
    def describe(app):
        counted = app.input("log.in").window(TumblingWindow(60_000), aggregate=Count(), name="minutes")
        counted.partition_by(len, name="p").window(SlidingWindow(20_000, 15_000), aggregate=Count(), name="slides")

    # tumbling ends at k * 60 s; sliding ends at k * 15 s + 20 s: all multiples of 5 s
    assert watermark_boundary_ms(planned(describe, app_name="x", app_id="1")) == 5_000


def test_an_application_with_only_session_windows_has_no_watermark_boundary():
    def describe(app):
        app.input("log.in").window(SessionWindow(3_000), aggregate=Count(), name="sessions").send_to("log.out")

    assert watermark_boundary_ms(planned(describe, app_name="x", app_id="1")) == 0


# --- the expanded config ---------------------------------------------------------------------------


def app_config(tmp_path: Path, **extra: str) -> Settings:
    values = {
        "job.name": "views",
        "job.data.dir": str(tmp_path),
        "app.class": "tests.api.apps:WindowedCount",
        "systems.log.samza.msg.serde": "json",
        **{key.replace("__", "."): value for key, value in extra.items()},
    }
    return prepare(Settings(values))


def test_an_application_runs_as_the_operator_graph_task_over_its_stages_inputs(tmp_path):
    config = app_config(tmp_path)
    assert config["task.class"] == GRAPH_TASK_CLASS
    assert config["task.inputs"] == "log.in,log.views-1-by-user"
    assert config["task.window.ms"] == "200"
    assert (config["app.name"], config["app.id"]) == ("views", "1")
    prepare(config)


def test_intermediate_streams_are_read_raw_from_their_start_and_inputs_with_their_descriptors_serdes(tmp_path):
    config = app_config(tmp_path)
    prefix = "systems.log.streams.views-1-by-user.samza."
    assert [config[prefix + key] for key in ("key.serde", "msg.serde", "offset.default")] == [
        "bytes",
        "bytes",
        "oldest",
    ]
    assert config["systems.log.streams.in.samza.key.serde"] == "string"
    assert config["systems.log.streams.out.samza.msg.serde"] == "json"


def test_expanding_an_expanded_config_changes_nothing(tmp_path):
    config = app_config(tmp_path, app__stage="1")
    assert expand_application(config).to_dict() == config.to_dict()
    assert prepare(config).to_dict() == config.to_dict()


def test_a_stage_runs_as_its_own_job_with_the_applications_stream_names(tmp_path):
    config = app_config(tmp_path, app__stage="1")
    assert config["job.name"] == "views-stage-1"
    assert config["app.name"] == "views"
    assert config["task.inputs"] == "log.views-1-by-user"


def test_a_low_level_job_config_is_left_alone(tmp_path):
    values = {"job.data.dir": str(tmp_path), "task.class": "tests.jobs:PassThrough", "task.inputs": "log.in"}
    config = prepare(Settings(values))
    assert expand_application(config) is config


def test_task_class_may_name_an_imported_application_as_test_runner_does(tmp_path):
    from tests.api.apps import WindowedCount  # noqa: F401 - imported, as TestRunner's caller has

    config = prepare(Settings({"job.data.dir": str(tmp_path), "task.class": "tests.api.apps:WindowedCount"}))
    assert (config["app.class"], config["task.class"]) == ("tests.api.apps:WindowedCount", GRAPH_TASK_CLASS)


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ({"task.class": "tests.jobs:PassThrough"}, "'app.class' and 'task.class' are both set"),
        ({"task.window.ms": "-1"}, "'task.window.ms' must be positive"),
        ({"systems.log.streams.out.samza.msg.serde": "string"}, "is 'string', but its descriptor needs"),
        ({"systems.log.streams.millstream-job-1-by-user.samza.msg.serde": "json"}, "an intermediate stream needs"),
        ({"systems.log.streams.millstream-job-1-by-user.samza.offset.default": "upcoming"}, "must be 'oldest'"),
        ({"app.class": "tests.jobs:PassThrough"}, "not a millstream StreamApplication"),
        ({"app.class": "tests.nowhere:App"}, "cannot import 'tests.nowhere'"),
        ({"app.intermediate.partitons": "3"}, "unknown config key 'app.intermediate.partitons'"),
    ],
)
def test_a_config_the_application_cannot_run_with_is_refused_naming_the_key(tmp_path, extra, problem):
    values = {"job.data.dir": str(tmp_path), "app.class": "tests.api.apps:WindowedCount", **extra}
    with pytest.raises(ConfigError, match=problem):
        prepare(Settings(values))


def test_a_config_that_bypassed_expansion_is_refused_before_planning(tmp_path):
    with pytest.raises(ConfigError, match="was not expanded"):
        require_expanded(Settings({"app.class": "tests.api.apps:WindowedCount"}))


def test_the_refusal_of_an_unexpanded_config_names_the_public_way_to_load_a_job_not_an_internal_module(tmp_path):
    with pytest.raises(ConfigError) as refused:
        require_expanded(Settings({"app.class": "tests.api.apps:WindowedCount"}))
    assert "Job.from_file" in str(refused.value)
    assert "millstream.coordinator" not in str(refused.value) and "load_job_config" not in str(refused.value)


# --- intermediate streams --------------------------------------------------------------------------


def partitions(config: Settings, stream: str) -> int:
    from millstream.composition.systems import system_factory

    admin = system_factory(config, "log").get_admin("log", config)
    return admin.get_system_stream_metadata([stream])[stream].partition_count


def test_intermediate_streams_are_created_with_as_many_partitions_as_the_largest_input(tmp_path):
    config = app_config(tmp_path)
    create_stream(config, "in", 3)
    create_stream(config, "out", 1)
    assert ensure_intermediate_streams(config) == {SystemStream("log", "views-1-by-user"): 3}
    assert partitions(config, "views-1-by-user") == 3


def test_intermediate_partitions_can_be_configured_and_an_existing_stream_is_kept(tmp_path):
    config = app_config(tmp_path, app__intermediate__partitions="5")
    create_stream(config, "in", 3)
    create_stream(config, "out", 1)
    ensure_intermediate_streams(config)
    assert partitions(config, "views-1-by-user") == 5
    again = app_config(tmp_path, app__intermediate__partitions="2")
    assert ensure_intermediate_streams(again) == {SystemStream("log", "views-1-by-user"): 5}


def test_a_missing_output_stops_the_job_at_start_naming_the_stream(tmp_path):
    config = app_config(tmp_path)
    create_stream(config, "in", 3)
    with pytest.raises(StreamNotFoundError, match=r"stream 'log\.out' does not exist: an output of the application"):
        ensure_intermediate_streams(config)


def test_a_missing_output_is_fine_when_the_system_creates_streams_on_the_first_send(tmp_path):
    config = app_config(tmp_path, systems__log__auto__create__streams="true")
    create_stream(config, "in", 3)
    ensure_intermediate_streams(config)


def test_a_missing_input_stops_the_job_naming_the_stream(tmp_path):
    with pytest.raises(StreamNotFoundError, match=r"'log\.in'"):
        ensure_intermediate_streams(app_config(tmp_path))


# --- stream-stream joins ---------------------------------------------------------------------------


def test_a_join_of_a_repartitioned_stream_with_an_input_is_refused_naming_both():
    def describe(app):
        clicks = app.input("log.clicks").partition_by(lambda m: m["user"], name="clicks-by-user")
        views = app.input("log.views").map(lambda m: m, name="views-map")
        clicks.join(views, joiner=lambda a, b: a, within_ms=10, name="j").send_to("log.out")

    with pytest.raises(
        ApplicationError,
        match=r"stream join 'j' joins streams that are not co-partitioned: left side clicks-by-user comes from "
        r"partition_by 'clicks-by-user'; right side views-map comes from input 'log.views'",
    ):
        planned(describe)


def test_a_join_of_two_repartitioned_streams_runs_in_the_stage_after_both():
    def describe(app):
        clicks = app.input("log.clicks").partition_by(lambda m: m["user"], name="clicks-by-user")
        views = app.input("log.views").partition_by(lambda m: m["user"], name="views-by-user")
        clicks.map(lambda kv: kv).join(views, joiner=lambda a, b: a, within_ms=10, name="j").send_to("log.out")

    graph = planned(describe)
    assert graph.stage_of["j"] == 1
    assert {str(s) for s in graph.run_set([1]).input_streams} == {
        "log.millstream-job-1-clicks-by-user",
        "log.millstream-job-1-views-by-user",
    }


def test_a_join_of_inputs_with_different_partition_counts_is_refused_at_start_naming_them(tmp_path):
    config = app_config(tmp_path, app__class="tests.api.apps:JoinedInputs")
    create_stream(config, "left", 2)
    create_stream(config, "right", 3)
    create_stream(config, "out", 1)
    with pytest.raises(
        ApplicationError,
        match=r"stream join 'stream_join-0' joins streams that are not co-partitioned: 'log.left' has 2 "
        r"partitions, 'log.right' has 3 partitions",
    ):
        ensure_intermediate_streams(config)


def test_a_copied_config_with_another_job_name_is_refused_the_intermediate_streams_it_would_share(tmp_path):
    create_stream(app_config(tmp_path), "in", 2)
    create_stream(app_config(tmp_path), "out", 1)
    ensure_intermediate_streams(app_config(tmp_path))
    copy = app_config(tmp_path, job__name="views-copy", app__name="views")  # the same stream names
    with pytest.raises(StreamOwnedError) as refused:
        ensure_intermediate_streams(copy)
    message = str(refused.value)
    assert "stream 'log.views-1-by-user' is owned by job 'views-1'; job 'views-copy-1' cannot write it too" in message
    assert "'app.intermediate.owner.takeover=true'" in message


def test_the_stages_of_one_application_run_as_jobs_of_their_own_share_its_intermediate_streams(tmp_path):
    create_stream(app_config(tmp_path), "in", 2)
    create_stream(app_config(tmp_path), "out", 1)
    for stage in ("0", "1"):
        config = app_config(tmp_path, app__stage=stage)
        assert intermediate_owner(config) == intermediate_owner(app_config(tmp_path))
        assert ensure_intermediate_streams(config) == {SystemStream("log", "views-1-by-user"): 2}


def test_the_intermediate_streams_are_handed_over_on_purpose_and_the_old_owner_is_refused(tmp_path):
    create_stream(app_config(tmp_path), "in", 2)
    create_stream(app_config(tmp_path), "out", 1)
    ensure_intermediate_streams(app_config(tmp_path))
    ensure_intermediate_streams(
        app_config(tmp_path, job__name="views-2", app__name="views", app__intermediate__owner__takeover="true")
    )
    ensure_intermediate_streams(app_config(tmp_path, job__name="views-2", app__name="views"))
    with pytest.raises(StreamOwnedError, match="owned by job 'views-2-1'"):
        ensure_intermediate_streams(app_config(tmp_path))
