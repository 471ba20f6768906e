"""Instants as operators type them: epoch milliseconds or ISO 8601, for startpoints and system settings."""

from __future__ import annotations

from datetime import UTC, datetime


def parse_epoch_ms(text: str) -> int:
    """Epoch milliseconds from ``1700000000000`` or an ISO 8601 instant (``2024-05-01T12:00:00Z``;
    without an offset it is taken as UTC). Raises ValueError for anything else."""
    raw = text.strip()
    if raw.lstrip("-").isdigit():
        return int(raw)
    try:
        instant = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"'{text}' is not epoch milliseconds or an ISO 8601 instant") from None
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    return int(instant.timestamp() * 1000)
