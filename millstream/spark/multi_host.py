"""Old path of :mod:`millstream.spark.run.multi_host`, kept for one release, with a
``DeprecationWarning``, for code that imports from here."""

import warnings

from millstream.spark.run.multi_host import refuse_host_local_blobs, refuse_host_local_state

warnings.warn(
    "millstream.spark.multi_host moved to millstream.spark.run.multi_host"
    " (an internal module; run jobs through millstream.Job)",
    DeprecationWarning,
    stacklevel=2,
)


__all__ = ["refuse_host_local_blobs", "refuse_host_local_state"]
