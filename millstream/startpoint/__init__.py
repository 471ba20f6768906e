"""Startpoints: move where a job starts reading, per partition, without touching its checkpoints.

from millstream.startpoint import StartpointTimestamp, set_startpoints
set_startpoints(config, "kafka.clicks", StartpointTimestamp(1_700_000_000_000), partitions=[0, 3])
"""

from millstream.contracts.startpoints import (
    Startpoint,
    StartpointCustom,
    StartpointOldest,
    StartpointSpecific,
    StartpointTimestamp,
    StartpointUpcoming,
    StartpointVisitor,
    register_startpoint_type,
)
from millstream.startpoint.manager import StartpointManager
from millstream.startpoint.tools import delete_startpoints, list_startpoints, parse_timestamp, set_startpoints

__all__ = [
    "Startpoint",
    "StartpointCustom",
    "StartpointManager",
    "StartpointOldest",
    "StartpointSpecific",
    "StartpointTimestamp",
    "StartpointUpcoming",
    "StartpointVisitor",
    "delete_startpoints",
    "list_startpoints",
    "parse_timestamp",
    "register_startpoint_type",
    "set_startpoints",
]
