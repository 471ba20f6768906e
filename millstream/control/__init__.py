"""In-band control messages: watermarks, end-of-stream and drain carried through intermediate streams.

A job cut into stages at ``partition_by`` writes user messages *and* control messages into the same
intermediate partitions, so a control message is ordered after every user message its producer sent
to that partition before it. Consumers reconcile the control messages of all producing tasks
(``reconciliation``) into one end-of-stream and one watermark per partition. ``protocol`` is one task's
state machine over all of it — what to send where, forward, defer and re-send after a restart — which the
operator engine drives; ``replay`` decides which replayed envelopes a restored task skips. The package is
pure bookkeeping: it knows nothing of operators, collectors or systems, so every rule can be tested alone.
"""

from millstream.control.errors import ControlStateError, FramingError, UnknownMessageTypeError
from millstream.control.framing import MessageType, frame_control_message, frame_user_message, unframe
from millstream.control.messages import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    ControlMessage,
    DrainMessage,
    EndOfStreamMessage,
    WatermarkMessage,
)
from millstream.control.protocol import (
    ConsumedStream,
    ControlEvents,
    ControlProtocol,
    ControlSend,
    ProducedStream,
    ProtocolSettings,
    SourceInput,
)
from millstream.control.reconciliation import ControlReconciler, Reconciled
from millstream.control.replay import ReplayFilter

__all__ = [
    "MAX_WATERMARK",
    "MIN_WATERMARK",
    "ConsumedStream",
    "ControlEvents",
    "ControlMessage",
    "ControlProtocol",
    "ControlReconciler",
    "ControlSend",
    "ControlStateError",
    "DrainMessage",
    "EndOfStreamMessage",
    "FramingError",
    "MessageType",
    "ProducedStream",
    "ProtocolSettings",
    "Reconciled",
    "ReplayFilter",
    "SourceInput",
    "UnknownMessageTypeError",
    "WatermarkMessage",
    "frame_control_message",
    "frame_user_message",
    "unframe",
]
