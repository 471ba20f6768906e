"""The ``Job`` façade: the one object a user (and the ``millstream`` command) builds to act on a job.

``Job`` prepares the config once and offers everything done to a job: running it (in this process or on
Spark), planning it, its status, stopping, draining and resetting it, and its streams, startpoints,
checkpoints and adjunct-store versions. It sits above the runners and below the CLI, which is built on it.
"""

from millstream.job.facade import Job, StopRefusedError, StopRequest

__all__ = ["Job", "StopRefusedError", "StopRequest"]
