"""Enrich a click stream from two adjunct data stores: one fed by CDC, one bulk-built in versions.

    cd examples/enrichment
    python run.py        # the scenario below on Spark local mode; exits 1 if an enriched click is wrong

The same by hand:

    millstream streams create job.yaml log.profile-changes --partitions 2   # and clicks, catalog, enriched-clicks
    millstream streams produce job.yaml log.profile-changes --file changes.jsonl --format json --key-field user
    millstream adstore build job.yaml --store catalog --from catalog-v1.json --format json   # version 1
    millstream run job.yaml                  # bootstraps the profiles, installs catalog version 1, waits for clicks
    millstream adstore build job.yaml --store catalog --from catalog-v2.json --format json   # the job switches
    millstream job status job.yaml           # the version each container serves, under "adjunct stores"

The profile changes insert four users, update one and delete one. Clicks before the second build are
priced from version 1, clicks after it from version 2, and product p3 exists only in version 2.
It starts from an empty data directory every time (``--data-dir``, default ``.millstream`` here).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from millstream import Job, JobResult, SystemStream

HERE = Path(__file__).parent
CLICKS, CHANGES, OUTPUT = (SystemStream("log", s) for s in ("clicks", "profile-changes", "enriched-clicks"))
CHANGE_LOG = [
    ("c", "user-0", "gold"),
    ("c", "user-1", "silver"),
    ("c", "user-2", "silver"),
    ("c", "user-3", "bronze"),
    ("u", "user-1", "gold"),
    ("d", "user-3", None),
]
TIERS = {"user-0": "gold", "user-1": "gold", "user-2": "silver", "user-3": "unknown"}  # after the changes
CATALOG = {
    "v1": {"p1": ("Kettle", 30), "p2": ("Teapot", 25)},
    "v2": {"p1": ("Kettle", 27), "p2": ("Teapot", 25), "p3": ("Mug", 8)},
}


def create_streams(job: Job) -> None:
    for stream in ("clicks", "profile-changes", "catalog", "enriched-clicks"):
        job.streams.create(SystemStream("log", stream), 2)
    changes = [(user, {"op": op, "after": {"name": user, "tier": tier}}) for op, user, tier in CHANGE_LOG]
    job.streams.write(CHANGES, changes)


def build_catalog(spark: Any, job: Job, data_dir: Path, label: str) -> str:
    """Write the catalog as a JSON-lines dataset and bulk-build a version of the store from it."""
    dataset = data_dir / f"catalog-{label}.json"
    rows = [{"key": product, "title": title, "price": price} for product, (title, price) in CATALOG[label].items()]
    dataset.write_bytes(b"\n".join(orjson.dumps(row) for row in rows) + b"\n")
    version = job.adstores.build(spark, "catalog", str(dataset), "json")
    print(f"built catalog {label} as version {version.version} ({version.records} products)")
    return version.version


def write_clicks(job: Job, batch: str) -> None:
    clicks = [(u, {"user": u, "product": p, "batch": batch}) for u in TIERS for p in ("p1", "p2", "p3")]
    job.streams.write(CLICKS, clicks)


def enriched(job: Job) -> list[dict[str, Any]]:
    return [click for pairs in job.streams.read(OUTPUT, idle_timeout=0.5).values() for _, click in pairs]


def serving(job: Job, version: str) -> bool:
    """Whether every container serves ``version`` of the catalog, as of its adjunct loop's last commit."""
    catalog = [position for position in job.status().adjunct if position.store == "catalog"]
    return len({p.owner for p in catalog}) == 2 and all(p.version == version for p in catalog)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up after {timeout} s waiting for {what}")
        time.sleep(0.2)


def wrong_clicks(clicks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The enriched clicks that do not carry the final profile and their batch's catalog version."""
    wrong = []
    for click in clicks:
        title, price = CATALOG[click["batch"]].get(click["product"], (None, None))
        if (click["tier"], click["title"], click["price"]) != (TIERS[click["user"]], title, price):
            wrong.append(click)
    return wrong


def main(argv: list[str] | None = None, spark: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=HERE / ".millstream")
    args = parser.parse_args(argv)
    shutil.rmtree(args.data_dir, ignore_errors=True)
    job = Job.from_file(HERE / "job.yaml", {"job.data.dir": str(args.data_dir)})
    spark = spark or job.spark_session("local[3]")
    create_streams(job)
    first = build_catalog(spark, job, args.data_dir, "v1")

    outcome: list[JobResult] = []
    running = threading.Thread(target=lambda: outcome.append(job.run(spark=spark)))
    running.start()
    wait_for(lambda: serving(job, first), "both containers to serve catalog v1")
    write_clicks(job, "v1")
    wait_for(lambda: len(enriched(job)) == 12, "the first 12 clicks")
    second = build_catalog(spark, job, args.data_dir, "v2")
    wait_for(lambda: serving(job, second), "both containers to switch to catalog v2")
    write_clicks(job, "v2")
    wait_for(lambda: len(enriched(job)) == 24, "the next 12 clicks")
    job.stop()
    running.join()

    clicks = enriched(job)
    for click in clicks:
        product = f"{click['product']} {click['title']} {click['price']}"
        print(f"{click['batch']} {click['user']} {click['tier']:<8} {product}")
    if outcome[0].outcome != "stopped" or wrong_clicks(clicks):
        print(f"WRONG: {outcome[0].outcome} {outcome[0].error or ''}; wrong clicks: {wrong_clicks(clicks)}")
        return 1
    print("OK: every click carries its user's latest profile and its batch's catalog version")
    return 0


if __name__ == "__main__":
    sys.exit(main())
