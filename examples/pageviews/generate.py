"""Write a bounded stream of page-view events for the example job, and an empty output stream.

Events are keyed by page, so every view of a page lands in the same partition and one task holds
its whole count; the stream is sealed, so the job reaches end-of-stream, emits its counts and ends.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from millstream import Job

PAGES = ["/home", "/search", "/product/42", "/product/7", "/cart", "/checkout", "/help"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", default=str(Path(__file__).with_name("job.yaml")))
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    job = Job.from_file(args.config)
    for stream in ("log.page-views", "log.page-view-counts"):
        job.streams.delete(stream)
        job.streams.create(stream, args.partitions)

    rng = random.Random(args.seed)
    weights = [40, 20, 12, 10, 8, 6, 4]
    pages = rng.choices(PAGES, weights, k=args.events)
    events = (
        (page, {"page": page, "user": f"user-{rng.randrange(500)}", "ts": 1_700_000_000_000 + i})
        for i, page in enumerate(pages)
    )
    count = job.streams.write("log.page-views", events)
    job.streams.seal("log.page-views")
    job.reset()  # a fresh input: the job starts from scratch, not from the checkpoints of an earlier run
    print(f"wrote {count} page views over {args.partitions} partitions")


if __name__ == "__main__":
    main()
