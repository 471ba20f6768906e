"""The stream-stream join: both sides buffered per key, matched within an interval of event time.

State entries are ``(side, key) -> [[timestamp, message, matched], ...]`` in arrival order, side 0 the
stream ``join`` was called on and 1 the other. A message is matched against the other side's buffer of its
key (every buffered message at most ``within_ms`` away in event time), then buffered itself. Buffers are
purged once the watermark passes ``timestamp + within_ms + allowed_lateness_ms``: a message that could
still match would be later than the allowed lateness, and those are dropped. So for every message not
dropped the output is exactly the join of the two streams, whatever the order of arrival.

A left join emits ``joiner(message, None)`` for a left message that never matched when its buffer entry
is purged, with the event time of its expiry (never behind a downstream watermark).

The purge index (time -> the entries to look at) lives in memory and is rebuilt from the entries at
restore, as the window operators' timers are.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Hashable
from typing import Any

from millstream.api.application import KV
from millstream.api.specs import StreamJoinSpec
from millstream.control.errors import ControlStateError
from millstream.operators.graph import GraphContext, OperatorImpl, operator_failed
from millstream.operators.state import KeyValueState
from millstream.operators.stateful import StatefulOperatorImpl

log = logging.getLogger(__name__)

LEFT, RIGHT = 0, 1


class StreamJoinImpl(StatefulOperatorImpl):
    def __init__(self, spec: StreamJoinSpec, context: GraphContext, state: KeyValueState) -> None:
        super().__init__(spec, context, state)
        self.join = spec
        self.key_fns = (spec.key_fn, spec.other_key_fn)
        self.within = spec.within_ms
        self.lateness = spec.allowed_lateness_ms
        self.left_outer = spec.how == "left"
        self._expiries: dict[int, dict[tuple[int, Hashable], None]] = {}
        self._times: list[int] = []
        self.late_dropped = 0
        self.matches = 0

    def side(self, index: int) -> JoinSide:
        """What an upstream operator feeding ``index`` (``LEFT`` or ``RIGHT``) sends its messages to."""
        return JoinSide(self, index)

    def process(self, message: Any, timestamp: int) -> None:
        raise AssertionError(f"stream join '{self.op_id}' receives messages through its sides")

    def process_side(self, side: int, message: Any, timestamp: int) -> None:
        watermark = self.input_watermark
        if timestamp + self.lateness < watermark:
            self._drop(side, timestamp, watermark)
            return
        try:
            key = self._key(side, message)
        except Exception as error:
            raise operator_failed(self.op_id, error) from error
        other_key = (1 - side, key)
        others = self.state.get(other_key)
        matched = marked = False
        if others:
            for entry in others:
                if abs(entry[0] - timestamp) <= self.within:
                    pair = (message, entry[1]) if side == LEFT else (entry[1], message)
                    self._emit_match(pair, max(timestamp, entry[0]))
                    matched = True
                    if side == RIGHT and not entry[2]:
                        entry[2] = marked = True
            if side == RIGHT and marked:
                self.state.put(other_key, others)
        own_key = (side, key)
        own = self.state.get(own_key) or []
        own.append([timestamp, message, matched])
        self.state.put(own_key, own)
        self._schedule(timestamp + self.within + self.lateness, own_key)

    def _key(self, side: int, message: Any) -> Hashable:
        key_fn = self.key_fns[side]
        if key_fn is not None:
            key: Hashable = key_fn(message)
            return key
        if isinstance(message, KV):
            return message.key
        which = "key" if side == LEFT else "other_key"
        raise TypeError(f"message {message!r} is not a KV: give the join a {which}= function")

    def _emit_match(self, pair: tuple[Any, Any], timestamp: int) -> None:
        try:
            result = self.join.joiner(*pair)
        except Exception as error:
            raise operator_failed(self.op_id, error) from error
        self.matches += 1
        self.emit(result, timestamp)

    def _drop(self, side: int, timestamp: int, watermark: int) -> None:
        self.late_dropped += 1
        if self.late_dropped == 1 or self.late_dropped % 1000 == 0:
            log.warning(
                "stream join '%s': dropped a message of its %s side at %d, older than the watermark %d "
                "minus the allowed lateness %d ms (%d dropped so far)",
                self.op_id, "left" if side == LEFT else "right", timestamp, watermark, self.lateness,
                self.late_dropped,
            )  # fmt: skip

    def handle_watermark(self, watermark: int) -> None:
        while self._times and self._times[0] < watermark:
            time = heapq.heappop(self._times)
            for state_key in self._expiries.pop(time, {}):
                self._purge(state_key, watermark)
        super().handle_watermark(watermark)

    def _purge(self, state_key: tuple[int, Hashable], watermark: int) -> None:
        entries = self.state.get(state_key)
        if not entries:
            return
        kept = []
        for entry in entries:
            expiry = entry[0] + self.within + self.lateness
            if expiry >= watermark:
                kept.append(entry)
            elif self.left_outer and state_key[0] == LEFT and not entry[2]:
                self._emit_match((entry[1], None), max(expiry, self.last_finite_watermark, 0))
        if kept:
            self.state.put(state_key, kept)
        else:
            self.state.delete(state_key)

    def _schedule(self, time: int, state_key: tuple[int, Hashable]) -> None:
        keys = self._expiries.get(time)
        if keys is None:
            keys = self._expiries[time] = {}
            heapq.heappush(self._times, time)
        keys[state_key] = None

    def rebuild(self) -> None:
        """The purge index, from the buffers."""
        self._expiries.clear()
        self._times.clear()
        for state_key, entries in self.state.items():
            if not (isinstance(state_key, tuple) and len(state_key) == 2 and isinstance(entries, list)):
                raise ControlStateError(f"stream join '{self.op_id}': unexpected state key {state_key!r}")
            for entry in entries:
                self._schedule(entry[0] + self.within + self.lateness, state_key)


class JoinSide(OperatorImpl):
    """One input of a stream join as its upstream operator sees it: messages are tagged with the side;
    watermarks and end-of-stream go to the join, which takes the minimum over both sides."""

    def __init__(self, join: StreamJoinImpl, side: int) -> None:
        super().__init__(join.spec, join.context)
        self.join = join
        self.index = side

    def process(self, message: Any, timestamp: int) -> None:
        self.join.process_side(self.index, message, timestamp)

    def upstream_advanced(self) -> None:
        self.join.upstream_advanced()

    def upstream_ended(self) -> None:
        self.join.upstream_ended()
