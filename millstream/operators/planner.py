"""Planning a high-level application: stages cut at ``partition_by``, intermediate streams, the job config.

**Stages.** An operator's stage is the largest stage of its inputs, plus one behind a ``partition_by``:
the operators after a repartitioning read its intermediate stream, so they run wherever its partitions
are, not where the data came from. Stage ``s`` runs the operators of stage ``s`` and, upstream of them,
every operator it needs that does not cross a ``partition_by`` (a map of a source merged into a later
stage runs in that stage too). In one job every task runs every stage over the partitions it owns; with
``app.stage`` (``millstream run --stage N``) a job runs one stage, and the stages of one application run
as separate jobs joined only by their intermediate streams.

**Intermediate streams** are named ``<app.name>-<app.id>-<partition_by name>`` on
``app.intermediate.system``, created by the first job that starts, with ``app.intermediate.partitions``
partitions or as many as the application's largest input.

**Config.** ``expand_application`` turns ``app.class`` into what the runtime runs: ``task.class`` the
internal ``OperatorGraphTask``, ``task.inputs`` the stage's inputs, ``task.window.ms`` the watermark
interval, and stream-level serdes: the descriptors' for inputs and outputs, raw bytes for intermediate
streams (the task frames and applies the partition_by serdes itself), read from their oldest offset.
It runs where every config is resolved (``resolve_paths``), on the driver, so containers receive the
expanded config and never plan.

**Stream-stream joins** need both sides co-partitioned: partition ``p`` of one side must hold the same
keys as partition ``p`` of the other, so that one task sees both. The planner accepts a join whose sides
both come from ``partition_by``s (the intermediate streams of one application share their partition
count and partitioner), or both from inputs with the same partition count (checked against the streams
when the job starts); it refuses any other join, naming the streams at fault.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from millstream.api.application import (
    InputDescriptor,
    OutputDescriptor,
    StreamApplication,
    StreamApplicationDescriptor,
    describe_application,
)
from millstream.api.errors import ApplicationError
from millstream.api.specs import (
    AsyncMapSpec,
    InputSpec,
    JoinSpec,
    OperatorSpec,
    PartitionBySpec,
    SendToSpec,
    StreamJoinSpec,
    WindowSpec,
)
from millstream.api.windows import SlidingWindow, TumblingWindow
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.config.views import config_flag
from millstream.contracts.systems import StreamOwner, SystemAdmin
from millstream.control.boundary import boundary_period
from millstream.errors import ConfigError, StreamNotFoundError
from millstream.model import SystemStream
from millstream.operators.stores import operator_store_config
from millstream.plugins import load_object

log = logging.getLogger(__name__)

GRAPH_TASK_CLASS = "millstream.operators.graph_task:OperatorGraphTask"
"""The ``task.class`` of every high-level job."""
ASYNC_GRAPH_TASK_CLASS = "millstream.operators.graph_task:AsyncOperatorGraphTask"
"""The ``task.class`` of a high-level job with ``map_async`` / ``flat_map_async`` operators."""
GRAPH_TASK_CLASSES = (GRAPH_TASK_CLASS, ASYNC_GRAPH_TASK_CLASS)


@dataclass(frozen=True)
class IntermediateStream:
    partition_by: PartitionBySpec
    system_stream: SystemStream
    producer_stage: int
    consumer_stages: tuple[int, ...]


@dataclass(frozen=True)
class RunSet:
    """The operators a job (or one stage of it) runs, and the streams they read and write."""

    stages: tuple[int, ...]
    operators: tuple[OperatorSpec, ...]
    """Every non-input operator to run, in description order (upstream before downstream)."""
    source_inputs: tuple[InputSpec, ...]
    intermediate_inputs: tuple[IntermediateStream, ...]
    intermediate_outputs: tuple[IntermediateStream, ...]
    outputs: tuple[OutputDescriptor, ...]

    @property
    def input_streams(self) -> list[SystemStream]:
        streams = [spec.descriptor.system_stream for spec in self.source_inputs]
        streams.extend(stream.system_stream for stream in self.intermediate_inputs)
        return streams

    @property
    def intermediate_streams(self) -> list[IntermediateStream]:
        seen: dict[SystemStream, IntermediateStream] = {}
        for stream in (*self.intermediate_inputs, *self.intermediate_outputs):
            seen.setdefault(stream.system_stream, stream)
        return list(seen.values())


@dataclass(frozen=True)
class ApplicationGraph:
    """A described application and its stages."""

    app_class: str
    app_name: str
    app_id: str
    descriptor: StreamApplicationDescriptor
    stage_of: dict[str, int]
    intermediates: dict[str, IntermediateStream]
    stage_count: int
    _run_sets: dict[tuple[int, ...], RunSet] = field(default_factory=dict, compare=False, repr=False)

    @property
    def source_inputs(self) -> list[InputSpec]:
        return self.descriptor.graph.inputs

    def stages(self) -> list[RunSet]:
        return [self.run_set([index]) for index in range(self.stage_count)]

    def run_set(self, stages: Iterable[int] | None = None) -> RunSet:
        """What runs for ``stages`` (all of them when None)."""
        selected = tuple(sorted(set(range(self.stage_count) if stages is None else stages)))
        cached = self._run_sets.get(selected)
        if cached is not None:
            return cached
        for index in selected:
            if not 0 <= index < self.stage_count:
                raise ConfigError(
                    f"config key 'app.stage' is {index}, but application {self.app_class} has stages "
                    f"0..{self.stage_count - 1}"
                )
        operators = self.descriptor.graph.operators
        members: set[str] = set()
        pending = [op for op in operators if not isinstance(op, InputSpec) and self.stage_of[op.op_id] in selected]
        while pending:
            op = pending.pop()
            if op.op_id in members:
                continue
            members.add(op.op_id)
            pending.extend(
                upstream
                for upstream in op.inputs
                if not isinstance(upstream, (InputSpec, PartitionBySpec)) and upstream.op_id not in members
            )
        ordered = tuple(op for op in operators if op.op_id in members)
        sources: dict[str, InputSpec] = {}
        consumed: dict[str, IntermediateStream] = {}
        for op in ordered:
            for upstream in op.inputs:
                if isinstance(upstream, InputSpec):
                    sources.setdefault(upstream.op_id, upstream)
                elif isinstance(upstream, PartitionBySpec):
                    consumed.setdefault(upstream.op_id, self.intermediates[upstream.op_id])
        produced = tuple(self.intermediates[op.op_id] for op in ordered if isinstance(op, PartitionBySpec))
        outputs = tuple(op.output for op in ordered if isinstance(op, SendToSpec))
        run = RunSet(
            selected,
            ordered,
            tuple(spec for spec in self.source_inputs if spec.op_id in sources),
            tuple(consumed.values()),
            produced,
            outputs,
        )
        self._run_sets[selected] = run
        return run


def watermark_boundary_ms(graph: ApplicationGraph) -> int:
    """The boundary period of the application's windows (``millstream.control.boundary``): every end of every
    tumbling and sliding window of every stage is a multiple of it — the gcd of their sizes and slides (a
    sliding window's ends are ``k * slide + size``). Every stage gets the same period: a source's watermark
    reaches the windows of later stages through their intermediate streams. 0 when there is no fixed window:
    session windows and stream joins close at event times that depend on the data, so their watermarks keep
    the interval."""
    periods: list[int] = []
    for op in graph.descriptor.graph.operators:
        if not isinstance(op, WindowSpec):
            continue
        window = op.window
        if isinstance(window, TumblingWindow):
            periods.append(window.size_ms)
        elif isinstance(window, SlidingWindow):
            periods.extend((window.size_ms, window.slide_ms))
    return boundary_period(periods)


def intermediate_stream_name(app_name: str, app_id: str, name: str) -> str:
    return f"{app_name}-{app_id}-{name}"


def plan_stages(
    descriptor: StreamApplicationDescriptor,
    *,
    app_class: str = "",
    app_name: str = "millstream-job",
    app_id: str = "1",
    intermediate_system: str = "log",
) -> ApplicationGraph:
    """Assign every operator its stage and name the intermediate streams (no I/O)."""
    stage_of: dict[str, int] = {}
    for op in descriptor.graph.operators:  # description order is a topological order
        stage = 0
        for upstream in op.inputs:
            upstream_stage = stage_of[upstream.op_id]
            stage = max(stage, upstream_stage + 1 if isinstance(upstream, PartitionBySpec) else upstream_stage)
        stage_of[op.op_id] = stage
    intermediates: dict[str, IntermediateStream] = {}
    for spec in descriptor.graph.partition_bys:
        consumers = descriptor.graph.consumers(spec)
        target = SystemStream(intermediate_system, intermediate_stream_name(app_name, app_id, spec.name))
        intermediates[spec.op_id] = IntermediateStream(
            spec, target, stage_of[spec.op_id], tuple(sorted({stage_of[op.op_id] for op in consumers}))
        )
    inputs = {spec.descriptor.system_stream for spec in descriptor.graph.inputs}
    for intermediate in intermediates.values():
        if intermediate.system_stream in inputs:
            raise ApplicationError(
                f"partition_by '{intermediate.partition_by.name}' would write '{intermediate.system_stream}', "
                "which is an input of the application; choose another name"
            )
    for op in descriptor.graph.operators:
        if isinstance(op, StreamJoinSpec):
            _check_co_partitioned(op)
    stage_count = max(stage_of.values(), default=0) + 1
    return ApplicationGraph(app_class, app_name, app_id, descriptor, stage_of, intermediates, stage_count)


def join_origins(spec: OperatorSpec) -> list[InputSpec | PartitionBySpec]:
    """The inputs and ``partition_by``s whose messages reach ``spec`` without crossing a repartitioning."""
    origins: dict[str, InputSpec | PartitionBySpec] = {}
    pending = [spec]
    seen: set[str] = set()
    while pending:
        op = pending.pop()
        if op.op_id in seen:
            continue
        seen.add(op.op_id)
        if isinstance(op, (InputSpec, PartitionBySpec)):
            origins.setdefault(op.op_id, op)
        else:
            pending.extend(op.inputs)
    return sorted(origins.values(), key=lambda op: op.op_id)


def _origin_name(origin: InputSpec | PartitionBySpec) -> str:
    if isinstance(origin, InputSpec):
        return f"input '{origin.descriptor.system_stream}'"
    return f"partition_by '{origin.name}'"


def _check_co_partitioned(join: StreamJoinSpec) -> None:
    kinds: set[type[OperatorSpec]] = set()
    for side in join.inputs:
        kinds.update(type(origin) for origin in join_origins(side))
    if len(kinds) <= 1:
        return
    described = "; ".join(
        f"{label} side {side.op_id} comes from " + ", ".join(_origin_name(o) for o in join_origins(side))
        for label, side in zip(("left", "right"), join.inputs, strict=True)
    )
    raise ApplicationError(
        f"stream join '{join.op_id}' joins streams that are not co-partitioned: {described}. Repartition both "
        "sides by the join key with partition_by (or join two inputs with the same partition count)"
    )


def _check_join_partitions(graph: ApplicationGraph, streams: dict[SystemStream, StreamPlan]) -> None:
    """Both sides of every stream join have the same partition count (the planner checked the rest)."""
    for op in graph.descriptor.graph.operators:
        if not isinstance(op, StreamJoinSpec):
            continue
        counts: dict[str, int] = {}
        for side in op.inputs:
            for origin in join_origins(side):
                stream = (
                    origin.descriptor.system_stream
                    if isinstance(origin, InputSpec)
                    else graph.intermediates[origin.op_id].system_stream
                )
                planned = streams[stream].partitions
                if planned is not None:
                    counts[f"'{stream}'"] = planned
        if len(set(counts.values())) > 1:
            listed = ", ".join(f"{name} has {count} partitions" for name, count in counts.items())
            raise ApplicationError(
                f"stream join '{op.op_id}' joins streams that are not co-partitioned: {listed}; they need the "
                "same partition count"
            )


def load_application(config: Settings) -> ApplicationGraph:
    """Import ``app.class``, describe it, and plan its stages."""
    app = config.app
    job = config.job
    name = app.class_name
    if not name:
        raise ConfigError("config key 'app.class' is required: the StreamApplication to run (module:Class)")
    application_class = _load_application_class(name, config)
    try:
        application = application_class()
    except Exception as error:
        raise ConfigError(f"config key 'app.class': cannot create {name}: {type(error).__name__}: {error}") from None
    descriptor = describe_application(application, config)
    return plan_stages(
        descriptor,
        app_class=name,
        app_name=app.name or job.name,
        app_id=app.id or job.id,
        intermediate_system=app.intermediate_system,
    )


def _load_application_class(name: str, config: Config) -> type[StreamApplication]:
    if config.source:
        config_dir = os.path.dirname(config.source)
        if config_dir not in sys.path:
            sys.path.insert(0, config_dir)
    loaded = load_object(name, "app.class")
    if not (isinstance(loaded, type) and issubclass(loaded, StreamApplication)):
        raise ConfigError(f"config key 'app.class': '{name}' is not a millstream StreamApplication subclass")
    return loaded


def _names_loaded_application(name: str) -> bool:
    """Whether ``task.class`` names a StreamApplication whose module is already imported — as when a
    test hands the class itself to ``TestRunner``. Never imports: a task class stays unloaded until
    the coordinator plans, as before."""
    module_name, sep, attribute = name.partition(":")
    if not sep:
        module_name, _, attribute = name.rpartition(".")
    module = sys.modules.get(module_name)
    candidate = getattr(module, attribute, None) if module is not None else None
    return isinstance(candidate, type) and issubclass(candidate, StreamApplication)


def is_application(config: Config) -> bool:
    return bool(config.get("app.class"))


def expand_application(config: Settings) -> Settings:
    """The config a high-level job runs with (see the module docstring); idempotent, and the same keys
    for a low-level job."""
    updates: dict[str, str] = {}
    task_class = config.get("task.class")
    if not config.get("app.class"):
        if not task_class or not _names_loaded_application(task_class):
            return config
        updates["app.class"] = task_class
    elif task_class and task_class not in GRAPH_TASK_CLASSES:
        raise ConfigError(
            "config keys 'app.class' and 'task.class' are both set: a high-level application runs its own "
            "task; remove task.class"
        )
    config = config.with_overrides(updates) if updates else config
    app = config.app
    job = config.job
    app_name, app_id = app.name or job.name, app.id or job.id
    updates.update({"app.name": app_name, "app.id": app_id, "task.class": GRAPH_TASK_CLASS})
    graph = load_application(config.with_overrides(updates))
    run = graph.run_set(None if app.stage is None else [app.stage])
    if app.stage is not None and job.name == app_name:
        updates["job.name"] = f"{app_name}-stage-{app.stage}"
    updates["task.inputs"] = ",".join(str(stream) for stream in run.input_streams)
    if "task.window.ms" not in config:
        updates["task.window.ms"] = str(app.watermark_interval_ms)
    elif config.get_int("task.window.ms", -1) <= 0:
        raise ConfigError(
            "config key 'task.window.ms' must be positive for a high-level application: it is the interval of "
            "its watermarks and timers (leave it unset to use app.watermark.interval.ms)"
        )
    for descriptor in _descriptors(run):
        for kind, serde in (("key", descriptor.key_serde), ("msg", descriptor.msg_serde)):
            if serde:
                _set_stream_serde(config, updates, descriptor.system_stream, kind, serde, "its descriptor")
    updates.update(_async_config(config, run.operators))
    for operator in run.operators:
        if isinstance(operator, JoinSpec):
            for key, value in operator.table.config().items():
                configured = config.get(key)
                if configured is not None and configured != value:
                    raise ConfigError(
                        f"config key '{key}' is '{configured}', but table '{operator.table.name}' of join "
                        f"'{operator.op_id}' sets '{value}'"
                    )
                updates[key] = value
    updates.update(
        operator_store_config(config, run.operators, updates.get("job.name", job.name), job.id, app.intermediate_system)
    )
    for stream in run.intermediate_streams:
        for kind in ("key", "msg"):
            _set_stream_serde(config, updates, stream.system_stream, kind, "bytes", "an intermediate stream")
        offset_key = f"systems.{stream.system_stream.system}.streams.{stream.system_stream.stream}.samza.offset.default"
        if config.get(offset_key, "oldest") != "oldest":
            raise ConfigError(
                f"config key '{offset_key}' must be 'oldest': an intermediate stream is read from its start"
            )
        updates[offset_key] = "oldest"
        prefix = f"systems.{stream.system_stream.system}.streams.{stream.system_stream.stream}.samza."
        updates[f"{prefix}intermediate"] = "true"
        if config.get(f"{prefix}delete.committed.messages") is None:
            updates[f"{prefix}delete.committed.messages"] = "true"
    return config.with_overrides(updates)


def _async_config(config: Config, operators: Sequence[OperatorSpec]) -> dict[str, str]:
    """``map_async`` / ``flat_map_async``: the async graph task, ``task.max.concurrency`` the largest
    ``concurrency`` and ``task.async.ordering`` ``unordered`` when one is not ``ordered`` (unless set)."""
    asyncs = [spec for spec in operators if isinstance(spec, AsyncMapSpec)]
    if not asyncs:
        return {}
    updates = {"task.class": ASYNC_GRAPH_TASK_CLASS}
    if "task.max.concurrency" not in config:
        updates["task.max.concurrency"] = str(max(spec.concurrency for spec in asyncs))
    if "task.async.ordering" not in config:
        updates["task.async.ordering"] = "partition" if all(spec.ordered for spec in asyncs) else "unordered"
    return updates


def _descriptors(run: RunSet) -> list[InputDescriptor | OutputDescriptor]:
    return [*(spec.descriptor for spec in run.source_inputs), *run.outputs]


def _set_stream_serde(
    config: Config, updates: dict[str, str], stream: SystemStream, kind: str, serde: str, why: str
) -> None:
    key = f"systems.{stream.system}.streams.{stream.stream}.samza.{kind}.serde"
    configured = config.get(key)
    if configured is not None and configured != serde:
        raise ConfigError(
            f"config key '{key}' is '{configured}', but {why} needs the {kind} serde '{serde}' for '{stream}'"
        )
    updates[key] = serde


def require_expanded(config: Config) -> None:
    """Fail early when a config with ``app.class`` bypassed ``expand_application`` (containers would get a
    config without the graph task)."""
    if is_application(config) and config.get("task.class") not in GRAPH_TASK_CLASSES:
        raise ConfigError(
            "config key 'app.class' is set but the config was not expanded for it: run the job through "
            "millstream.Job (Job.from_file(path) or Job(config)), which prepares its config"
        )


@dataclass(frozen=True)
class StreamPlan:
    system_stream: SystemStream
    partitions: int | None
    """Existing partitions, or the count the job will create it with; None for a missing stream."""
    exists: bool
    role: str


@dataclass(frozen=True)
class ExecutionPlan:
    graph: ApplicationGraph
    run: RunSet
    intermediate_partitions: int
    streams: dict[SystemStream, StreamPlan]


AdminSource = Callable[[str], SystemAdmin]
"""A system's admin, started, by system name: the driver's (``DriverServices.admin``), which owns and stops it."""


def execution_plan(config: Settings, admins: AdminSource) -> ExecutionPlan:
    """The stages and streams of the configured application, with partition counts; reads only."""
    graph = load_application(config)
    app = config.app
    run = graph.run_set(None if app.stage is None else [app.stage])
    wanted: dict[SystemStream, str] = {}
    for spec in graph.source_inputs:
        wanted[spec.descriptor.system_stream] = "input"
    for intermediate in graph.intermediates.values():
        wanted[intermediate.system_stream] = "intermediate"
    for output in run.outputs:
        wanted.setdefault(output.system_stream, "output")
    found: dict[SystemStream, int] = {}
    for system in sorted({stream.system for stream in wanted}):
        names = [stream.stream for stream in wanted if stream.system == system]
        for name, count in admins(system).partition_counts(names).items():
            found[SystemStream(system, name)] = count
    sources = [found.get(spec.descriptor.system_stream) for spec in graph.source_inputs]
    configured = app.intermediate_partitions
    count = configured if configured > 0 else max((n for n in sources if n is not None), default=1)
    streams = {}
    for stream, role in wanted.items():
        partitions = found.get(stream)
        if partitions is None and role == "intermediate":
            streams[stream] = StreamPlan(stream, count, False, role)
        else:
            streams[stream] = StreamPlan(stream, partitions, partitions is not None, role)
    _check_join_partitions(graph, streams)
    return ExecutionPlan(graph, run, count, streams)


def ensure_intermediate_streams(config: Settings, admins: AdminSource) -> dict[SystemStream, int]:
    """Create the application's intermediate streams that do not exist yet (on the driver, before the job
    model is computed); returns every intermediate stream's partition count."""
    from millstream.contracts.systems import StreamSpec

    plan = execution_plan(config, admins)
    missing_inputs = [
        spec.descriptor.system_stream
        for spec in plan.graph.source_inputs
        if not plan.streams[spec.descriptor.system_stream].exists
    ]
    if missing_inputs:
        stream = missing_inputs[0]
        raise StreamNotFoundError(stream.system, stream.stream, "an input of the application; create it first")
    missing_outputs = [
        planned.system_stream
        for planned in plan.streams.values()
        if planned.role == "output" and not planned.exists and not _creates_on_send(config, planned.system_stream)
    ]
    if missing_outputs:
        stream = missing_outputs[0]
        raise StreamNotFoundError(
            stream.system,
            stream.stream,
            f"an output of the application; create it first, or let the system create it on the first send "
            f"(systems.{stream.system}.auto.create.streams=true)",
        )
    counts = {}
    for intermediate in plan.graph.intermediates.values():
        target = intermediate.system_stream
        planned = plan.streams[target]
        if planned.exists and planned.partitions != plan.intermediate_partitions:
            log.warning(
                "intermediate stream %s exists with %s partitions (the plan would create %s); using it as is",
                target, planned.partitions, plan.intermediate_partitions,
            )  # fmt: skip
        partitions = planned.partitions or plan.intermediate_partitions
        spec = StreamSpec(target.system, target.stream, partitions, intermediate=True)
        admin = admins(target.system)
        if not planned.exists and admin.create_stream(spec):
            log.info("created intermediate stream %s (%d partitions)", target, partitions)
        _claim_intermediate(config, admin, target)
        counts[target] = admin.partition_counts([target.stream]).get(target.stream, partitions)
        admin.validate_stream(replace(spec, partition_count=counts[target]))
    return counts


def intermediate_owner(config: Settings) -> StreamOwner:
    """Who owns an application's intermediate streams: the job that runs it, named as before ``app.stage``
    gives each stage a job of its own (``<app.name>-stage-<N>``), so the stages of one application share them,
    and a copied config with another ``job.name`` but the same ``app.name`` (the same stream names) does not."""
    job, app = config.job, config.app
    name = job.name
    if app.stage is not None and app.name and name == f"{app.name}-stage-{app.stage}":
        name = app.name
    return StreamOwner(f"{name}-{job.id}", "")


def _claim_intermediate(config: Settings, admin: SystemAdmin, stream: SystemStream) -> None:
    """Own an intermediate stream before any container writes it: two jobs writing one would each count the
    other's messages, and each would take the other's end-of-stream and watermarks for its own."""
    owner, key = intermediate_owner(config), "app.intermediate.owner.takeover"
    takeover = config.app.intermediate_owner_takeover
    previous = admin.claim_stream(stream.stream, owner, takeover=takeover, takeover_key=key)
    if previous is not None and previous != owner:
        log.warning(
            "intermediate stream %s: handed over from %s to %s (app.intermediate.owner.takeover); remove the key",
            stream, previous.describe(), owner.describe(),
        )  # fmt: skip


def _creates_on_send(config: Config, stream: SystemStream) -> bool:
    """``systems.<s>.auto.create.streams``, the key the log and Kafka systems share."""
    return config_flag(config, f"systems.{stream.system}.auto.create.streams")


def feeding_streams(graph: ApplicationGraph, spec: OperatorSpec) -> set[SystemStream]:
    """The streams whose messages reach ``spec`` without crossing a ``partition_by``: a task is one of the
    producers of a ``partition_by`` exactly when it reads a partition of one of them."""
    streams: set[SystemStream] = set()
    pending = list(spec.inputs)
    seen: set[str] = set()
    while pending:
        upstream = pending.pop()
        if upstream.op_id in seen:
            continue
        seen.add(upstream.op_id)
        if isinstance(upstream, InputSpec):
            streams.add(upstream.descriptor.system_stream)
        elif isinstance(upstream, PartitionBySpec):
            streams.add(graph.intermediates[upstream.op_id].system_stream)
        else:
            pending.extend(upstream.inputs)
    return streams


def prepare_application(config: Settings, admins: AdminSource) -> None:
    """What the job coordinator does for a high-level job before computing its model: check the config
    was expanded, and create the intermediate streams."""
    require_expanded(config)
    ensure_intermediate_streams(config, admins)
