"""The embedded ``log`` system: a durable, partitioned, append-only log on local disk, no server.

``<root>/<stream>/stream.json`` describes a stream; ``<root>/<stream>/p<N>.db`` indexes partition N (a SQLite
file, see ``storage``) and ``p<N>-<first offset>.seg`` hold its records (see ``segments``). The root is
``systems.<s>.path``, default ``<job.data.dir>/log``.
"""

from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.consumer import LogSystemConsumer
from millstream.embedded.log.factory import LogSystemFactory
from millstream.embedded.log.producer import LogSystemProducer

__all__ = ["LogSystemAdmin", "LogSystemConsumer", "LogSystemFactory", "LogSystemProducer"]
