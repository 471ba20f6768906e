"""The remote table the tests and the benchmark read: the loopback ``EnrichService`` through aiohttp.

``enrich_table(url, ...)`` defines table ``enrich``: ``read(v)`` is ``GET /enrich?v=``, ``read_all`` (when
``batched``) ``GET /enrich_batch?v=a,b,...``; a 404 is a missing record. A 429 or 503 raises
``RetriableError``, a 500 ``ServiceError`` (not retriable); the aiohttp session is opened on the container's
loop before the first call. ``from_config`` builds it from ``test.service.url`` (and ``test.batched``), for
``tables.enrich.definition``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp

from millstream import RemoteTable, RetriableError
from millstream.config.settings import Settings


class ServiceError(Exception):
    """The service answered 500: not retried."""


class EnrichClient:
    closed = 0
    """Clients closed in this process (a container closes its tables when it stops)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        self.session = aiohttp.ClientSession()

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
        EnrichClient.closed += 1

    async def _get(self, path: str, values: str) -> Any:
        assert self.session is not None
        async with self.session.get(f"{self.url}{path}", params={"v": values}) as response:
            if response.status == 404:
                return None
            if response.status in (429, 503):
                raise RetriableError(f"GET {path}?v={values} answered {response.status}")
            if response.status != 200:
                raise ServiceError(f"GET {path}?v={values} answered {response.status}")
            return await response.json()

    async def read(self, key: int) -> dict[str, Any] | None:
        result: dict[str, Any] | None = await self._get("/enrich", str(key))
        return result

    async def read_all(self, keys: list[int]) -> Mapping[int, Any]:
        found = await self._get("/enrich_batch", ",".join(map(str, keys)))
        return {int(key): value for key, value in found.items()}


def enrich_table(url: str, *, batched: bool = False, **settings: Any) -> RemoteTable:
    client = EnrichClient(url)
    return RemoteTable(
        "enrich",
        client.read,
        read_all=client.read_all if batched else None,
        open=client.open,
        close=client.close,
        **settings,
    )


def from_config(config: Settings) -> RemoteTable:
    return enrich_table(str(config.get("test.service.url")), batched=config.get("test.batched", "false") == "true")
