"""Clicks per user per minute of event time, counted after a repartitioning by user.

Stage 0 reads ``clicks`` (keyed by session, so one user's clicks are spread over partitions) and
repartitions them by user into an intermediate stream; stage 1 counts each user's clicks in one-minute
tumbling windows. A window fires when stage 1's watermark — the minimum over every stage 0 task's
watermark, carried in-band through the intermediate stream — passes its end, or when the input ends or
is drained; each count is therefore complete when it is emitted.
"""

from __future__ import annotations

from typing import Any

from millstream import (
    Count,
    InputDescriptor,
    OutputDescriptor,
    StreamApplication,
    StreamApplicationDescriptor,
    TumblingWindow,
    WindowPane,
)

MINUTE_MS = 60_000


def as_record(pane: WindowPane) -> dict[str, Any]:
    return {"user": pane.key, "minute": pane.start, "clicks": pane.value}


class ClicksPerMinute(StreamApplication):
    def describe(self, app: StreamApplicationDescriptor) -> None:
        clicks = app.input(InputDescriptor("log.clicks", msg_serde="json", timestamp=lambda click: click["ts"]))
        (
            clicks.partition_by(lambda click: click["user"], name="by-user")
            .window(TumblingWindow(MINUTE_MS), key=lambda kv: kv.key, aggregate=Count(), name="per-minute")
            .map(as_record)
            .send_to(OutputDescriptor("log.clicks-per-minute", msg_serde="json"))
        )
