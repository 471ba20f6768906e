"""One log format for every runner: each line names the job, the container and the task it comes from.

A job's containers log from Spark's Python workers, from threads of the in-process runner and from the
driver; without these fields a line such as ``commit failed`` cannot be traced to the task at fault.
The runners set the job and container (:func:`container_log_context`), a task instance sets the task
around its callbacks (:func:`task_log_context`), and :class:`LogContextFilter` copies them onto every
record, so the same :data:`LOG_FORMAT` reads the same in-process and on Spark::

    2026-11-25 10:41:07,123 INFO [wordcount 0 Partition 3] millstream.runtime.container: ...

A field that does not apply is ``-`` (the driver has no container, a container's own phases no task).
The fields are kept per thread: containers of the in-process runner are threads of one process. A Spark
worker runs one container, so there the job and container are also the process-wide defaults
(:func:`configure_logging`): its helper threads (commit uploads, metrics) then carry them too.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

LOG_FORMAT = "%(asctime)s %(levelname)s [%(job)s %(container)s %(task)s] %(name)s: %(message)s"
"""The documented format of every millstream log line, driver and containers alike."""

UNSET = "-"

_FIELDS = ("job", "container", "task")


class _ThreadFields(threading.local):
    """The fields of the current thread; a task instance sets ``task`` once per batch, so this is a plain
    attribute write (a context variable's set and reset cost several times more)."""

    job: str | None = None
    container: str | None = None
    task: str | None = None


_current = _ThreadFields()
_process_wide: dict[str, str] = {}

P = ParamSpec("P")
R = TypeVar("R")


class LogContextFilter(logging.Filter):
    """Sets ``job``, ``container`` and ``task`` on every record it sees; never drops one.

    Attach it to a handler (as :func:`configure_logging` does) to use :data:`LOG_FORMAT` with a handler
    of your own. A record that already carries a field (``extra={"task": ...}``) keeps it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        for name in _FIELDS:
            if not hasattr(record, name):
                setattr(record, name, getattr(_current, name) or _process_wide.get(name, UNSET))
        return True


def configure_logging(level: int | str, *, job: str | None = None, container: str | None = None) -> None:
    """The root logger writes :data:`LOG_FORMAT` to stderr at ``level``; ``job`` and ``container`` become
    the process-wide defaults (a Spark worker runs one container; the driver has none)."""
    if job is not None:
        _process_wide["job"] = job
    if container is not None:
        _process_wide["container"] = container
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.addFilter(LogContextFilter())
    logging.basicConfig(level=level, handlers=[handler], force=True)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time: while ``millstream run`` draws its progress line,
    rich puts a proxy there that prints each log line above the line instead of through it."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


@contextmanager
def container_log_context(job: str, container: str) -> Iterator[None]:
    """Lines logged by this thread inside the block name ``job`` and ``container``."""
    previous = _current.job, _current.container
    _current.job, _current.container = job, container
    try:
        yield
    finally:
        _current.job, _current.container = previous


@contextmanager
def task_log_context(task: str) -> Iterator[None]:
    """Lines logged by this thread inside the block name ``task``."""
    previous, _current.task = _current.task, task
    try:
        yield
    finally:
        _current.task = previous


class _NamedTask(Protocol):
    task_name: Any


_Owner = TypeVar("_Owner", bound=_NamedTask)


def in_task_log_context(method: Callable[Concatenate[_Owner, P], R]) -> Callable[Concatenate[_Owner, P], R]:
    """A method of an object with a ``task_name`` logs with that task while it runs."""

    @wraps(method)
    def logged(self: _Owner, /, *args: P.args, **kwargs: P.kwargs) -> R:
        fields = _current
        previous, fields.task = fields.task, self.task_name
        try:
            return method(self, *args, **kwargs)
        finally:
            fields.task = previous

    return logged
