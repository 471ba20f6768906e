"""Old path of :mod:`millstream.spark.builds.adstore_build`, kept for one release, with a
``DeprecationWarning``, for code that imports from here."""

import warnings

from millstream.spark.builds.adstore_build import FORMATS, DatasetSchemaError, build_version, resolve_target

warnings.warn(
    "millstream.spark.adstore_build moved to millstream.spark.builds.adstore_build"
    " (an internal module; run jobs through millstream.Job)",
    DeprecationWarning,
    stacklevel=2,
)


__all__ = ["FORMATS", "DatasetSchemaError", "build_version", "resolve_target"]
