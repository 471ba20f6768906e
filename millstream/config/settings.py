"""A job's settings: its flat config and the typed views of it, each parsed once.

``prepare`` (the driver) and a container's services (an executor, from the config shipped to it) build one
``Settings`` and pass it down; a component reads the namespaces it needs from it (``settings.task.commit_ms``,
``settings.view(StoreConfig, "counts")``) instead of parsing the raw config again. It is a ``Config``: the same
immutable flat map, which stays the wire format to executors and holds users' own keys and the systems' open
namespaces that their factories read.

A namespace's schema is a ``ConfigView``. The schemas of ``job.``, ``task.``, ``app.``, ``stores.`` and
``systems.`` live in ``millstream.config.views``: layers at every height read them. A namespace only one feature
reads has its schema beside that feature (``startpoint.`` in ``millstream.startpoint.settings``, ``metrics.`` beside
the metrics contract in ``millstream.contracts.metrics_settings``, ...); ``view`` reads either kind, so this module
needs to know none of them.

Each view is parsed the first time it is asked for and kept for the life of the ``Settings``: the object is
immutable, so a view can never go stale. Two threads asking at once may both parse; they get equal views.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from millstream.config.core import Config
from millstream.config.views import (
    AppConfig,
    ConfigView,
    JobConfig,
    OffsetDefault,
    StoreConfig,
    StoresConfig,
    StreamSamzaConfig,
    SystemSamzaConfig,
    TaskConfig,
    TrimmedOffsetPolicy,
    adjunct_store_names,
)
from millstream.model import SystemStream

View = TypeVar("View", bound=ConfigView)


class Settings(Config):
    """A job's config with its typed views, each parsed at most once (see the module's docstring)."""

    __slots__ = ("_views",)

    def __init__(self, values: Mapping[str, Any] | None = None, source: str | None = None) -> None:
        super().__init__(values, source)
        self._views: dict[tuple[type[ConfigView], object], ConfigView] = {}

    @classmethod
    def of(cls, config: Config) -> Settings:
        """``config`` as settings: itself if it is already, else a new ``Settings`` over the same keys."""
        return config if isinstance(config, Settings) else cls(config, config.source)

    def view(self, schema: type[View], name: object = None) -> View:
        """The namespace ``schema`` reads (of the store, table, system, serde or stream ``name`` for a schema of
        named sections), parsed on first use; a ``ConfigError`` names the key at fault."""
        key = (schema, name)
        found = self._views.get(key)
        if found is None:
            found = self._views[key] = schema.read(self, name)
        return found  # type: ignore[return-value]  # stored under its own schema

    @property
    def job(self) -> JobConfig:
        return self.view(JobConfig)

    @property
    def task(self) -> TaskConfig:
        return self.view(TaskConfig)

    @property
    def app(self) -> AppConfig:
        return self.view(AppConfig)

    @property
    def stores(self) -> StoresConfig:
        return self.view(StoresConfig)

    def offset_default(self, stream: SystemStream) -> OffsetDefault:
        """Stream-level ``offset.default``, else system-level, else ``upcoming`` (as in Samza)."""
        own = self.view(StreamSamzaConfig, stream).offset_default
        return own or self.view(SystemSamzaConfig, stream.system).offset_default

    def trimmed_offset_policy(self, stream: SystemStream) -> TrimmedOffsetPolicy:
        """Stream-level ``trimmed.offset.policy``, else system-level (default ``fail``)."""
        own = self.view(StreamSamzaConfig, stream).trimmed_offset_policy
        return own or self.view(SystemSamzaConfig, stream.system).trimmed_offset_policy

    def adjunct_streams(self) -> list[SystemStream]:
        """The streams adjunct stores read: stored, never given to ``process``."""
        return sorted({self.view(StoreConfig, name).adjunct_input(name) for name in adjunct_store_names(self)})

    def with_overrides(self, overrides: Mapping[str, Any]) -> Settings:
        return Settings(super().with_overrides(overrides), self.source)

    def without(self, *keys: str) -> Settings:
        return Settings(super().without(*keys), self.source)
