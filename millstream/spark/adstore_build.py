"""Old path of :mod:`millstream.spark.builds.adstore_build`, kept for one release for code that imports
from here."""

from millstream.spark.builds.adstore_build import FORMATS, DatasetSchemaError, build_version, resolve_target

__all__ = ["FORMATS", "DatasetSchemaError", "build_version", "resolve_target"]
