"""The job's metadata store: namespaced key-value records every container and the driver share.

It holds the job model, container epochs, checkpoints (with the default checkpoint manager),
startpoints and control signals. Implementations must be safe for concurrent use by several
processes, and ``compare_and_put`` must be atomic: it is how a zombie container is fenced.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Self

from millstream.errors import MillstreamError


class FencedError(MillstreamError):
    """A write was refused because a newer generation or container attempt owns the record."""


class MetadataStore(ABC):
    def __enter__(self) -> Self:
        """Leaving closes the store's connection."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @abstractmethod
    def init(self) -> None:
        """Create what the store needs; idempotent."""

    @abstractmethod
    def get(self, namespace: str, key: str) -> bytes | None: ...

    @abstractmethod
    def put(self, namespace: str, key: str, value: bytes) -> None: ...

    def put_all(self, namespace: str, items: Mapping[str, bytes]) -> None:
        for key, value in items.items():
            self.put(namespace, key, value)

    @abstractmethod
    def delete(self, namespace: str, key: str) -> None: ...

    def delete_all(self, namespace: str, keys: Iterable[str]) -> None:
        for key in keys:
            self.delete(namespace, key)

    @abstractmethod
    def all(self, namespace: str) -> dict[str, bytes]: ...

    @abstractmethod
    def compare_and_put(
        self,
        namespace: str,
        key: str,
        value: bytes,
        expected: Mapping[tuple[str, str], bytes | None],
    ) -> bool:
        """Write ``value`` only if every ``(namespace, key)`` in ``expected`` currently holds the given
        value (None: absent). Atomic with respect to every other writer; False when refused."""

    def compare_and_put_all(
        self,
        items: Sequence[tuple[str, str, bytes]],
        expected: Mapping[tuple[str, str], bytes | None],
    ) -> bool:
        """Write every ``(namespace, key, value)`` of ``items``, in order, only if ``expected`` holds (as
        ``compare_and_put``); False when refused. A store that can should do it in one atomic write, all or none
        (the SQLite store does: one transaction for a commit round's checkpoints). This default makes one
        ``compare_and_put`` per item and stops at the first refused: each write is fenced, the items before a
        refusal stay written."""
        return all(self.compare_and_put(namespace, key, value, expected) for namespace, key, value in items)

    def set_writer(self, writer: str) -> None:  # noqa: B027 - only stores with a write lock name its holder
        """Say which part of the job writes through this store object (``container 0 attempt 2``, ``the
        driver``), so a writer kept waiting for a lock this one holds can name it. No-op by default."""

    def take_over(self) -> None:  # noqa: B027 - only stores with a breakable write lock need it
        """This store object writes for the job's newest driver (a run that supersedes earlier ones): it may
        break a write lock whose holder's lease expired, where the store has such a lock. No-op by default."""

    def flush(self) -> None:  # noqa: B027 - writes are durable on return by default
        """Make every write so far durable."""

    @abstractmethod
    def close(self) -> None: ...

    def namespace(self, namespace: str) -> NamespacedMetadataStore:
        return NamespacedMetadataStore(self, namespace)


class NamespacedMetadataStore:
    """A view of one namespace, for components that own one (startpoints, job model...)."""

    def __init__(self, store: MetadataStore, namespace: str) -> None:
        self.store = store
        self.namespace_name = namespace

    def get(self, key: str) -> bytes | None:
        return self.store.get(self.namespace_name, key)

    def put(self, key: str, value: bytes) -> None:
        self.store.put(self.namespace_name, key, value)

    def put_all(self, items: Mapping[str, bytes]) -> None:
        self.store.put_all(self.namespace_name, items)

    def delete(self, key: str) -> None:
        self.store.delete(self.namespace_name, key)

    def delete_all(self, keys: Iterable[str]) -> None:
        self.store.delete_all(self.namespace_name, keys)

    def all(self) -> dict[str, bytes]:
        return self.store.all(self.namespace_name)

    def flush(self) -> None:
        self.store.flush()
