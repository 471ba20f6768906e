"""The process's open-file limit (``ulimit -n``) against what its containers' systems may hold open.

A system whose config bounds the descriptors it holds (``SystemFactory.file_budget``: the embedded log's pools of
open partitions) reserves that budget when a container first uses it, and releases it when the container closes.
A container's reservations, over all its systems, plus ``HEADROOM`` (sockets, the metadata store, RocksDB, the
interpreter's own files) must fit under the limit. Per container, not summed over a process's containers: the
budgets are the pools' bounds, which a container reaches only with that many partitions, so summing them made
several small containers in one process (the in-process runner's, a test's) fail although they hold a few files;
a process running several wide containers needs the room of all of them, which the log guide says.

* under the soft limit: nothing to do;
* under the hard limit only: the soft limit is raised to that sum (an unprivileged process may raise it up to the
  hard limit), and a line is logged;
* over the hard limit: the container fails at start with a ``ConfigError`` naming the limit, the sum and the keys
  that bound it, instead of failing later, part-way through a run, on "unable to open database file".

A container's stores reserve theirs the same way (``storage/open_files.py``), and where a store's table files have
no bound, ``raise_to_hard`` gives the process the hard limit, as a JVM gives itself at start.
"""

from __future__ import annotations

import contextlib
import logging
import resource
import threading
import weakref
from collections import deque

from millstream.contracts.systems import FileBudget
from millstream.errors import ConfigError

log = logging.getLogger(__name__)

HEADROOM = 256
"""Descriptors kept for everything but the systems' budgets."""

_lock = threading.Lock()
_reserved: dict[tuple[int, str], FileBudget] = {}
"""Budgets reserved, by (owner's id, system)."""
_collected: deque[int] = deque()
"""Ids of owners garbage-collected without ``release``, whose budgets the next ``reserve`` or ``release`` drops.
A finalizer only appends here, never takes ``_lock``: a collection can run finalizers on a thread that holds the
lock (any allocation inside ``reserve`` may start one), where taking it again would deadlock. An id is appended
before its object's memory is freed, so before a new owner can reuse it, and every drop runs under the lock ahead of
the reservation it makes: a collected owner's id never takes a new owner's budgets with it."""


def reserve(owner: object, system: str, budget: FileBudget | None) -> None:
    """Reserve ``budget`` for ``owner``'s use of ``system`` (no-op for None), raising the soft limit if need be;
    ``ConfigError`` (nothing reserved) when the hard limit is too low. Released by ``release``, or when ``owner``
    is garbage-collected without it (a container's services that nobody closed hold no descriptors then)."""
    if budget is None or budget.descriptors <= 0:
        return
    with _lock:
        _drop_collected()
        key = (id(owner), system)
        if not any(held[0] == key[0] for held in _reserved):
            with contextlib.suppress(TypeError):  # an owner without weak references is released by ``release`` only
                weakref.finalize(owner, _collected.append, key[0])
        _reserved[key] = budget
        owned = [each for held, each in _reserved.items() if held[0] == key[0]]
        needed = sum(each.descriptors for each in owned) + HEADROOM
        try:
            _ensure(needed, [name for each in owned for name in each.keys])
        except ConfigError:
            del _reserved[key]
            raise


def raise_to_hard(reason: str) -> None:
    """Raise the soft limit to the hard one, for descriptors no budget bounds (``reason`` says whose), logged when
    it moves: what a JVM does at start (HotSpot's ``MaxFDLimit``), so Samza's containers and a Spark executor's
    Python workers already run at the hard limit. Left as it is when the hard limit is unlimited (no soft limit can
    be set to that) or the system refuses (logged): the budgets reserved still hold."""
    with _lock:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft >= hard:
            return
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as error:
            log.warning(
                "could not raise the open-file limit (ulimit -n) from %d to %d for %s: %s", soft, hard, reason, error
            )
            return
    log.info("raised the open-file limit (ulimit -n) from %d to its hard limit %d for %s", soft, hard, reason)


def release(owner: object) -> None:
    """Release every budget ``owner`` reserved (the soft limit stays where it was raised to)."""
    with _lock:
        _drop_collected()
        _drop(id(owner))


def _drop_collected() -> None:
    """Drop the budgets of the owners collected since the last call (under ``_lock``)."""
    while _collected:
        _drop(_collected.popleft())


def _drop(owner_id: int) -> None:
    for key in [key for key in _reserved if key[0] == owner_id]:
        del _reserved[key]


def _ensure(needed: int, keys: list[str]) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or needed <= soft:
        return
    if hard != resource.RLIM_INFINITY and needed > hard:
        raise ConfigError(
            f"the open-file limit (ulimit -n) is {soft}, at most {hard}, but a container may hold "
            f"{needed} files open ({HEADROOM} of them for other uses): raise the limit (ulimit -n {needed}) or lower "
            f"{', '.join(keys)} (each open partition or store holds a few descriptors; a container of fewer tasks, "
            "with a higher job.container.count, holds fewer)"
        )
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    except (ValueError, OSError) as error:  # e.g. above a system-wide cap the hard limit does not show
        raise ConfigError(
            f"cannot raise the open-file limit (ulimit -n) from {soft} to the {needed} files a container may hold "
            f"open ({error}): raise it before starting, or lower {', '.join(keys)}"
        ) from None
    log.info("raised the open-file limit (ulimit -n) from %d to %d for %s", soft, needed, ", ".join(keys))
