"""The control messages a producing task writes into intermediate streams: watermark, end-of-stream, drain.

Each carries the producing task's name and how many tasks produce to the stream, so a consumer can
tell when *every* producer has spoken without knowing the upstream job's model — which is what lets a
stage run as a separate job. A message without a task name comes from a source or from the
aggregating task of Samza's two-phase mode and is authoritative by itself.

Watermarks are event times in epoch milliseconds. A watermark ``W`` promises that no later message
has a timestamp below ``W``: a window ``[start, end)`` is complete once ``W >= end``.
"""

from __future__ import annotations

from dataclasses import dataclass

CONTROL_MESSAGE_VERSION = 1

MAX_WATERMARK = 2**63 - 1
"""The watermark of a finished input (Java's ``Long.MAX_VALUE``): every window is complete."""

MIN_WATERMARK = -(2**63)
"""No watermark yet: holds back every minimum it takes part in."""


@dataclass(frozen=True, slots=True)
class EndOfStreamMessage:
    """``task_name`` will send nothing more to this partition."""

    task_name: str | None
    task_count: int
    version: int = CONTROL_MESSAGE_VERSION


@dataclass(frozen=True, slots=True)
class WatermarkMessage:
    """``task_name`` will send nothing more to this partition with a timestamp below ``timestamp``."""

    timestamp: int
    task_name: str | None
    task_count: int
    version: int = CONTROL_MESSAGE_VERSION


@dataclass(frozen=True, slots=True)
class DrainMessage:
    """``task_name`` stops sending to this partition because run ``run_id`` of its job is draining.

    Reconciled like end-of-stream, but only for the run it names and never persisted: the partition is
    done for this run, and the next run reads on after it. A consumer ignores the drain of another run
    (a message a drained earlier run left in the stream must not drain a later one)."""

    task_name: str | None
    task_count: int
    run_id: str
    version: int = CONTROL_MESSAGE_VERSION


@dataclass(frozen=True, slots=True)
class CombinedWatermarkMessage:
    """Each of ``task_names`` will send nothing more to this partition with a timestamp below ``timestamp``.

    One container's watermark of a stream for all of its producing tasks (``combining``): the minimum of
    their watermarks, so a lower bound for each. A consumer raises each named task's watermark to it (never
    lowers one), so its per-producer rules see what ``len(task_names)`` watermark messages would have said,
    or less. Always names its tasks: it is never authoritative by itself."""

    timestamp: int
    task_names: tuple[str, ...]
    task_count: int
    version: int = CONTROL_MESSAGE_VERSION


ControlMessage = EndOfStreamMessage | WatermarkMessage | DrainMessage | CombinedWatermarkMessage
