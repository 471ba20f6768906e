"""Configuration: flat Samza-style keys, the typed views of the namespaces read across layers, and ``Settings``,
which parses each view once."""

from millstream.config.core import Config, load_config, parse_override
from millstream.config.settings import Settings
from millstream.config.views import JobConfig, TaskConfig

__all__ = ["Config", "JobConfig", "Settings", "TaskConfig", "load_config", "parse_override"]
