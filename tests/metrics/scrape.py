"""Reading the driver's endpoint the way Prometheus and a browser do."""

from __future__ import annotations

import urllib.request
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def fetch(port: int, path: str) -> tuple[int, str, bytes]:
    """Status, content type and body; a server not listening yet answers 503, so a probe can poll it."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read()
    except urllib.error.URLError as error:
        if isinstance(error.reason, ConnectionRefusedError):
            return 503, "", b"not listening yet"
        raise


def parse(text: str) -> Series:
    """Every sample of a Prometheus text exposition: (name, labels) → value."""
    series: Series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return series


def scrape(port: int) -> Series:
    """The samples served; none while the server is not listening yet."""
    status, _, body = fetch(port, "/metrics")
    if status == 503:
        return {}
    assert status == 200, body
    return parse(body.decode())


def status_json(port: int) -> dict[str, Any]:
    """The status document; an empty one while the server is not listening yet."""
    status, content_type, body = fetch(port, "/status.json")
    if status == 503:
        return {"partitions": []}
    assert status == 200 and content_type == "application/json", body
    return orjson.loads(body)


def total(series: Series, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(value for (sample, have), value in series.items() if sample == name and wanted <= have)


def present(series: Series, name: str) -> bool:
    return any(sample == name for sample, _ in series)
