"""Wiring an ``OperatorGraphTask`` to its job: the application, the metadata store, systems and serdes.

Kept apart from ``graph_task`` so the graph can be built and driven in tests without any of them. The
metadata store, the admins and the serdes are the container's (its services, handed over in the task
context): a high-level task opens none of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from millstream.api.task import TaskContext
from millstream.config.views import AppConfig, TaskConfig
from millstream.contracts import coordination
from millstream.contracts.coordination import latest_job_model
from millstream.contracts.systems import SystemAdmin
from millstream.control.budget import BudgetSettings
from millstream.control.combining import WatermarkCombiner
from millstream.control.state import ControlStateStore
from millstream.errors import MillstreamError, StreamNotFoundError
from millstream.operators.graph_task import ControlState, GraphSettings, IntermediateStreamInfo, TaskGraph
from millstream.operators.planner import (
    IntermediateStream,
    feeding_streams,
    load_application,
    watermark_boundary_ms,
)
from millstream.operators.state import StoreBackedState, StoreControlState
from millstream.operators.stores import OPERATOR_STORE, has_operator_store
from millstream.serde.registry import SerdeRegistry

if TYPE_CHECKING:
    from millstream.runtime.services import ContainerServices


def build_task_graph(context: TaskContext) -> tuple[TaskGraph, ControlState, list[Callable[[], Any]]]:
    """The task's graph, where its control state persists, and what to close when the task stops.

    A job with stateful operators keeps their entries and the control state in the task's operator
    store (``operators.stores``); a job without any keeps its control state in the metadata store."""
    config = context.config
    application = load_application(config)
    app = config.app
    task = config.task
    run = application.run_set(None if app.stage is None else [app.stage])
    closers: list[Callable[[], Any]] = []
    services = _services(context)
    store = services.metadata_store()  # the container's own connection: a task runs on the container's thread
    try:
        container_id = context.container_id
        generation = coordination.current_generation(store)
        fence = coordination.writer_expectation(
            generation,
            container_id,
            coordination.container_epoch(store, container_id),
        )
        model = latest_job_model(store)
        if model is None:
            raise MillstreamError(f"task '{context.task_name}': no job model is published")
        serdes = services.serdes
        operator_store = context.get_store(OPERATOR_STORE) if has_operator_store(config) else None
        state_factory = None if operator_store is None else partial(StoreBackedState, operator_store)
        systems = {ssp.system for ssp in context.system_stream_partitions}
        systems.update(stream.system_stream.system for stream in run.intermediate_streams)
        admins = services.admins.of(systems)
        infos = {
            stream.system_stream: _stream_info(stream, admins[stream.system_stream.system], serdes)
            for stream in run.intermediate_streams
        }
        producer_counts = {}
        for stream in run.intermediate_outputs:
            feeding = feeding_streams(application, stream.partition_by)
            producer_counts[stream.partition_by.op_id] = sum(
                1 for member in model.tasks.values() if any(ssp.system_stream in feeding for ssp in member.ssps)
            )
        graph = TaskGraph(
            task_name=str(context.task_name),
            operators=list(run.operators),
            source_inputs=list(run.source_inputs),
            intermediate_inputs=[infos[stream.system_stream] for stream in run.intermediate_inputs],
            intermediate_outputs=[infos[stream.system_stream] for stream in run.intermediate_outputs],
            producer_counts=producer_counts,
            ssps=context.system_stream_partitions,
            settings=GraphSettings(
                aggregate=app.control_aggregation,
                idle_timeout_ms=task.watermark_idle_timeout_ms,
                quorum_percentage=task.watermark_quorum_percentage,
                max_out_of_orderness_ms=app.watermark_max_out_of_orderness_ms,
                watermark_interval_ms=app.control_watermark_interval_ms,
                watermark_boundary_ms=watermark_boundary_ms(application) if app.watermark_window_boundaries else 0,
            ),
            comparators={system: admin.offset_comparator for system, admin in admins.items()},
            run_id=coordination.job_run_id(config, generation),
            state_factory=state_factory,
            combiner=_combiner(services, app, task, watermark_boundary_ms(application)),
        )
        in_metadata = ControlStateStore(store, str(context.task_name), fence)
        if operator_store is None:
            return graph, in_metadata, closers
        control = StoreControlState(operator_store, str(context.task_name), graph.flush_state, in_metadata.load)
        return graph, control, closers
    except BaseException:
        for close in closers:
            close()
        raise


def _combiner(
    services: ContainerServices, app: AppConfig, task: TaskConfig, boundary_ms: int
) -> WatermarkCombiner | None:
    """The container's ``WatermarkCombiner`` (broadcast, or aggregated with ``app.control.aggregation``) with its
    watermark budget (``app.control.watermark.budget.*``), or None where each task sends its own watermarks: an
    idle timeout, or ``app.control.watermark.combine: false`` (see that key)."""
    if task.watermark_idle_timeout_ms > 0 or not app.control_watermark_combine:
        return None
    boundary = boundary_ms if app.watermark_window_boundaries else 0
    budget = BudgetSettings(
        share=app.control_watermark_budget_share,
        floor_records=app.control_watermark_budget_floor_records,
        max_delay_ms=app.control_watermark_budget_max_delay_ms,
        interval_ms=app.control_watermark_interval_ms,
    )
    return services.watermark_combiner(app.control_watermark_interval_ms, boundary, app.control_aggregation, budget)


def _services(context: TaskContext) -> ContainerServices:
    """The container's services, which the container hands its tasks in their context."""
    services: ContainerServices | None = getattr(context, "services", None)
    if services is None:
        raise MillstreamError(
            f"task '{context.task_name}': an operator graph is wired with its container's services, and its "
            "context has none (run it in a container)"
        )
    return services


def _stream_info(stream: IntermediateStream, admin: SystemAdmin, serdes: SerdeRegistry) -> IntermediateStreamInfo:
    target = stream.system_stream
    count = admin.partition_counts([target.stream]).get(target.stream)
    if count is None:
        raise StreamNotFoundError(target.system, target.stream, "the intermediate stream of a partition_by")
    spec = stream.partition_by
    return IntermediateStreamInfo(
        spec,
        target,
        count,
        serdes.for_stream(spec.key_serde, target, "key", f"key_serde of partition_by '{spec.name}'"),
        serdes.for_stream(spec.msg_serde, target, "msg", f"msg_serde of partition_by '{spec.name}'"),
    )
