"""The process's open-file limit (``ulimit -n``) against what its containers' systems may hold open.

A system whose config bounds the descriptors it holds (``SystemFactory.file_budget``: the embedded log's pools of
open partitions) reserves that budget when a container first uses it, and releases it when the container closes.
Reservations are process-wide, because every container of a process (the in-process runner's, a Spark executor's)
shares one limit. The sum of every reservation plus ``HEADROOM`` (sockets, the metadata store, RocksDB, the
interpreter's own files) must fit under the limit:

* under the soft limit: nothing to do;
* under the hard limit only: the soft limit is raised to that sum (an unprivileged process may raise it up to the
  hard limit), and a line is logged;
* over the hard limit: the container fails at start with a ``ConfigError`` naming the limit, the sum and the keys
  that bound it, instead of failing later, part-way through a run, on "unable to open database file".
"""

from __future__ import annotations

import logging
import resource
import threading

from millstream.errors import ConfigError
from millstream.systems.base import FileBudget

log = logging.getLogger(__name__)

HEADROOM = 256
"""Descriptors kept for everything but the systems' budgets."""

_lock = threading.Lock()
_reserved: dict[tuple[int, str], FileBudget] = {}
"""Budgets reserved, by (owner's id, system)."""


def reserve(owner: object, system: str, budget: FileBudget | None) -> None:
    """Reserve ``budget`` for ``owner``'s use of ``system`` (no-op for None), raising the soft limit if need be;
    ``ConfigError`` (nothing reserved) when the hard limit is too low."""
    if budget is None or budget.descriptors <= 0:
        return
    with _lock:
        key = (id(owner), system)
        _reserved[key] = budget
        needed = sum(each.descriptors for each in _reserved.values()) + HEADROOM
        try:
            _ensure(needed, budget)
        except ConfigError:
            del _reserved[key]
            raise


def release(owner: object) -> None:
    """Release every budget ``owner`` reserved (the soft limit stays where it was raised to)."""
    with _lock:
        for key in [key for key in _reserved if key[0] == id(owner)]:
            del _reserved[key]


def _ensure(needed: int, budget: FileBudget) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or needed <= soft:
        return
    if hard != resource.RLIM_INFINITY and needed > hard:
        raise ConfigError(
            f"the open-file limit (ulimit -n) is {soft}, at most {hard}, but this process's containers may hold "
            f"{needed} files open ({HEADROOM} of them for other uses): raise the limit (ulimit -n {needed}) or lower "
            f"{', '.join(budget.keys)} (each open partition holds a few descriptors)"
        )
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    except (ValueError, OSError) as error:  # e.g. above a system-wide cap the hard limit does not show
        raise ConfigError(
            f"cannot raise the open-file limit (ulimit -n) from {soft} to the {needed} files this process's "
            f"containers may hold open ({error}): raise it before starting, or lower {', '.join(budget.keys)}"
        ) from None
    log.info("raised the open-file limit (ulimit -n) from %d to %d for %s", soft, needed, ", ".join(budget.keys))
