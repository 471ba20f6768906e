"""Print the example job's result: views per page, most viewed first."""

from __future__ import annotations

import sys
from pathlib import Path

from millstream import Job


def main() -> None:
    job = Job.from_file(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("job.yaml"))
    partitions = job.streams.read("log.page-view-counts")
    counts = [value for pairs in partitions.values() for _, value in pairs]
    total = sum(item["views"] for item in counts)
    print(f"{'page':<14}{'views':>8}")
    for item in sorted(counts, key=lambda c: (-c["views"], c["page"])):
        print(f"{item['page']:<14}{item['views']:>8}")
    print(f"{'total':<14}{total:>8}")


if __name__ == "__main__":
    main()
