"""What happens when user code raises: ``task.process.errors`` (Kafka Streams' processing-exception handler).

``fail`` (the default) fails the container with an error naming the task, stream, partition and offset,
with the user's traceback. ``skip`` counts the message and goes on; ``dead-letter`` also sends the
message's original bytes to ``task.dead.letter.stream`` with ``millstream.error.*`` headers saying where it
came from and what was raised, so it can be inspected (``millstream streams consume --headers``) and
replayed. Output the task sent before it raised stays sent: a skipped message may have partial output.

The same policy covers ``window()``: a failed window call is skipped (counted, logged) or fails the
container. ``init()`` always fails: a task that could not initialise has nothing to go on with.

Both errors carry their :meth:`~TaskProcessError.failure` (where and what was raised), so a container attempt
that fails with one can record it and a retry failing the same way is recognised as deterministic
(``job.container.failure.repeat.limit``).
"""

from __future__ import annotations

import hashlib
import logging
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from millstream.config.views import ProcessErrorMode
from millstream.errors import MessageError, MillstreamError
from millstream.model import IncomingMessageEnvelope, SystemStream, TaskName
from millstream.runtime.dead_letters import send_to_dead_letters
from millstream.runtime.seams import ProducerLookup
from millstream.serde.base import SerdeError

log = logging.getLogger(__name__)

WARN_INTERVAL_S = 10.0


class TaskProcessError(MillstreamError):
    """User code raised while processing a message: where, what, and the user's traceback."""

    def __init__(
        self,
        task_name: TaskName,
        envelope: IncomingMessageEnvelope,
        error: BaseException,
        last: IncomingMessageEnvelope | None = None,
    ) -> None:
        """``last``: the batch task's batch that failed ran from ``envelope`` to ``last``."""
        ssp = envelope.ssp
        self.task_name = task_name
        self.ssp = ssp
        self.offset = envelope.offset
        self.error_type = type(error).__name__
        self.digest = _digest(error)
        where = f"offset {envelope.offset}"
        if last is not None:
            where = f"the batch of offsets {envelope.offset}..{last.offset}"
        super().__init__(
            f"task '{task_name}' failed processing {where} of stream '{ssp.system}.{ssp.stream}' "
            f"partition {ssp.partition}: {type(error).__name__}: {error} (task.process.errors=fail; 'skip' or "
            f"'dead-letter' go on past such messages)\n{_traceback(error)}"
        )

    def failure(self) -> dict[str, Any]:
        """Where and what failed, without the message text: two attempts failing alike have equal ones."""
        return {
            "task": str(self.task_name),
            "stream": f"{self.ssp.system}.{self.ssp.stream}",
            "partition": self.ssp.partition,
            "offset": self.offset,
            "type": self.error_type,
            "digest": self.digest,
        }


class TaskCallbackError(MillstreamError):
    """User code raised in ``init()`` or ``window()``."""

    def __init__(self, task_name: TaskName, callback: str, error: BaseException) -> None:
        self.task_name = task_name
        self.callback = callback
        self.error_type = type(error).__name__
        self.digest = _digest(error)
        super().__init__(f"task '{task_name}': {callback} raised {type(error).__name__}: {error}\n{_traceback(error)}")

    def failure(self) -> dict[str, Any]:
        """Where and what failed: a callback has no message, so no stream, partition or offset."""
        return {
            "task": str(self.task_name),
            "callback": self.callback,
            "type": self.error_type,
            "digest": self.digest,
        }


UserCodeError = TaskProcessError | TaskCallbackError
"""The failures of user code, the only ones that can be deterministic: millstream's own (a fenced write, a
broker gone) depend on the world, and a retry may well succeed."""


@dataclass
class ProcessErrorPolicy:
    mode: ProcessErrorMode = "fail"
    stream: SystemStream | None = None
    producers: ProducerLookup | None = None
    skipped: int = 0
    """Messages skipped or dead-lettered, and window calls skipped: what the policy let processing go past."""
    _last_warning: float = float("-inf")

    @property
    def keeps_raw_bytes(self) -> bool:
        """Dead-lettering sends the original bytes, so decoding must keep them beside the objects."""
        return self.mode == "dead-letter"

    def on_process_error(self, task_name: TaskName, envelope: IncomingMessageEnvelope, error: Exception) -> None:
        """Raise for ``fail``; otherwise count (and dead-letter) the message so processing goes on.

        Only the message's own failures are the policy's: the user's exceptions and output that cannot be
        serialized. millstream's other errors (a producer that failed, a fenced write) fail the container
        whatever the policy, as they are: skipping messages would not cure them."""
        if isinstance(error, MillstreamError) and not isinstance(error, SerdeError | MessageError):
            raise error
        if self.mode == "fail":
            raise TaskProcessError(task_name, envelope, error) from error
        self.skipped += 1
        self._warn(
            "%s: skipped offset %s of %s after %s: %s (%d skipped so far)",
            task_name, envelope.offset, envelope.ssp, type(error).__name__, error, self.skipped,
        )  # fmt: skip
        if self.mode == "dead-letter":
            self._dead_letter(task_name, envelope, error)

    def on_batch_error(
        self, task_name: TaskName, envelopes: Sequence[IncomingMessageEnvelope], error: Exception
    ) -> None:
        """A ``BatchStreamTask``'s batch is its unit of failure: ``fail`` names the batch's partition and
        offsets; ``skip`` and ``dead-letter`` go past (and dead-letter) every message of it."""
        if isinstance(error, MillstreamError) and not isinstance(error, SerdeError | MessageError):
            raise error
        if self.mode == "fail":
            raise TaskProcessError(task_name, envelopes[0], error, last=envelopes[-1]) from error
        for envelope in envelopes:
            self.on_process_error(task_name, envelope, error)

    def on_window_error(self, task_name: TaskName, error: Exception) -> None:
        if isinstance(error, MillstreamError) and not isinstance(error, SerdeError | MessageError):
            raise error
        if self.mode == "fail":
            raise TaskCallbackError(task_name, "window()", error) from error
        self.skipped += 1
        self._warn("%s: window() raised %s: %s (skipped)", task_name, type(error).__name__, error)

    def _dead_letter(self, task_name: TaskName, envelope: IncomingMessageEnvelope, error: Exception) -> None:
        if self.stream is None or self.producers is None:
            return
        raw = envelope.raw if envelope.raw is not None else (envelope.key, envelope.message)
        why = {
            "task": str(task_name),
            "type": type(error).__name__,
            "message": str(error),
            "traceback.digest": _digest(error),
        }
        send_to_dead_letters(self.producers, self.stream, str(task_name), envelope, raw, why)

    def _warn(self, message: str, *args: object) -> None:
        """At most one warning per interval: a policy that skips a flood must not flood the log too."""
        now = time.monotonic()
        if now - self._last_warning >= WARN_INTERVAL_S:
            self._last_warning = now
            log.warning(message, *args)


def _traceback(error: BaseException) -> str:
    return "".join(traceback.format_exception(type(error), error, error.__traceback__)).rstrip()


def _digest(error: BaseException) -> str:
    """The same failure in the same code has the same digest, whatever the message said."""
    frames = traceback.extract_tb(error.__traceback__)
    shape = type(error).__name__ + "".join(f"|{f.filename}:{f.name}:{f.lineno}" for f in frames)
    return hashlib.sha256(shape.encode()).hexdigest()[:16]
