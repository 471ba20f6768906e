"""Write a bounded stream of page-view events for the example job, and an empty output stream.

Events are keyed by page, so every view of a page lands in the same partition and one task holds
its whole count; the stream is sealed, so the job reaches end-of-stream, emits its counts and ends.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from millstream.checkpoint.factory import checkpoint_manager
from millstream.coordinator.prepare import load_job_config
from millstream.metadata.factory import metadata_store
from millstream.model import SystemStream
from millstream.systems.base import StreamSpec
from millstream.systems.registry import system_factory
from millstream.testing import write_stream

PAGES = ["/home", "/search", "/product/42", "/product/7", "/cart", "/checkout", "/help"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", default=str(Path(__file__).with_name("job.yaml")))
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    config = load_job_config(args.config)
    admin = system_factory(config, "log").get_admin("log", config)
    admin.start()
    for stream in ("page-views", "page-view-counts"):
        admin.clear_stream(StreamSpec("log", stream))
    admin.create_stream(StreamSpec("log", "page-views", args.partitions))
    admin.create_stream(StreamSpec("log", "page-view-counts", args.partitions))

    rng = random.Random(args.seed)
    weights = [40, 20, 12, 10, 8, 6, 4]
    pages = rng.choices(PAGES, weights, k=args.events)
    events = (
        (page, {"page": page, "user": f"user-{rng.randrange(500)}", "ts": 1_700_000_000_000 + i})
        for i, page in enumerate(pages)
    )
    count = write_stream(config, SystemStream("log", "page-views"), events)
    admin.seal_stream("page-views")
    admin.stop()
    store = metadata_store(config)
    checkpoint_manager(config, store).clear_checkpoints()  # a fresh input: start the job from scratch
    store.close()
    print(f"wrote {count} page views over {args.partitions} partitions")


if __name__ == "__main__":
    main()
