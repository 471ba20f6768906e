"""Configuration: flat Samza-style keys and the typed views over them."""

from millstream.config.core import Config, load_config, parse_override
from millstream.config.views import JobConfig, MetadataConfig, TaskConfig

__all__ = ["Config", "JobConfig", "MetadataConfig", "TaskConfig", "load_config", "parse_override"]
