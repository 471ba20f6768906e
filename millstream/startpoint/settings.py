"""``startpoint.``: the schema of the startpoint keys, beside the startpoint mechanism that reads them.

Read through the job's settings (``settings.view(...)``, ``millstream.config.settings``), which parse it once."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from millstream.config.views import ConfigView


class StartpointConfig(ConfigView):
    PREFIX: ClassVar[str] = "startpoint."

    max_age_ms: int = Field(12 * 60 * 60 * 1000, alias="max.age.ms", ge=1)
    """A startpoint older than this is ignored (and listed as stale), not deleted."""
