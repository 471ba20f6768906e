"""Setting a message aside in ``task.dead.letter.stream``: the one place both failure policies send it.

The record keeps the bytes as they were read and the headers it came with, plus ``millstream.error.*``
headers saying where it came from (stream, partition, offset) and why (each policy's own fields), so it
can be read back (``millstream streams consume --headers``) and replayed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from millstream.model import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream
from millstream.runtime.seams import ProducerLookup


def send_to_dead_letters(
    producers: ProducerLookup,
    stream: SystemStream,
    source: str,
    envelope: IncomingMessageEnvelope,
    raw: tuple[Any, Any],
    why: Mapping[str, str],
) -> None:
    """Send ``raw`` (key, message bytes) of ``envelope`` with its origin and ``why`` as error headers; it is
    flushed with ``source``'s output, before that task's next checkpoint."""
    ssp = envelope.ssp
    fields = {"stream": f"{ssp.system}.{ssp.stream}", "partition": str(ssp.partition), "offset": str(envelope.offset)}
    headers = dict(envelope.headers or {})
    headers.update({f"millstream.error.{name}": value.encode() for name, value in {**fields, **why}.items()})
    key, message = raw
    dead = OutgoingMessageEnvelope(stream, message, key, timestamp=envelope.timestamp, headers=headers)
    producers.producer(stream.system).send(source, dead)
