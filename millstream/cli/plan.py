"""``millstream plan CONFIG``: the stages of a high-level application and the streams between them.

Read-only: it describes the application, reads the partition counts of its streams and prints what a
run would create, without creating anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from millstream.cli.common import ConfigPath, Overrides, guarded, load, out, with_stage

if TYPE_CHECKING:
    from millstream.model import SystemStream
    from millstream.operators.planner import ExecutionPlan


def plan(
    config: ConfigPath,
    overrides: Overrides = None,
    stage: Annotated[int | None, typer.Option("--stage", help="Show only this stage (as run with --stage)")] = None,
) -> None:
    """Print the stages (cut at each partition_by) and the input, intermediate and output streams."""
    job = load(config, with_stage(overrides, stage))
    planned = guarded(job.plan)
    graph = planned.graph
    out.print(
        f"application {graph.app_class}: {graph.stage_count} stage(s); intermediate streams "
        f"{graph.app_name}-{graph.app_id}-<name>, {planned.intermediate_partitions} partition(s)",
        highlight=False,
    )
    shown = planned.run.stages
    for index in shown:
        stage_run = graph.run_set([index])
        out.print(f"stage {index}", highlight=False)
        for spec in stage_run.source_inputs:
            out.print(f"  input         {_describe(planned, spec.descriptor.system_stream)}", highlight=False)
        for stream in stage_run.intermediate_inputs:
            out.print(f"  reads         {_describe(planned, stream.system_stream)}", highlight=False)
        operators = " → ".join(spec.op_id for spec in stage_run.operators)
        out.print(f"  operators     {operators}", highlight=False)
        for stream in stage_run.intermediate_outputs:
            out.print(f"  repartitions  {_describe(planned, stream.system_stream)}", highlight=False)
        for output in stage_run.outputs:
            out.print(f"  output        {_describe(planned, output.system_stream)}", highlight=False)


def _describe(planned: ExecutionPlan, stream: SystemStream) -> str:
    info = planned.streams.get(stream)
    if info is None or info.partitions is None:
        return f"{stream} (missing)"
    state = "" if info.exists else ", created on first run"
    return f"{stream} ({info.partitions} partition{'s' if info.partitions != 1 else ''}{state})"
