"""Old path of :mod:`millstream.spark.run.session`, kept for one release, with a
``DeprecationWarning``, for code that imports from here."""

import warnings

from millstream.spark.run.session import JavaNotFoundError, build_session, find_java, local_slots

warnings.warn(
    "millstream.spark.session moved to millstream.spark.run.session"
    " (an internal module; run jobs through millstream.Job)",
    DeprecationWarning,
    stacklevel=2,
)


__all__ = ["JavaNotFoundError", "build_session", "find_java", "local_slots"]
